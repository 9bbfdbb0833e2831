"""python -m harness <command> ...: the sub-commands are in harness/commands/."""

import sys

from harness.commands import main

if __name__ == "__main__":
    sys.exit(main())
