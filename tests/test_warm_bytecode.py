"""tools/warm_bytecode.py: the caches it writes are read by later processes; a failure of its own
only costs time (exit 0, one line), but an interruption stops the session (exit 130)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

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
