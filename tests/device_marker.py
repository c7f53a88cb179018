"""What ``@pytest.mark.devices(...)`` on a project test decides (conftest.py applies it)."""

from __future__ import annotations

from cpugpu_conformance import devices


def missing_device(names: list[str]) -> str | None:
    """Why this machine cannot run a test that needs the devices `names` (None: it can)."""
    for name in names:
        reason = devices.get(name).missing_reason()
        if reason is not None:
            return f"needs {name}: {reason}"
    return None
