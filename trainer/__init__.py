"""normlab: a normalization and residual ablation lab for Transformer language models.

Importing the package changes nothing outside it (no environment variable, no matplotlib
backend): the command line (``trainer/__main__.py``) sets what it needs.
"""

__version__ = "0.1.0"


def import_tensorflow_quietly():
    """Import TensorFlow with stderr muted: its CUDA probe on CPU machines logs through absl
    before TF_CPP_MIN_LOG_LEVEL is read. Errors still surface (as the raised exception)."""
    import os
    import sys

    if "tensorflow" in sys.modules:
        return sys.modules["tensorflow"]
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        import tensorflow
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
    tensorflow.get_logger().setLevel("ERROR")  # bucket shapes retrace on purpose: no warnings
    return tensorflow
