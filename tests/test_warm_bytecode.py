"""tools/warm_bytecode.py: the caches it writes are read by later processes; a failure of its own
only costs time (exit 0, one line), but an interruption stops the session (exit 130)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import forkserver
import pytest
from suite_runner import REPO

TOOL = Path(__file__).resolve().parent.parent / "tools" / "warm_bytecode.py"


@pytest.fixture
def warm():
    spec = importlib.util.spec_from_file_location("warm_bytecode", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_it_compiles_what_it_is_given_even_where_bytecode_is_not_written(warm, tmp_path, monkeypatch):
    (tmp_path / "mod.py").write_text("X = 1\n")
    (tmp_path / "broken.py").write_text("def (:\n")
    monkeypatch.setattr(warm, "CHECKOUT", [tmp_path])
    monkeypatch.setattr(warm.sysconfig, "get_paths", lambda: {"purelib": str(tmp_path / "none")})
    monkeypatch.setattr(warm.sys, "dont_write_bytecode", True)
    warm.compile_sources()
    assert [p.name.split(".")[0] for p in (tmp_path / "__pycache__").iterdir()] == ["mod"]


def test_it_passes_over_what_no_process_of_the_tests_imports(warm, tmp_path, monkeypatch):
    purelib = tmp_path / "site-packages"
    for name in ("sympy/core.py", "torch/_inductor/ir.py", "torch/_dynamo/eval_frame.py", "torch/nn.py",
                 "torch/_inductor_not/kept.py", "numpy/core.py"):
        (purelib / name).parent.mkdir(parents=True, exist_ok=True)
        (purelib / name).write_text("X = 1\n")
    monkeypatch.setattr(warm, "CHECKOUT", [])
    monkeypatch.setattr(warm.sysconfig, "get_paths", lambda: {"purelib": str(purelib)})
    warm.compile_sources()
    compiled = sorted(str(p.parent.parent.relative_to(purelib) / p.name.split(".")[0]) for p in purelib.rglob("*.pyc"))
    assert compiled == ["numpy/core", "torch/_inductor_not/kept", "torch/nn"]


def test_a_warm_folder_is_read_not_handed_to_compileall_and_a_changed_file_is_compiled_again(warm, tmp_path, monkeypatch):
    """nox reuses the environment: the second warm-up checks the headers itself (0.4 s, where compileall's
    workers take 4 s to say nothing is stale), and compiles what changed since, as compileall would."""
    (tmp_path / "mod.py").write_text("X = 1\n")
    (tmp_path / "other.py").write_text("Y = 1\n")
    monkeypatch.setattr(warm, "CHECKOUT", [tmp_path])
    monkeypatch.setattr(warm.sysconfig, "get_paths", lambda: {"purelib": str(tmp_path / "none")})
    warm.compile_sources()
    assert warm.stale_sources(tmp_path, None) == []
    handed = []
    monkeypatch.setattr(warm.compileall, "compile_dir", lambda folder, **kw: handed.append(folder))
    (tmp_path / "mod.py").write_text("X = 22\n")  # another size; an mtime a second on, as an edit has
    os.utime(tmp_path / "mod.py", (1_000_000_000, 1_000_000_000))
    assert warm.stale_sources(tmp_path, None) == [str(tmp_path / "mod.py")]
    warm.compile_sources()
    assert handed == [] and warm.stale_sources(tmp_path, None) == []


def test_a_cold_folder_goes_to_compileall_on_every_core(warm, tmp_path, monkeypatch):
    for i in range(warm.FEW + 1):
        (tmp_path / f"m{i}.py").write_text("X = 1\n")
    monkeypatch.setattr(warm, "CHECKOUT", [tmp_path])
    monkeypatch.setattr(warm.sysconfig, "get_paths", lambda: {"purelib": str(tmp_path / "none")})
    handed = []
    monkeypatch.setattr(warm.compileall, "compile_dir", lambda folder, **kw: handed.append((folder, kw["workers"])))
    warm.compile_sources()
    assert handed == [(tmp_path, 0)]


# What the tests' processes import: the suite run in-process (its plugin, torch's ops), the tools, and
# what building and loading sim imports (its C++ extension tools).
IMPORTS_OF_THE_TESTS = f"""
import sys, tempfile
import pytest
import cpugpu_conformance.cli, cpugpu_conformance.report, cpugpu_conformance.runner, cpugpu_conformance.matrix
import cpugpu_conformance.testing.engine.mutable_state, cpugpu_conformance.results
import cpugpu_conformance.sim.build
from torch.utils import cpp_extension
with tempfile.TemporaryDirectory() as tmp:
    code = pytest.main([{str(REPO / "conformance")!r}, "-q", "-p", "no:cacheprovider", "--promise", "1,3",
                        "--device", "cpu", "--cell-result", tmp + "/cell.json"])
print(sorted(name for name in sys.modules if name.replace(".", "/").startswith(tuple(NOT_IMPORTED))), code)
"""


def test_no_process_of_the_tests_imports_what_it_passes_over(warm, tmp_path):
    """NOT_IMPORTED is left cold on purpose: if a torch or a change of ours starts importing one of
    them, the tests' processes compile it each time (PYTHONDONTWRITEBYTECODE), and this says which."""
    probe = tmp_path / "probe.py"
    probe.write_text(f"NOT_IMPORTED = {warm.NOT_IMPORTED!r}\n" + IMPORTS_OF_THE_TESTS)
    run = forkserver.run_python([str(probe)], cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert run.stdout.splitlines()[-1] == "[] 0", run.stdout[-2000:]


@pytest.mark.parametrize(("outcome", "code", "said"), [
    (0, 0, ""),
    (1, 0, "warm_bytecode: the suite on the reference exited 1; the tests will say why\n"),
    (int(pytest.ExitCode.INTERRUPTED), 130, "warm_bytecode: interrupted\n"),
    (KeyboardInterrupt, 130, "warm_bytecode: interrupted\n"),
], ids=["passed", "failed", "pytest-interrupted", "ctrl-c"])
def test_what_it_exits_with(warm, monkeypatch, capsys, outcome, code, said):
    def rewrite():
        if outcome is KeyboardInterrupt:
            raise KeyboardInterrupt
        return outcome

    monkeypatch.setattr(warm, "compile_sources", lambda: None)
    monkeypatch.setattr(warm, "rewrite_plugin", rewrite)
    assert warm.main() == code
    assert capsys.readouterr().err == said


def test_sigint_during_the_warm_up_exits_130():
    """A real SIGINT, sent while it compiles, as Ctrl-C would: exit 130, one line, no traceback."""
    driver = (
        "import importlib.util, os, signal, sys\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        f"spec = importlib.util.spec_from_file_location('warm_bytecode', {str(TOOL)!r})\n"
        "warm = importlib.util.module_from_spec(spec); spec.loader.exec_module(warm)\n"
        "warm.compile_sources = lambda: os.kill(os.getpid(), signal.SIGINT)\n"
        "sys.exit(warm.main())\n"
    )
    proc = subprocess.run([sys.executable, "-c", driver], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 130, (proc.returncode, proc.stderr[-2000:])
    assert proc.stderr == "warm_bytecode: interrupted\n", proc.stderr[-2000:]
