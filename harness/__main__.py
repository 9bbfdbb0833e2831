"""python -m harness <command> ...: see harness/cli.py for the sub-commands."""
import sys

from harness.cli import main

if __name__ == "__main__":
    sys.exit(main())
