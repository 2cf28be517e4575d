"""What a run records: in-step statistics, probes and TensorBoard writers."""
