"""``python -m trainer.bench ...``: the bench's own entry (``trainer.bench.cli.main``), the same
command as ``python -m trainer bench ...`` without going through the lab's command line."""

import sys

from trainer import command_line_environment

command_line_environment()  # before anything imports TensorFlow

from trainer.bench.cli import main  # noqa: E402

sys.exit(main(sys.argv[1:]))
