"""Classes under test that leave processes behind where a process-group kill cannot reach them.

STRAY_PIDFILE (environment) names the file where the class writes the pid of what it started.
"""

from __future__ import annotations

import os
import subprocess
import time


class StartsASessionOfItsOwn:
    """Starts `sleep` in a session of its own (setsid), says where, and hangs: the cell must
    stop it, and what it started, when the cell is stopped."""

    def __init__(self, *size, dtype, device, pin_memory, with_numpy=True):
        child = subprocess.Popen(["sleep", "600"], start_new_session=True)  # what `setsid sleep 600` does
        pidfile = os.environ["STRAY_PIDFILE"]
        with open(pidfile + ".tmp", "w") as fh:
            fh.write(str(child.pid))
        os.replace(pidfile + ".tmp", pidfile)
        time.sleep(600)
