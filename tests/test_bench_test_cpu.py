"""benchmarks/bench_test_cpu.py counts what it says: each fresh process once, a forked child never,
nothing without its variable, and it leaves the environment as it found it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
import bench_test_cpu as bench  # noqa: E402  (benchmarks/, put on the path above)

sys.path.remove(str(REPO / "benchmarks"))


def _run_with_hook(site: Path, log: Path | None, code: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != bench.VARIABLE}
    if log is not None:
        env[bench.VARIABLE] = str(log)
    # -S: this interpreter's own site-packages stay out of it; the hook is imported as the .pth line does.
    prelude = f"import sys; sys.path.insert(0, {str(site)!r}); import {bench.HOOK_NAME}; "
    subprocess.run([sys.executable, "-S", "-c", prelude + code], env=env, check=True, timeout=60)


def test_the_hook_is_there_for_the_block_only_even_when_it_raises(tmp_path):
    with bench.hook_installed(tmp_path):
        assert sorted(p.name for p in tmp_path.iterdir()) == [f"{bench.HOOK_NAME}.pth", f"{bench.HOOK_NAME}.py"]
        assert (tmp_path / f"{bench.HOOK_NAME}.pth").read_text() == f"import {bench.HOOK_NAME}\n"
    assert not list(tmp_path.iterdir())
    with pytest.raises(KeyboardInterrupt), bench.hook_installed(tmp_path):
        raise KeyboardInterrupt
    assert not list(tmp_path.iterdir())


def test_a_hook_left_by_an_interrupted_run_is_refused_in_one_line_and_kept(tmp_path):
    left = tmp_path / f"{bench.HOOK_NAME}.pth"
    left.write_text("left\n")
    with pytest.raises(SystemExit, match="already there") as refused, bench.hook_installed(tmp_path):
        pass
    assert str(left) in str(refused.value) and left.read_text() == "left\n"


def test_a_site_that_cannot_be_written_is_one_line_naming_it(tmp_path):
    site = tmp_path / "no-such-site"
    with pytest.raises(SystemExit, match="cannot write the counting hook there") as refused, bench.hook_installed(site):
        pass
    assert str(site) in str(refused.value)


def test_each_fresh_process_writes_once_and_a_forked_child_never(tmp_path):
    site, log = tmp_path / "site", tmp_path / "log"
    site.mkdir(), log.mkdir()
    (site / f"{bench.HOOK_NAME}.py").write_text(bench.HOOK)
    fork = "import os, sys\npid = os.fork()\nif pid == 0:\n    sys.exit(0)\nos.waitpid(pid, 0)\nimport json"
    _run_with_hook(site, log, fork)
    [only] = bench.read_log(log)
    assert not only.torch and not only.execnet and only.argv.startswith("-c") and only.cpu >= 0 and only.ppid == os.getpid()
    _run_with_hook(site, None, "import json")  # no variable: nothing written
    assert len(list(log.iterdir())) == 1


def test_the_report_sorts_processes_into_their_kinds():
    p = bench.Process
    processes = [
        p(2.0, 0.0, True, True, 100, "-c"),  # one of the run's own workers (its parent: the run)
        p(2.0, 0.0, True, True, 300, "-c"),  # a worker of a run a test started
        p(3.0, 0.5, True, True, 200, "/venv/lib/python3.11/site-packages/pytest/__main__.py conformance -n 2"),  # a controller
        p(2.5, 6.0, True, False, 200, '-c ["torch", "numpy"] 4 5'),  # a fork server, and what it forked
        p(1.0, 0.0, True, False, 200, "/repo/tools/gpu_check.py out"),
        p(0.1, 0.0, False, False, 200, "/venv/bin/nox --version"),
    ]
    assert [x.kind(run_pid=100) for x in processes[:5]] == [
        "the run's own test workers", "pytest-xdist workers the tests start", "pytest (python -m pytest, or its script)",
        "fork servers (tests/forkserver.py)", "scripts and tools"]
    text = bench.report(processes, busy=20.0, idle=5.0, wall=12.0, torch_cpu=2.0, top=2, run_pid=100)
    assert "fresh Python processes seen: 6, 11 s of CPU (53% of the machine's busy time)" in text
    assert "that imported torch: 5, 10 s; their imports of torch alone about 10 s (50%)" in text
    assert "what the fork servers forked (suite runs, reproducers), as their servers saw it end: 6 s (30%)" in text
    assert "everything else (what other programs and uncounted processes spent): 3 s (17%)" in text
    assert "20% idle" in text
    assert text.splitlines()[-2].strip().startswith("3.00 s") and len(text.splitlines()) == 14


def test_a_repeat_below_one_is_refused_in_one_line():
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_test_cpu.py"), "--repeat", "0"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--repeat must be at least 1, not 0" in proc.stderr.strip().splitlines()[-1]
