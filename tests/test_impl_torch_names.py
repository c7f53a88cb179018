"""An --impl import that replaces a torch function the checks call is named, CUDA ones included
(issue 15, item 9): on a CPU-only machine torch.cuda's functions exist all the same."""

from __future__ import annotations

import inspect

import pytest
import torch
from suite_runner import run_suite

from cpugpu_conformance import impl

# What the checks call on CUDA (devices.py, the promise 10 and 12 checks, the contexts).
CUDA_NAMES = (
    "torch.cuda.synchronize",
    "torch.cuda.current_stream",
    "torch.cuda.current_device",
    "torch.cuda.Stream",
    "torch.cuda.Stream.synchronize",
    "torch.cuda.Stream.query",
    "torch.cuda.Stream.wait_stream",
    "torch.cuda.Event",
    "torch.cuda.set_sync_debug_mode",
    "torch.cuda._sleep",
)

REPLACING_IMPL = """
import torch

from cpugpu_conformance.reference import CpuGpuBuffer


def stand_in(*args, **kwargs):
    return None


setattr({owner}, {attr!r}, stand_in)
"""


def _owner(name: str):
    *path, attr = name.split(".")
    obj = torch
    for part in path[1:]:
        obj = getattr(obj, part)
    return obj, attr


@pytest.mark.parametrize("name", CUDA_NAMES)
def test_an_import_that_replaces_a_cuda_function_the_checks_call_is_named(name, tmp_path, monkeypatch):
    assert name in impl.TORCH_NAMES
    owner, attr = _owner(name)
    monkeypatch.setattr(owner, attr, inspect.getattr_static(owner, attr))  # undone after the test
    module = tmp_path / "replacing_impl.py"
    module.write_text(REPLACING_IMPL.format(owner=name.rsplit(".", 1)[0], attr=attr))
    replaced = impl.load(f"{module}:CpuGpuBuffer").replaced_torch
    # A class replaced takes its methods with it (torch.cuda.Stream.synchronize, ...): named too.
    assert replaced[0] == name and all(n.startswith(name + ".") for n in replaced[1:]), replaced


def test_an_import_that_replaces_nothing_is_not_warned_about(tmp_path):
    assert impl.load("cpugpu_conformance.reference:CpuGpuBuffer").replaced_torch == ()


def test_a_cuda_name_this_torch_lacks_is_tolerated(monkeypatch):
    # Older releases lack some (set_sync_debug_mode before 1.10): absent before and after is no change.
    monkeypatch.delattr(torch.cuda, "set_sync_debug_mode")
    found = impl.torch_identities()
    assert "torch.cuda.set_sync_debug_mode" in found
    assert impl.replaced_names(found, impl.torch_identities()) == ()


def test_the_suite_refuses_a_class_whose_import_replaces_cuda_synchronize(tmp_path):
    """torch is torch (issue 28, item 4): a run against a patched torch is an error naming the function."""
    module = tmp_path / "replacing_impl.py"
    module.write_text(REPLACING_IMPL.format(owner="torch.cuda", attr="synchronize"))
    run = run_suite(tmp_path, "--impl", f"{module}:CpuGpuBuffer", "--promise", "11", "--device", "cpu")
    assert run.returncode == 4, run.stdout[-3000:]
    assert run.cell.status == "error" and "torch.cuda.synchronize (now " in run.cell.detail, run.cell.detail
    assert "replacing_impl.stand_in)" in run.cell.detail, run.cell.detail
    assert "torch is not torch's own" in run.stderr, run.stderr[-2000:]


def test_a_cache_torch_puts_on_its_own_function_is_still_torchs_own(monkeypatch):
    """torch before 2.4 wraps torch.cuda.device_count in functools.lru_cache: the wrapper is no function of
    a torch file, and the whole matrix's 2.0-2.3 cells were errors ("not torch's own") until it counted as
    torch's when what it wraps is. A cache around someone else's function is still named."""
    import functools

    assert "torch.cuda.device_count" in impl.TORCH_NAMES
    monkeypatch.setattr(torch.cuda, "device_count", functools.lru_cache(maxsize=1)(torch.cuda.device_count))
    assert impl.not_torchs_own() == []

    def device_count() -> int:
        return 0

    monkeypatch.setattr(torch.cuda, "device_count", functools.lru_cache(maxsize=1)(device_count))
    assert [line.split(" ")[0] for line in impl.not_torchs_own()] == ["torch.cuda.device_count"]


def test_a_tensor_method_of_torchs_older_base_class_is_torchs_own():
    """Before torch 2.3 Tensor's C methods belong to torch._C._TensorBase: the 2.0-2.2 cells read every
    one of them as replaced until that name counted. Another C type's method of the same name does not."""
    from pathlib import Path
    from types import SimpleNamespace

    home = Path(torch.__file__).resolve().parent
    older = type("_TensorBase", (), {"__module__": "torch._C"})
    assert impl._made_by_torch(SimpleNamespace(__name__="copy_", __objclass__=older), "copy_", home)
    foreign = type("_TensorBase", (), {"__module__": "mylib"})
    assert not impl._made_by_torch(SimpleNamespace(__name__="copy_", __objclass__=foreign), "copy_", home)


def test_the_watch_names_what_changed_since_it_started_and_nothing_else(monkeypatch):
    changed = impl.watch_torch()
    assert changed() == []
    monkeypatch.setattr(torch.Tensor, "copy_", lambda self, other, non_blocking=False: self)
    monkeypatch.setattr(torch._C, "_InferenceMode", lambda mode: None)
    assert [line.split(" ")[0] for line in changed()] == ["torch._C._InferenceMode", "torch.Tensor.copy_"]
    monkeypatch.undo()
    assert changed() == []


def test_every_name_is_torchs_own_in_this_torch():
    """The names below the modes (their methods, torch._C's guard) are torch's own as shipped, or every
    run would be an error."""
    found = impl.torch_identities()
    for name in ("torch.inference_mode.__enter__", "torch.no_grad.__exit__", "torch._C._InferenceMode"):
        assert found[name] is not None
    assert impl.not_torchs_own() == []
