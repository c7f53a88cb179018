"""The old ``python -m cpugpu_conformance.cell ...``: one line naming the command that replaced it."""

import sys

NOW = "python -m cpugpu_conformance.cell is gone: use cpugpu-conformance summary|record-unfinished|cell ..."

if __name__ == "__main__":
    print(NOW, file=sys.stderr)
    sys.exit(2)
