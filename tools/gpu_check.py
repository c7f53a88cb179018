"""The first run on a GPU machine without network, in one command, from a copy of the checkout:

    python tools/gpu_check.py OUT_DIR [--device all] [--proofs-for cuda] [--jobs N] [-- SUITE_ARGS]

1. the suite on every device (``--device all``), writing its result file, which ``nox -s
   report`` merges into compat/ as a column per device;
2. the project's proofs for one device (``--proofs-for cuda``): the tests of
   tests/test_variants.py and tests/test_alternatives.py marked ``@pytest.mark.devices("cuda")``,
   that is every broken variant rejected there on the promise it breaks, with a reproducer
   that fails on its own, and every correct alternative accepted (or rejected where its
   table says it breaks a promise on that device).

It needs torch, numpy, hypothesis and pytest (pytest-xdist used when present; jsonschema,
pyyaml and nox not at all) and installs nothing: its children find ``src/`` and this folder
through PYTHONPATH, which it sets. OUT_DIR gets four files, all plain names:

    <cell>.json   the suite's result file (cell ``installed-torch-<release>-<device>``)
    suite.log     the suite's whole output
    proofs.log    the proofs' whole output
    summary.txt   each step's command, exit code and time, the result file's answer; the
                  same lines end the script's own output

Exit code: 0 when the suite passed on every device asked for (its result file says so) and
every proof held; otherwise the suite's own code when it was not 0 (1 a promise failed, 2
interrupted or out of time, 3 internal error, 4 bad input, 5 nothing tested, 6 partly
tested), else the proofs' pytest code (1 a proof failed, 5 no proof ran: none is marked
for the device, or the device is missing and every one was skipped, 6 some were skipped). A suite that exits 0 with a result file
that does not say passed is 3: the exit code never says more than the result file.

A script of the checkout, not a module of the package: the proofs live in tests/, which the
wheel does not ship. Python, not shell, so its choices (which code wins, what a missing
result file means) are functions the project's tests call on a CPU-only machine.

When pytest loads this file as a plugin (``-p gpu_check``, as the proofs step does), it keeps
only the tests marked for the device named in $GPU_CHECK_PROOFS_FOR, and a skipped one
makes the run not a pass.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

TOOLS = Path(__file__).resolve().parent
REPO = TOOLS.parent
SRC = REPO / "src"
PROOF_MODULES = ("tests/test_variants.py", "tests/test_alternatives.py")
PROOFS_FOR_ENV = "GPU_CHECK_PROOFS_FOR"

STOP_GRACE_S = 15  # for a stopped suite to write its result file
EXIT_INTERRUPTED = 2
EXIT_INTERNAL = 3
EXIT_USAGE = 4
EXIT_NOTHING = 5
EXIT_PARTLY = 6

# What each exit code of a step means, for the summary (pytest's codes, and the suite's 6).
SUITE_MEANS = {0: "every promise asked for held", 1: "a promise failed", 2: "interrupted or out of time",
               3: "internal error", 4: "bad input, refused to start", 5: "nothing was tested",
               6: "some promises went untested"}
PROOFS_MEANS = {0: "every proof held", 1: "a proof did not hold", 2: "interrupted or out of time",
                3: "internal error", 4: "bad input", 5: "no proof ran (none is marked for the device, or all were skipped: it is missing)",
                6: "some proofs were skipped (the device is missing)"}


@dataclass(frozen=True)
class Step:
    name: str
    command: list[str]
    log: Path
    code: int
    seconds: float
    timed_out: bool = False
    means: str = ""

    def line(self) -> str:
        how = f"timed out, stopped after {self.seconds:.0f} s" if self.timed_out else f"exit {self.code} in {self.seconds:.1f} s"
        return f"{self.name}: {how}" + (f", {self.means}" if self.means else "") + f" ({self.log.name})"


# --- pytest plugin: the proofs for one device ------------------------------------------------


def _marked_for(item, device: str) -> bool:
    return any(device in (str(name) for name in mark.args) for mark in item.iter_markers("devices"))


class ProofTally:
    """In the process that reports (xdist's controller, or the only one): a proof skipped (its
    device is missing here) is not a pass, so the run is not one either: 5 when none ran, 6 when
    some did."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.passed = self.skipped = 0

    def pytest_runtest_logreport(self, report) -> None:
        if report.skipped:
            self.skipped += 1
        elif report.passed and report.when == "call":
            self.passed += 1

    def pytest_sessionfinish(self, session, exitstatus) -> None:
        if session.exitstatus == 0 and self.skipped:
            session.exitstatus = EXIT_PARTLY if self.passed else EXIT_NOTHING

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.skipped:
            terminalreporter.write_line(
                f"gpu_check: {self.skipped} proof(s) for {self.device} skipped, {self.passed} held: not a pass", red=True)


def pytest_configure(config) -> None:
    device = os.environ.get(PROOFS_FOR_ENV)
    if device and not hasattr(config, "workerinput"):
        config.pluginmanager.register(ProofTally(device), "gpu-check-proof-tally")


def pytest_collection_modifyitems(config, items) -> None:
    device = os.environ.get(PROOFS_FOR_ENV)
    if not device:
        return
    keep = [item for item in items if _marked_for(item, device)]
    drop = [item for item in items if not _marked_for(item, device)]
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


# --- the steps --------------------------------------------------------------------------------


def child_env(proofs_for: str | None = None) -> dict[str, str]:
    """This environment, with src/ and tools/ first on PYTHONPATH (no install needed), nothing
    that would change how pytest runs, and the device whose proofs are selected."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER", PROOFS_FOR_ENV)}
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), str(TOOLS), *filter(None, [os.environ.get("PYTHONPATH")])])
    if proofs_for:
        env[PROOFS_FOR_ENV] = proofs_for
    return env


def has_xdist() -> bool:
    import importlib.util

    return importlib.util.find_spec("xdist") is not None


def parallel(jobs: int) -> list[str]:
    """pytest-xdist's -n when it is installed and more than one job is asked for; serial otherwise."""
    return ["-n", str(jobs)] if jobs > 1 and has_xdist() else []


class Refused(Exception):
    """The check cannot start; the message is one line naming the culprit."""


def torch_release(python: str = sys.executable) -> str:
    """The torch release the children will import, without its local part (2.11.0+cu130 -> 2.11.0)."""
    code = "import torch; print(torch.__version__.split('+')[0])"
    proc = subprocess.run([python, "-c", code], capture_output=True, text=True, env=child_env(), timeout=300)
    if proc.returncode != 0 or not proc.stdout.strip():
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise Refused(f"gpu_check: {python} cannot import torch: {last}")
    return proc.stdout.strip()


def suite_command(result: Path, cell: str, device: str, jobs: int, profile: str, extra: list[str]) -> list[str]:
    return [
        sys.executable, "-m", "pytest", "conformance", "-p", "no:cacheprovider", "-q", "-rfE",
        f"--hypothesis-profile={profile}", "--device", device, "--cell-result", str(result), "--cell-name", cell,
        *parallel(jobs), *extra,
    ]


def proofs_command(modules: list[str], jobs: int, extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "pytest", *modules, "-p", "gpu_check", "-p", "no:cacheprovider", "-q", "-rfEs",
            *parallel(jobs), *extra]


def stop(proc: subprocess.Popen) -> None:
    """Ctrl-C to the whole group (xdist workers included), so the suite writes what it found in
    its result file as an interrupted run; killed if it has not ended after the grace."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def run_step(name: str, command: list[str], log: Path, env: dict[str, str], timeout: float, means: dict[int, str]) -> Step:
    """Run `command` in its own process group, its output (both streams) into `log`; past
    `timeout` the group is stopped."""
    start = time.monotonic()
    with log.open("wb") as out:
        out.write(f"$ {shlex.join(command)}\n".encode())
        out.flush()
        proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            stop(proc)
            code, timed_out = EXIT_INTERRUPTED, True
        except KeyboardInterrupt:
            stop(proc)
            raise
    step = Step(name, command, log, code, time.monotonic() - start, timed_out, means.get(code, "unexpected exit code"))
    with log.open("a") as out:
        out.write(f"\n{step.line()}\n")
    return step


def result_answer(path: Path) -> tuple[bool, list[str]]:
    """Whether the result file says passed, and its lines for the summary (why not, when not)."""
    from cpugpu_conformance import results

    try:
        cell = results.CellResult.load(path)
    except (OSError, results.ResultFileError) as exc:
        return False, [f"result file {path.name}: unreadable: {exc}"]
    answer = cell.answer()
    environment = cell.get("environment") or {}
    lines = [f"result file {path.name}: {cell.describe()}",
             f"machine: torch {environment.get('torch')}, CUDA available: {environment.get('cuda_available')}, "
             f"GPU: {environment.get('gpu_name')}"]
    return answer.clean, lines + [f"  {line}" for line in answer.lines]


def exit_code(suite: int, says_passed: bool, proofs: int) -> int:
    """The suite's code first (it is the result file's); a 0 the result file does not back is an
    internal error; then the proofs' code."""
    if suite != 0:
        return suite
    if not says_passed:
        return EXIT_INTERNAL
    return proofs


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python tools/gpu_check.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="folder for the result file, the logs and summary.txt (made if missing)")
    parser.add_argument("--device", default="all", help="the suite's --device (default: all, every device of the registry)")
    parser.add_argument("--proofs-for", default="cuda", help="the device whose variant and alternative proofs run (default: cuda)")
    parser.add_argument("--proofs-k", default="", help="a pytest -k expression narrowing the proofs further")
    parser.add_argument("--proofs", nargs="+", default=list(PROOF_MODULES), metavar="PATH",
                        help=f"the test files holding the proofs (default: {' '.join(PROOF_MODULES)})")
    parser.add_argument("--jobs", type=int, default=min(os.cpu_count() or 1, 16),
                        help="pytest-xdist workers (default: the cores, at most 16; serial without pytest-xdist)")
    parser.add_argument("--profile", default="ci", help="the suite's hypothesis profile (default: ci)")
    parser.add_argument("--suite-timeout", type=float, default=180, help="seconds before the suite is stopped (default: 180)")
    parser.add_argument("--proofs-timeout", type=float, default=240, help="seconds before the proofs are stopped (default: 240)")
    parser.epilog = "After --, more of the suite's options: -- --impl SPEC --promise N ..."
    ours, suite_args = (argv[: argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    args = parser.parse_args(ours)
    if args.jobs < 1:
        parser.error(f"--jobs {args.jobs}: at least 1")
    args.suite_args = suite_args
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    try:
        return check(args)
    except Refused as exc:
        print(exc, file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("gpu_check: interrupted; the logs in the output folder hold what ran", file=sys.stderr)
        return EXIT_INTERRUPTED


def check(args: argparse.Namespace) -> int:
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise Refused(f"gpu_check: cannot make the output folder {str(args.out)!r}: {exc.strerror or exc}") from None
    sys.path.insert(0, str(SRC))  # results.py, to read the result file, with no install
    cell = f"installed-torch-{torch_release()}-{args.device}"
    result = args.out / f"{cell}.json"
    with contextlib.suppress(FileNotFoundError):
        result.unlink()  # an earlier check's pass must not stand for a suite that writes nothing this time
    # The suite's workers each open a CUDA context: half the cores is plenty for its ~130 tests.
    command = suite_command(result, cell, args.device, max(1, args.jobs // 2), args.profile, args.suite_args)
    suite = run_step("suite", command, args.out / "suite.log", child_env(), args.suite_timeout, SUITE_MEANS)
    says_passed, answer = result_answer(result) if result.exists() else (False, [f"no result file {result.name}"])
    extra = ["-k", args.proofs_k] if args.proofs_k else []
    proofs = run_step(f"proofs for {args.proofs_for}", proofs_command(args.proofs, args.jobs, extra),
                      args.out / "proofs.log", child_env(args.proofs_for), args.proofs_timeout, PROOFS_MEANS)
    code = exit_code(suite.code, says_passed, proofs.code)
    why = ("the suite exited 0 but its result file does not say passed" if suite.code == 0 and not says_passed
           else "not a pass: see the lines above and the logs")
    summary = [suite.line(), *answer, proofs.line(), f"gpu_check: exit {code}" + ("" if code == 0 else f" ({why})")]
    (args.out / "summary.txt").write_text("".join(f"{line}\n" for line in [*map(shlex.join, (suite.command, proofs.command)), *summary]))
    print("\n".join(summary), file=sys.stdout if code == 0 else sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
