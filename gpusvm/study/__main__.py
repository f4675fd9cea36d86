"""``python -m gpusvm.study``: the same as ``gpusvm study``."""

import sys

from ..cli import main

if __name__ == "__main__":
    sys.exit(main(["study", *sys.argv[1:]]))
