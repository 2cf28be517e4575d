"""``python -m trainer.bench ...`` is ``python -m trainer bench ...``."""

import sys

from trainer.__main__ import main

sys.exit(main(["bench", *sys.argv[1:]]))
