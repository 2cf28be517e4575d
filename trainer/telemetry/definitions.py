"""What the probes measure, as numbers: no TensorFlow here, so the claims can read them."""

# DyT saturation (F14): tanh'(3) < 0.01: past |α·x| = 3 the nonlinearity passes under 1 % of a change.
SATURATION_X = 3.0
