"""What the tests of the CUDA column's logic share: the fixtures `as_run` (a function as the suite runs
it, or as the CUDA reproducer that calls it defines it) and `fake_cuda` (fake_cuda.py's stand-in in
torch.cuda's place), a recorder outside a pytest run and the evidence it judges, and the variable that
makes every CUDA launch synchronous.
"""

from __future__ import annotations

import types

import pytest
import torch
from fake_cuda import FakeCuda, patch_torch
from reproducer_parts import definitions, script_for

from cpugpu_conformance.testing.verdict import judge, recording

CUDA = torch.device("cuda")
CUDA_ENV = "CUDA_LAUNCH_BLOCKING"


@pytest.fixture(params=["suite", "reproducer"], name="as_run")
def as_run_fixture(request):
    """`as_run(func)`: func as the suite runs it, or as the CUDA reproducer that calls it defines it."""
    if request.param == "suite":
        return lambda func: func
    return lambda func: definitions(script_for("cuda", func))[func.__name__]


@pytest.fixture(name="fake_cuda")
def fake_cuda_fixture(monkeypatch):
    """`fake_cuda(count, contexts)`: a FakeCuda in torch.cuda's place for this test."""
    return lambda count=1, contexts=None: patch_torch(monkeypatch, FakeCuda(count=count, contexts=contexts))


def recorder_with(device_plan, tmp_path):
    """A recorder outside a pytest run: the plan is where a run's recorder reads it, in the config's stash."""
    stash = pytest.Stash()
    stash[recording.PLAN] = device_plan
    return recording.CellRecorder(types.SimpleNamespace(stash=stash), str(tmp_path / "cell.json"), "cell", None,
                                  "impl", "ci")


def evidence(key, device, promise, stamp, outcome, *, detail=None, observed=None):
    """What the reports of one contract test of TestX said (judge.py)."""
    facts = {"nodeid": f"t.py::TestX::{key}", "class": "t.TestX", "test": key.split("[")[0], "key": key,
             "device": device, "promises": [promise], "contract": True, "opt_out": False}
    ev = judge.TestEvidence(facts)
    when = "setup" if outcome == "skipped" else "call"
    props = {"stamp": stamp, "stamp_detail": detail, "observed": observed}
    ev.add(when, outcome, props, None, detail if outcome == "skipped" else None, None)
    return ev


def judgement(*tests, required):
    inventory = judge.Inventory({ev.nodeid: ev.facts for ev in tests})
    return judge.Judgement({ev.nodeid: ev for ev in tests}, inventory, required, {})
