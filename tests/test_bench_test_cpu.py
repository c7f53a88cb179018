"""benchmarks/bench_test_cpu.py counts what it says: each fresh process once, a forked child never,
nothing without its variable, and it leaves the environment as it found it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
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
    [only], unreadable = bench.read_log(log)
    assert unreadable == 0
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


def test_a_record_cut_short_is_left_out_and_counted(tmp_path):
    (tmp_path / "1").write_text("2.500\t0.000\t1\t0\t7\t-c\n")
    (tmp_path / "2").write_text("1.2")  # a process killed while it wrote
    processes, unreadable = bench.read_log(tmp_path)
    assert [p.cpu for p in processes] == [2.5] and unreadable == 1
    text = bench.report(processes, busy=0.0, idle=0.0, wall=0.0, torch_cpu=2.0, top=1, unreadable=unreadable)
    assert "fresh Python processes seen: 1, 2 s of CPU" in text and "1 more wrote a record cut short, left out" in text


# The benchmark, its hook going to a folder of the test's (not this environment's site-packages,
# which the other tests' processes read), run on a test that waits to be interrupted.
DRIVER = """
import sys
from pathlib import Path
sys.path.insert(0, {benchmarks!r})
import bench_test_cpu
bench_test_cpu.site_packages = lambda: Path({site!r})
sys.exit(bench_test_cpu.main(["--repeat", "1", "--", {test!r}, "-q", "-p", "no:cacheprovider"]))
"""
WAITS = """
import os, pathlib, time
def test_waits():
    part = pathlib.Path({marker!r} + ".part")
    part.write_text(str(os.getpid()))
    part.replace({marker!r})
    time.sleep(120)
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_a_signal_stops_pytest_removes_the_hook_and_exits_with_the_signal(tmp_path, signum):
    site, marker = tmp_path / "site", tmp_path / "testing"
    site.mkdir()
    test = tmp_path / "test_waits.py"
    test.write_text(WAITS.format(marker=str(marker)))
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER.format(benchmarks=str(REPO / "benchmarks"), site=str(site), test=str(test)))
    # Started ignoring SIGINT, as a background job is: the benchmark still passes it on, and pytest acts on it.
    proc = subprocess.Popen([sys.executable, str(driver)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    assert sorted(p.name for p in site.iterdir()) == [f"{bench.HOOK_NAME}.pth", f"{bench.HOOK_NAME}.py"]
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signum, (proc.returncode, out, err)
    assert err.strip().splitlines()[-1].startswith(f"bench_test_cpu: interrupted by {signum.name}: pytest ended with")
    assert "Traceback" not in out + err and "fresh Python processes" not in out
    assert not list(site.iterdir())
    with pytest.raises(ProcessLookupError):  # the test's process went with it
        os.kill(int(marker.read_text()), 0)
