"""What a result file says of where it ran: the environment, the torch observations taken before
the class under test is imported, the hypothesis profile in force. Imported where a result is
written: an inert run (or xdist's controller) imports no torch and no hypothesis through it.
"""

from __future__ import annotations

import platform
from typing import Any

from cpugpu_conformance import devices

from ..shared import threads


def environment() -> dict[str, Any]:
    import hypothesis
    import numpy
    import torch

    return {
        "torch": torch.__version__,
        "torch_git_version": getattr(torch.version, "git_version", None),
        **devices.environment(),
        "numpy": numpy.__version__,
        "hypothesis": hypothesis.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        **threads.environment(),  # the intra-op thread counts the tests and the copies ran with
    }


def observations() -> dict[str, Any]:
    try:
        from cpugpu_conformance import observe
    except ImportError:
        return {}
    return observe.observe_all()


def profile_in_force() -> str:
    from hypothesis import settings  # only where a result is written: an inert run imports no hypothesis

    return getattr(settings, "_current_profile", None) or "default"


def torch_version() -> str:
    import torch

    return str(torch.__version__)
