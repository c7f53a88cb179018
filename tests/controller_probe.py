"""A pytest plugin (-p controller_probe) that writes, at the end of a run, which heavy modules
pytest-xdist's controller imported: to the file named by $CONTROLLER_PROBE."""

import json
import os
import sys


def pytest_sessionfinish(session):
    if not hasattr(session.config, "workerinput"):
        heavy = sorted(name for name in ("torch", "numpy", "cpugpu_conformance.reference") if name in sys.modules)
        with open(os.environ["CONTROLLER_PROBE"], "w") as out:
            json.dump(heavy, out)
