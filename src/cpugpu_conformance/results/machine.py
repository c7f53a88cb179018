"""Which machine and which torch release a result stands for: ``machine_kind``,
``same_release``, ``release_key``. Moved out of model.py, which re-exports every name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .text import one_line

NO_ACCELERATOR = "no accelerator"
UNKNOWN_MACHINE = "an unknown machine"


def machine_kind(environment: Mapping[str, Any]) -> str:
    """What kind of machine a result's environment describes: with no accelerator, with which
    one, or unknown (the result does not say).

    A machine is not a torch release: the accelerator, pin_memory and CUDA probes answer
    differently with a GPU, whatever the torch, so observations are compared only between
    cells of the same kind. The torch's own CUDA build (torch_cuda) is part of the release.
    """
    if environment.get("sim_loaded") is True:  # sim was the accelerator (cpugpu_conformance.sim)
        return "sim (simulated accelerator)"
    present = environment.get("cuda_available")
    if present is False:
        return NO_ACCELERATOR
    if present is True:
        name = environment.get("gpu_name")
        return f"CUDA ({one_line(name, 200)})" if isinstance(name, str) and name.strip() else "CUDA (GPU not named)"
    return UNKNOWN_MACHINE


def same_release(a: str, b: str) -> bool:
    """Whether two torch versions are one release, local labels (+cpu, +cu121) aside: 2.15 and
    2.15.0 are; 2.15.0 and 2.14.1 are not."""
    from packaging.version import InvalidVersion, Version  # the suite writes results without packaging

    a, b = a.split("+", 1)[0].strip(), b.split("+", 1)[0].strip()
    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


def release_key(release: str) -> tuple:
    """The one sort key of torch releases: versions in version order (2.16.0rc1 before 2.16.0),
    then ``latest`` (the newest, whatever it resolves to), then anything unparseable, by name."""
    from packaging.version import InvalidVersion, Version  # the suite writes results without packaging

    if release == "latest":
        return (1, Version("0"), "")
    try:
        return (0, Version(release), "")
    except InvalidVersion:
        return (2, Version("0"), release)
