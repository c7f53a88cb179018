"""Cell result dicts for the report and gate tests, built through results.CellResult.new.

Every dict passes results.validate, so the tests exercise the same shape the suite writes.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from cpugpu_conformance import results
from cpugpu_conformance.promises import PROMISES, RECORDED_ONLY, applies
from cpugpu_conformance.results import CellResult


def validate(result: Any) -> dict[str, Any]:
    """A plain dict of the result, checked by the model (tests edit it, then write it)."""
    return dict(results.CellResult(dict(result), "<result_factory>").to_json())

PIN_MEMORY_TEXT = "RuntimeError: Cannot access accelerator device when none is available."

# As observe.py records them: a value or an error, some with a "doc" saying what the probe does.
BASE_OBSERVATIONS: dict[str, Any] = {
    "inference_tensor.is_inference": {"doc": "is_inference() of torch.zeros(2) made in inference mode", "value": True},
    "numpy.bfloat16": {
        "doc": "torch.zeros(2, dtype=torch.bfloat16).numpy()",
        "error": {"type": "TypeError", "message": "Got unsupported ScalarType BFloat16"},
    },
    "pin_memory.no_accelerator": {"error": {"type": "RuntimeError", "message": "Cannot access accelerator device"}},
    "numpy.dtypes": {"value": ["bool", "float32", "int64"]},
}


def environment(torch: str, cuda: bool = False) -> dict[str, Any]:
    return {
        "torch": torch,
        "torch_git_version": "0123abcd",
        "torch_cuda": "12.8" if cuda else None,
        "cuda_available": cuda,
        "gpu_name": "NVIDIA H200" if cuda else None,
        "numpy": "2.1.3",
        "python": "3.11.9",
        "platform": "Linux-x86_64",
        "hypothesis": "6.170.17",
    }


def devices(cuda: bool = False) -> dict[str, Any]:
    return {
        "cpu": {"status": "tested"},
        "cuda": {"status": "tested"} if cuda else {"status": "not_requested", "reason": "not requested: no CUDA device"},
    }


def completed(
    torch: str,
    *,
    cell: str | None = None,
    cuda: bool = False,
    failed: dict[tuple[str, str], list[dict[str, Any]]] | None = None,
    observed_11: str = PIN_MEMORY_TEXT,
    observations: dict[str, Any] | None = None,
    drop_promises: tuple[str, ...] = (),
    profile: str = "ci",
) -> dict[str, Any]:
    """A completed cell where every promise passed except those in ``failed``.

    failed: (promise, device) -> failures list.
    """
    failed = failed or {}
    tested = ["cpu", "cuda"] if cuda else ["cpu"]
    promises: dict[str, Any] = {}
    for number, title in PROMISES.items():
        if number in drop_promises:
            continue
        per_device: dict[str, Any] = {}
        for device in ("cpu", "cuda"):
            if device not in tested:
                per_device[device] = {"verdict": "not_requested", "reason": "not requested: no CUDA device"}
            elif not applies(number, device):
                per_device[device] = {"verdict": "not_applicable"}
            elif number in RECORDED_ONLY:
                per_device[device] = {"verdict": "recorded", "passed": 2, "failed": 0, "skipped": 0, "observed": observed_11}
            elif (number, device) in failed:
                failures = failed[(number, device)]
                per_device[device] = {"verdict": "failed", "passed": 2, "failed": len(failures), "skipped": 0,
                                      "failures": failures}
            else:
                per_device[device] = {"verdict": "passed", "passed": 3, "failed": 0, "skipped": 0}
        promises[number] = {"title": title, "devices": per_device}
    result = CellResult.new(
        cell or f"torch-{torch}",
        "completed",
        requested={"torch": torch, "device": "all" if cuda else "cpu"},
        environment=environment(torch, cuda),
        devices=devices(cuda),
        promises=promises,
        counts={"passed": 30, "failed": sum(len(f) for f in failed.values()), "skipped": 0},
        observations=copy.deepcopy(BASE_OBSERVATIONS if observations is None else observations),
        impl="cpugpu_conformance.reference:CpuGpuBuffer",
        hypothesis_profile=profile,
        started="2026-11-29T19:00:00Z",
        duration_s=12.5,
    )
    return validate(result)


def incomplete(torch: str, status: str, detail: str, *, cell: str | None = None) -> dict[str, Any]:
    """A cell that never produced verdicts (crashed, timed_out, not_installed, ...)."""
    return validate(CellResult.new(cell or f"torch-{torch}", status, requested={"torch": torch, "device": "cpu"}, detail=detail))


def failure(test: str, message: str, reproducer: str | None) -> dict[str, Any]:
    return {"test": test, "message": message, "reproducer": reproducer}


def write(folder: Path, name: str, result: dict[str, Any]) -> Path:
    """Write a (re-validated: tests may have edited it) result where the report or gate will read it."""
    path = folder / name
    path.write_text(json.dumps(validate(result), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path
