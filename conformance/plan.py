"""What a run was asked to test: which devices (and why not the others), which promises."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import torch

from cpugpu_conformance.promises import DEVICES, PROMISES


@dataclass(frozen=True)
class DevicePlan:
    """Devices split three ways: tested; asked for but missing (skipped, never passed); not asked for."""

    option: str | None  # --device as given; None: the devices this machine has
    tested: tuple[str, ...]
    skipped: dict[str, str] = field(default_factory=dict)  # device -> why it is missing
    not_requested: dict[str, str] = field(default_factory=dict)  # device -> why it was not asked for

    @property
    def parametrized(self) -> list[str]:
        """Devices tests are made for: a missing device's tests are made, and skipped with its reason."""
        return [d for d in DEVICES if d in self.tested or d in self.skipped]

    @property
    def nothing_testable(self) -> bool:
        return not self.tested

    def entry(self, device: str) -> dict[str, str]:
        """The device's entry in the result file."""
        if device in self.tested:
            return {"status": "tested"}
        if device in self.skipped:
            return {"status": "skipped", "reason": self.skipped[device]}
        return {"status": "not_requested", "reason": self.not_requested.get(device, "not requested")}


def cuda_missing_reason() -> str | None:
    if torch.cuda.is_available():
        return None
    build = f"built with CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
    return f"no CUDA device: torch.cuda.is_available() is False (torch {torch.__version__}, {build})"


def plan_devices(option: str | None, cuda_missing: str | None) -> DevicePlan:
    """--device cpu|cuda|all, or None: every device this machine has."""
    if option is None:
        if cuda_missing:
            return DevicePlan(None, ("cpu",), not_requested={"cuda": f"not requested (default: the devices this machine has): {cuda_missing}"})
        return DevicePlan(None, tuple(DEVICES))
    wanted = list(DEVICES) if option == "all" else [option]
    missing = {"cuda": cuda_missing} if cuda_missing and "cuda" in wanted else {}
    return DevicePlan(
        option,
        tuple(d for d in wanted if d not in missing),
        skipped=missing,
        not_requested={d: f"not requested (--device {option})" for d in DEVICES if d not in wanted},
    )


def select_promises(option: str | None) -> frozenset[str] | None:
    """--promise 3,5 as a set of promise numbers; None: every promise."""
    if option is None:
        return None
    chosen = {p.strip() for p in option.split(",") if p.strip()}
    unknown = sorted(chosen - PROMISES.keys())
    if unknown or not chosen:
        raise pytest.UsageError(f"--promise {option!r}: unknown promise {', '.join(unknown) or '(none)'}; expected numbers 1-{len(PROMISES)}")
    return frozenset(chosen)


def in_contract_order(promises: frozenset[str] | None) -> list[str] | None:
    return None if promises is None else [p for p in PROMISES if p in promises]
