"""Compiled steps, the training loop, run directories and distribution strategies."""
