"""``python -m cpugpu_conformance.mutation`` (nox's and the README's spelling): cpugpu_conformance.cli.mutation."""

import sys

from cpugpu_conformance.cli.mutation import main

if __name__ == "__main__":
    sys.exit(main())
