"""``python -m cpugpu_conformance``: the command line (cpugpu_conformance.cli)."""

import sys

from cpugpu_conformance.cli.dispatch import main

if __name__ == "__main__":
    sys.exit(main())
