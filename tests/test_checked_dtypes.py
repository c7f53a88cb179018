"""Say what was checked where (issue 23, item 4): the result file records, per promise and device, the
dtypes its tests were built with, so a narrower check (on CUDA torch cannot even make the bit,
sub-byte and float4 kinds) is visible, not silent; the published page shows them on demand."""

from __future__ import annotations

import json

import torch
from suite_runner import run_suite

from cpugpu_conformance.testing.shared import dtypes


def test_the_result_names_the_dtypes_each_promise_was_checked_with(tmp_path):
    run = run_suite(tmp_path, "--promise", "1,6", "--device", "cpu")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    one = run.result["promises"]["1"]["devices"]["cpu"]["dtypes"]
    # Promise 1 checks every dtype the installed torch can make on the CPU, every run.
    assert one == sorted(info.name for info in dtypes.all_dtypes("cpu")), one
    six = run.result["promises"]["6"]["devices"]["cpu"]["dtypes"]
    assert "bfloat16" in six
    assert "dtypes" not in run.result["promises"]["2"]["devices"]["cpu"]  # not asked: nothing checked


def test_the_page_shows_them_on_demand(tmp_path):
    from cpugpu_conformance.cli import dispatch

    results = tmp_path / "results"
    results.mkdir()
    run = run_suite(tmp_path, "--promise", "6", "--device", "cpu")
    (results / "torch-x-cpu.json").write_text(json.dumps(run.result))
    assert dispatch.main(["report", str(results), "--out", str(tmp_path / "compat")]) == 0
    page = (tmp_path / "compat" / "index.html").read_text(encoding="utf-8")
    assert "checked with" in page and "bfloat16" in page
    compat = json.loads((tmp_path / "compat" / "compat.json").read_text(encoding="utf-8"))
    [cell] = compat["cells"]
    assert "bfloat16" in cell["promises"]["6"]["devices"]["cpu"]["dtypes"]


def test_a_kernel_that_fails_only_at_the_wait_is_blamed_on_its_own_dtype(monkeypatch):
    """An accelerator may fail a queued kernel when it runs, not when it is called (sim runs each on
    its stream's worker; torch 2.14's bcomplex32 has no CPU fill_): the probe waits after each step,
    so the failure marks that dtype and step, not the next dtype's first wait (CI, torch 2.14.1 on
    sim: bcomplex32 read as fillable, and promise 3's test drew it and failed)."""
    pending: list[str] = []
    real_fill = torch.Tensor.fill_

    def fill_that_fails_later(self, value):
        if self.dtype == torch.float64:
            pending.append("fill_ has no kernel for float64 (for this test)")
        return real_fill(self, value)

    def settled(device):  # the wait, where a queued failure surfaces
        if pending:
            raise RuntimeError(pending.pop())

    monkeypatch.setattr(torch.Tensor, "fill_", fill_that_fails_later)
    monkeypatch.setattr(dtypes, "_settled", settled)
    wide, after = (dtypes._probe(d, "cpu") for d in (torch.float64, torch.int32))
    assert not wide.fillable and (wide.copyable, wide.zeros_empty, wide.zeros_large) == (True, True, True)
    assert after == dtypes._probe(torch.int32, "cpu") and after.fillable and after.numpy == "int32"
