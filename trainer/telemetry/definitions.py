"""What the probes measure, as numbers: no TensorFlow here, so the claims can read them."""

# DyT saturation (F14): tanh'(3) < 0.01: past |α·x| = 3 the nonlinearity passes under 1 % of a change.
SATURATION_X = 3.0

# The norm contract (telemetry/contract.py) and the claims S, F1-F7, F15, F16: per-token norms'
# logits move by float32 reassociation noise only, ~1e-6 on logits of size ~10; 1e-4 leaves 100x.
INVARIANT_MAX = 1e-4
