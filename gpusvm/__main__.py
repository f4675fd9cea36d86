"""``python -m gpusvm``: the same as the ``gpusvm`` command."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
