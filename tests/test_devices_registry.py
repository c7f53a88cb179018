"""Devices live in one registry (devices.py); the suite asks it and never names a device itself."""

from __future__ import annotations

import dataclasses
import inspect
import re

import pytest
import torch
from reproducer_parts import script_for
from suite_runner import REPO

from cpugpu_conformance import devices, promises
from cpugpu_conformance.testing.shared import checks, contexts, helpers, strategies
from cpugpu_conformance.testing.shared.reproducer import Record, Scenario
from cpugpu_conformance.testing.verdict import plan

UNAVAILABLE = {"cuda": "no CUDA device: for this test"}
NO_SIM = "not requested: sim is tested only when asked for by name"


def test_the_registry_lists_every_device_the_contract_names():
    assert devices.NAMES == promises.DEVICES == ("cpu", "cuda", "sim")
    for promise, where in promises.APPLIES_TO.items():
        assert set(where) <= set(devices.NAMES), promise


def test_an_unknown_device_is_one_line_naming_it():
    with pytest.raises(devices.UnknownDevice, match=r"^unknown device 'tpu'; expected one of cpu, cuda, sim$"):
        devices.get("tpu")


def test_availability_is_torch_s_answer_with_the_reason():
    assert devices.CPU.available and devices.CPU.missing_reason() is None
    assert devices.CUDA.available == torch.cuda.is_available()
    if not torch.cuda.is_available():
        reason = devices.unavailable()["cuda"]
        assert reason.startswith("no CUDA device: torch.cuda.is_available() is False (torch ")
        assert torch.__version__ in reason
        assert not devices.accelerator_present() and devices.accelerators(devices.unavailable()) == ()
    assert devices.accelerators({}) == ("cuda",)  # a machine with every device: CUDA is the accelerator, sim not loaded


def test_sim_can_be_tested_wherever_it_can_be_built_and_is_an_accelerator_only_once_loaded(monkeypatch):
    from cpugpu_conformance import sim
    from cpugpu_conformance.sim import build

    assert not sim.loaded()  # nothing here loads it: tests/test_sim_backend.py does, in processes of their own
    assert devices.SIM.missing_reason() == (sim.refusal() or build.missing_tools())
    assert "sim" not in devices.accelerators({})
    monkeypatch.setitem(devices.REGISTRY, "sim", dataclasses.replace(devices.SIM, loaded=lambda: True))
    assert devices.accelerators({}) == ("cuda", "sim")


def test_a_run_asks_what_sim_lacks_only_when_it_names_sim_or_sim_is_loaded(monkeypatch):
    """What sim lacks is found by importing torch's C++ extension tools and running ninja: a run that
    leaves sim out (the default, all, cpu, cuda) does not pay for it; one that names it, or runs where
    it is loaded already (torch's accelerator then), does."""
    asked: list[str] = []

    def lacking(loaded: bool):
        return dataclasses.replace(devices.SIM, missing=lambda: asked.append("sim") or "sim: no compiler (for this test)",
                                   loaded=lambda: loaded)

    monkeypatch.setitem(devices.REGISTRY, "sim", lacking(False))
    for option in (None, "all", "cpu", "cuda"):
        assert "sim" not in devices.unavailable_to_run(option), option
    assert not asked
    assert devices.unavailable_to_run("sim")["sim"] == "sim: no compiler (for this test)" and asked == ["sim"]
    assert devices.unavailable()["sim"] == "sim: no compiler (for this test)"  # the whole registry's answer, as before
    monkeypatch.setitem(devices.REGISTRY, "sim", lacking(True))
    assert devices.unavailable_to_run(None)["sim"] == "sim: no compiler (for this test)"
    # The other devices are the same either way.
    assert {k: v for k, v in devices.unavailable_to_run("cpu").items() if k != "sim"} == \
        {k: v for k, v in devices.unavailable().items() if k != "sim"}


def test_what_only_cuda_has_is_stated_by_the_registry():
    assert not devices.CPU.pinning and devices.CUDA.pinning
    assert devices.CPU.sync is devices.nothing_queued and devices.CUDA.sync is devices.cuda_sync  # tests/test_cuda_sync_and_contexts.py
    assert "current_stream(index).synchronize()" in inspect.getsource(devices.CUDA.sync)
    # Written once over torch's device-generic API, for CUDA and sim alike.
    for attribute in ("stall", "idle", "caller_state"):
        assert getattr(devices.CUDA, attribute) is getattr(devices.SIM, attribute), attribute
    assert devices.SIM.sync is devices.accelerator_sync and devices.SIM.capture is devices.sim_capture
    assert not devices.SIM.forbid_sync and not devices.SIM.launch_blocking_env  # what only CUDA has stays CUDA's
    assert devices.SIM.pinning and devices.SIM.by_name_only and devices.SIM.index == 1
    assert [f.__name__ for f in devices.SIM.contexts] == ["default_device_sim", "accelerator_device_last",
                                                         "accelerator_side_stream"]
    assert not devices.CPU.stall and not devices.CPU.forbid_sync and not devices.CPU.launch_blocking_env
    assert [f.__name__ for f in devices.CUDA.contexts] == ["default_device_cuda", "cuda_device_last", "cuda_side_stream"]
    assert not devices.CPU.contexts and devices.CPU.caller_state(torch.device("cpu")) == {}
    assert devices.CUDA.needs == "a CUDA device"


def test_the_suite_draws_its_device_specifics_from_the_registry():
    common = [c.name for c in contexts.contexts_for("cpu")]
    assert [c.name for c in contexts.contexts_for("cuda")] == common + [f.__name__ for f in devices.CUDA.contexts]
    assert [c.enter for c in contexts.contexts_for("cuda")][len(common):] == list(devices.CUDA.contexts)
    assert repr(strategies.pin_memory_for("cpu")) == "just(False)"
    assert repr(strategies.pin_memory_for("cuda")) == "booleans()"
    assert repr(strategies.pin_memory_for("sim")) == "booleans()"
    # The reproducers stay standalone: the registry's sync, written out as each device's own.
    assert helpers.sync.__per_device__ == "sync"
    for device in (devices.CPU, devices.CUDA):  # sim's reproducers need sim loaded: tests/test_sim_suite.py
        own = inspect.getsource(device.sync).replace(f"def {device.sync.__name__}(", "def sync(", 1)
        script = script_for(device.name, checks.zeroed)
        assert re.sub(r"\n\s+import torch\n", "\n", own) in script, (device.name, script)


def test_a_reproducer_holds_only_its_own_device_s_function():
    """No ``if device.type == ...`` for the other devices: each script has one sync, its device's."""
    cpu, cuda = script_for("cpu", checks.zeroed), script_for("cuda", checks.zeroed)
    assert "torch.cuda" not in cpu and "torch.cuda.current_stream(index).synchronize()" in cuda
    assert "device.type ==" not in cpu + cuda and cpu.count("def sync(") == cuda.count("def sync(") == 1


@pytest.mark.parametrize(("device", "needs"), [("cpu", False), ("cuda", True)])
def test_a_reproducer_says_which_device_it_needs(device, needs):
    sc = Scenario(Record(), "1", device, size=(2,))
    assert ("# Needs a CUDA device.\n" in sc.script()) is needs


def test_plan_default_is_every_device_this_machine_has():
    default = plan.plan_devices(None, UNAVAILABLE)
    assert default.tested == ("cpu",) and not default.skipped
    assert default.not_requested.pop("cuda") == "not requested (default: the devices this machine has): no CUDA device: for this test"
    assert default.not_requested.pop("sim").startswith(f"{NO_SIM} ({plan.FLAGS['device']} sim), since loading it makes it")
    assert not default.not_requested
    assert plan.plan_devices(None, {}).tested == ("cpu", "cuda")


def test_plan_skips_a_requested_device_that_is_missing():
    every = plan.plan_devices("all", UNAVAILABLE)
    assert every.tested == ("cpu",) and every.skipped == UNAVAILABLE and list(every.not_requested) == ["sim"]
    assert every.not_requested["sim"].startswith(NO_SIM)
    cuda = plan.plan_devices("cuda", UNAVAILABLE)
    assert cuda.nothing_testable and cuda.not_requested == {"cpu": f"not requested ({plan.FLAGS['device']} cuda)",
                                                            "sim": f"not requested ({plan.FLAGS['device']} cuda)"}


@pytest.mark.parametrize(("ready", "too_old", "tested"), [
    (None, None, ("sim",)),
    ("sim: torch 2.5.1 is older than 2.6 (for this test)", "sim: torch 2.5.1 is older than 2.6 (for this test)", ()),
])
def test_plan_readies_sim_only_when_it_is_asked_for_by_name(monkeypatch, ready, too_old, tested):
    prepared = []
    stand_in = dataclasses.replace(devices.SIM, prepare=lambda: prepared.append("sim") or ready, missing=lambda: None,
                                   loaded=lambda: bool(prepared) and ready is None, release_limit=lambda: too_old)
    monkeypatch.setitem(devices.REGISTRY, "sim", stand_in)
    for option in (None, "all", "cpu"):
        assert "sim" not in plan.plan_devices(option, UNAVAILABLE).tested and not prepared
    asked = plan.plan_devices("sim", UNAVAILABLE)
    assert prepared == ["sim"] and asked.tested == tested
    assert asked.skipped == ({} if ready is None else {"sim": ready})  # a torch too old to host it: missing, with why
    assert asked.accelerators == (("sim",) if ready is None else ())  # promise 11 is not applicable beside it


def test_sim_asked_for_on_a_machine_that_cannot_build_it_is_a_usage_error(monkeypatch):
    """No compiler, or a build that failed, with a torch that can host sim: one line, never untested."""
    why = "sim: no C++ compiler (for this test)"
    stand_in = dataclasses.replace(devices.SIM, prepare=lambda: why, missing=lambda: None, release_limit=lambda: None)
    monkeypatch.setitem(devices.REGISTRY, "sim", stand_in)
    with pytest.raises(pytest.UsageError, match=rf"^{plan.FLAGS['device']} sim: sim: no C\+\+ compiler"):
        plan.plan_devices("sim", UNAVAILABLE)


def test_plan_refuses_an_unknown_device_in_one_line():
    flag = plan.FLAGS["device"]  # --cpugpu-device; the shipped suite's conftest.py spells it --device
    with pytest.raises(pytest.UsageError, match=rf"^{flag} 'tpu': unknown device; expected cpu, cuda, sim or all$"):
        plan.plan_devices("tpu", {})


def test_where_a_test_runs_comes_from_its_promises_and_its_devices_marker():
    assert plan.wanted({"10"}, "cuda", None) and not plan.wanted({"10"}, "cpu", None)  # promises.APPLIES_TO
    assert plan.wanted({"10"}, "sim", None) and not plan.wanted({"11"}, "sim", None)
    assert plan.wanted({"3"}, "cpu", None) and not plan.wanted({"3"}, "cpu", frozenset({"5"}))
    only_cuda = plan.marked_devices(["cuda"])
    assert plan.wanted({"3"}, "cuda", None, only_cuda) and not plan.wanted({"3"}, "cpu", None, only_cuda)
    assert plan.wanted(set(), "cpu", None) and not plan.wanted(set(), "cpu", frozenset({"1"}))
    with pytest.raises(ValueError, match=r"cpugpu_devices names unknown device 'gpu'"):
        plan.marked_devices(["gpu"])


# The suite's logic asks the registry rather than test for an accelerator's name ("cpu" is
# also the buffer's host side, buf.cpu, which every check names).
DEVICE_LITERAL = re.compile(r"""["']cuda["']""")
SUITE = sorted((REPO / "conformance").glob("*.py")) + sorted((REPO / "src/cpugpu_conformance/testing").rglob("*.py"))


def test_no_device_name_is_spelled_out_in_the_suite():
    assert any(path.name == "checks.py" for path in SUITE) and any(path.name == "conftest.py" for path in SUITE)
    found = [
        f"{path.name}:{n}: {line.strip()}"
        for path in SUITE
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if DEVICE_LITERAL.search(line)
    ]
    assert not found, "\n".join(found)
