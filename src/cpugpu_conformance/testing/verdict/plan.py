"""What a run was asked to test: which devices (and why not the others), which promises."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import pytest

from cpugpu_conformance import devices
from cpugpu_conformance.promises import DEVICES, PROMISES, not_applicable

# How a run spells the plugin's options, for its one-line errors: the plugin's own names, or
# the shipped suite's (conformance/conftest.py: --device, --promise, --cell-result, --cell-name),
# which it puts in the run's config.stash[SPELLING]: nothing process-wide changes.
FLAGS: Mapping[str, str] = MappingProxyType({
    "device": "--cpugpu-device",
    "promise": "--cpugpu-promise",
    "cell_result": "--cpugpu-cell-result",
    "cell_name": "--cpugpu-cell-name",
})
SPELLING = pytest.StashKey[Mapping[str, str]]()


def flags(config: pytest.Config) -> Mapping[str, str]:
    """How this run spells the options."""
    return config.stash.get(SPELLING, FLAGS)


@dataclass(frozen=True)
class DevicePlan:
    """Devices split three ways: tested; asked for but missing (skipped, never passed); not asked for."""

    option: str | None  # --device as given; None: the devices this machine has
    tested: tuple[str, ...]
    skipped: dict[str, str] = field(default_factory=dict)  # device -> why it is missing
    not_requested: dict[str, str] = field(default_factory=dict)  # device -> why it was not asked for
    # The accelerators this machine has, asked for or not: promise 11 is not applicable beside one.
    accelerators: tuple[str, ...] = ()

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


def plan_devices(option: str | None, unavailable: Mapping[str, str], spelling: Mapping[str, str] = FLAGS) -> DevicePlan:
    """--device NAME|all, or None: every device this machine has. ``unavailable``: device -> why
    this machine cannot test it (devices.unavailable_to_run(option)). A device tested only by name (sim) is
    left out of the default and of `all`, and readied here (loaded) when it is the one asked for."""
    check_device_option(option, spelling)
    unavailable = dict(unavailable)
    by_name = {d for d in DEVICES if devices.get(d).by_name_only}
    if option in by_name:
        device = devices.get(option)
        why = unavailable.get(option) or device.prepare()
        if why is not None and device.release_limit() is None:
            # Asked for by name, possible with this torch, and this machine cannot ready it (no
            # compiler, a build that failed): bad input, one line, an `error` result, never untested.
            raise pytest.UsageError(f"{spelling['device']} {option}: {why}")
        if why is not None:
            unavailable[option] = why
    left_out = {d: f"not requested: {d} is tested only when asked for by name ({spelling['device']} {d}), since "
                   f"loading it makes it torch's accelerator for the whole process" for d in by_name if d != option}
    present = devices.accelerators(unavailable)
    if option is None:
        return DevicePlan(
            None,
            tuple(d for d in DEVICES if d not in unavailable and d not in by_name),
            not_requested={**{d: f"not requested (default: the devices this machine has): {why}"
                              for d, why in unavailable.items() if d not in by_name}, **left_out},
            accelerators=present,
        )
    wanted = [d for d in DEVICES if d not in by_name] if option == "all" else [option]
    return DevicePlan(
        option,
        tuple(d for d in wanted if d not in unavailable),
        skipped={d: unavailable[d] for d in wanted if d in unavailable},
        not_requested={**{d: f"not requested ({spelling['device']} {option})" for d in DEVICES if d not in wanted},
                       **(left_out if option == "all" else {})},
        accelerators=present,
    )


def check_device_option(option: str | None, spelling: Mapping[str, str] = FLAGS) -> None:
    """--device names a device of the registry, or all (None: the default)."""
    if option is not None and option != "all" and option not in DEVICES:
        raise pytest.UsageError(
            f"{spelling['device']} {option!r}: unknown device; expected {', '.join(DEVICES)} or all")


def as_facts(plan: DevicePlan) -> dict[str, object]:
    """The plan as plain data, which pytest-xdist carries from a worker to the controller."""
    return dataclasses.asdict(plan)


def from_facts(facts: Mapping[str, Any]) -> DevicePlan:
    tested, accelerators = tuple(facts["tested"]), tuple(facts.get("accelerators", ()))
    return DevicePlan(**{**facts, "tested": tested, "accelerators": accelerators})


def refused_plan(option: str | None) -> DevicePlan:
    """The plan a result file records for a run refused before it planned (bad --device)."""
    return DevicePlan(option, (), not_requested={d: "not requested: the run was refused" for d in DEVICES})


def select_promises(option: str | None, spelling: Mapping[str, str] = FLAGS) -> frozenset[str] | None:
    """--promise 3,5 as a set of promise numbers; None: every promise."""
    if option is None:
        return None
    chosen = {p.strip() for p in option.split(",") if p.strip()}
    unknown = sorted(chosen - PROMISES.keys())
    if unknown or not chosen:
        raise pytest.UsageError(f"{spelling['promise']} {option!r}: unknown promise {', '.join(unknown) or '(none)'}; "
                                f"expected numbers 1-{len(PROMISES)}")
    return frozenset(chosen)


def in_contract_order(promises: frozenset[str] | None) -> list[str] | None:
    return None if promises is None else [p for p in PROMISES if p in promises]


def marked_devices(names: list[str]) -> frozenset[str]:
    """The devices a ``@pytest.mark.cpugpu_devices(...)`` marker names; ValueError names one the registry lacks."""
    unknown = sorted(set(names) - set(DEVICES))
    if unknown:
        raise ValueError(
            f"@pytest.mark.cpugpu_devices names unknown device {unknown[0]!r}; expected {', '.join(DEVICES)}")
    return frozenset(names)


def wanted(promises: set[str], device: str | None, chosen: frozenset[str] | None, allowed: frozenset[str] | None = None,
           accelerators: tuple[str, ...] = ()) -> bool:
    """Does a test run: on a device its marker allows (``allowed``; None: any), when one of its
    promises was asked for (``chosen``; None: all) and applies on its device on this machine
    (promises.not_applicable: APPLIES_TO, and ``accelerators``, the plan's)."""
    if allowed is not None and device not in allowed:
        return False
    if not promises:
        return chosen is None  # a test of no promise in particular: run it unless promises were chosen
    if chosen is not None:
        promises = promises & chosen
    return any(device is None or not_applicable(p, device, accelerators) is None for p in promises)
