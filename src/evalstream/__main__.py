"""``python -m evalstream``: the command line."""

import sys

from evalstream.cli import main

if __name__ == "__main__":
    sys.exit(main())
