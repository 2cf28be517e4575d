"""normlab: a normalization and residual ablation lab for Transformer language models.

Importing the package changes nothing outside it (no environment variable, no matplotlib
backend): the command line (``trainer/__main__.py``, ``trainer/bench/__main__.py``) sets what
it needs by ``command_line_environment``.
"""

__version__ = "0.1.0"


def command_line_environment() -> None:
    """The command line's own settings, made before anything imports TensorFlow: TF's CUDA/XLA
    chatter on CPU machines off, Keras on TensorFlow (each only where the caller set none)."""
    import os

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")


def import_tensorflow_quietly():
    """Import TensorFlow with stderr muted: its CUDA probe on CPU machines logs through absl
    before TF_CPP_MIN_LOG_LEVEL is read. None when TensorFlow cannot be imported (the findings
    page needs none: TensorBoard's event reader then uses its own stub); other errors still
    surface (as the raised exception)."""
    import os
    import sys

    if "tensorflow" in sys.modules:
        return sys.modules["tensorflow"]
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        import tensorflow
    except ImportError:  # nothing to mute; a command that needs it fails at its own import
        return None
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
    tensorflow.get_logger().setLevel("ERROR")  # bucket shapes retrace on purpose: no warnings
    return tensorflow
