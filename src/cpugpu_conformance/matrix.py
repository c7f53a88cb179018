"""``python -m cpugpu_conformance.matrix [PATH] [--json]`` (the README's, CI's and nox's spelling)
checks matrix.yaml: the command is cli/matrix_file.py, the matrix runner/matrix.py."""

import sys

from cpugpu_conformance.cli.matrix_file import main

if __name__ == "__main__":
    sys.exit(main())
