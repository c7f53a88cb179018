"""The first run on a GPU machine without network, in one command, from a copy of the checkout:

    python tools/gpu_check.py OUT_DIR [--device all] [--proofs-for cuda] [--jobs N] [-- SUITE_ARGS]

The standing instruction: a session that can start a GPU machine runs
``python tools/gpu_check.py "$OUT"`` there first (one command, well under ten minutes: the suite
stops at 180 s, the proofs at 240 s), commits the result file and the report it brings back,
gives the machine back, and fixes what it shows.

1. the suite on every device (``--device all``), writing its result file, which ``nox -s
   report`` merges into compat/ as a column per device;
2. the project's proofs for one device (``--proofs-for cuda``): the tests of
   tests/test_variants.py, tests/test_alternatives.py and tests/test_cuda_on_gpu.py marked
   ``@pytest.mark.devices("cuda")``, that is every broken variant rejected there on the promise it
   breaks, with a reproducer that fails on its own, every correct alternative accepted (or
   rejected where its table says it breaks a promise on that device), and what only CUDA shows
   (the sync-refusing method chosen, CUDA_LAUNCH_BLOCKING=1 untested, promise 12's one-GPU skip).

It needs torch, numpy, hypothesis and pytest (pytest-xdist used when present; jsonschema,
pyyaml and nox not at all) and installs nothing: its children find ``src/`` and this folder
through PYTHONPATH, which it sets. They run in the checkout, so relative ``--proofs`` paths are
the checkout's; OUT_DIR is resolved once, at the start. OUT_DIR gets four files, all plain names:

    <cell>.json   the suite's result file (cell ``installed-torch-<release>-<device>``)
    suite.log     the suite's whole output
    proofs.log    the proofs' whole output (the slowest proofs at its end)
    summary.txt   each step's command, exit code and time, the result file's answer; the
                  same lines end the script's own output

Each is replaced whole, never written through: a log is written under a temporary name in
OUT_DIR (``.suite.log.XXXXXXXX``) and renamed when its step ends, summary.txt likewise. Anything
at one of those names that is not a plain file (a link, a FIFO, a folder, a device) is refused
in one line (exit 4) before anything runs.

Before anything runs, on a machine with an NVIDIA GPU that torch cannot use (torch built for a
newer CUDA than the driver's, or without CUDA), the check says so in one line, with the torch
build, its CUDA and the driver's, and exits 6 (untested), unless ``--device cpu`` is asked for.
On a machine with no NVIDIA GPU at all, a check that asks about cuda (the defaults) says so in one
line and exits 6 before anything runs, unless ``--cpu-half`` asks to run it anyway (the cuda half
untested, never a pass); ``--device cpu --proofs-for cpu`` checks the CPU alone.

Exit code: 0 when the suite passed on every device asked for (its result file says so) and
every proof held; otherwise the suite's own code when it was not 0 (1 a promise failed, 2
interrupted or out of time, 3 internal error, 4 bad input, 5 nothing tested, 6 partly
tested), else the proofs' pytest code (1 a proof failed, 5 no proof ran: none is marked
for the device, or the device is missing and every one was skipped, 6 some were skipped).
A suite that exits 0 with a result file that does not say passed is 3: the exit code never
says more than the result file. 4: refused to start (bad option, output folder or name in
it); 6 also: the GPU cannot be used. Stopped: 2 on Ctrl-C (SIGINT), 143 on SIGTERM (what
``timeout`` sends; timeout itself then exits 124), 129 on SIGHUP; the suite, the proofs and
everything they started are ended first, summary.txt says the run was stopped, and nothing is
written into OUT_DIR after gpu_check has exited.

A script of the checkout, not a module of the package: the proofs live in tests/, which the
wheel does not ship. Python, not shell, so its choices (which code wins, what a missing
result file means, when a GPU is unusable) are functions the project's tests call on a
CPU-only machine. This file holds its command line and the order of the run; its parts, one
job each, are the modules of tools/gpu_checking/ beside it.

When pytest loads this file as a plugin (``-p gpu_check``, as the proofs step does), it keeps
only the tests marked for the device named in $GPU_CHECK_PROOFS_FOR, the longest first, and a
skipped one makes the run not a pass.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from pathlib import Path

TOOLS = Path(__file__).resolve().parent
if str(TOOLS) not in sys.path:  # loaded by its path (as the tests do): its parts are beside it
    sys.path.insert(0, str(TOOLS))

# Its parts. Re-exported (``X as X``): the plugin's hooks (``-p gpu_check`` loads this file), and what
# the tests call by this file's name.
from gpu_checking.child_processes import become_subreaper, end_orphans  # noqa: E402
from gpu_checking.child_processes import stop as stop  # noqa: E402
from gpu_checking.machine import GpuFacts as GpuFacts  # noqa: E402
from gpu_checking.machine import gather_facts, gpu_unusable, no_gpu  # noqa: E402
from gpu_checking.machine import nvidia_on_this_machine as nvidia_on_this_machine  # noqa: E402
from gpu_checking.machine import probe_torch as probe_torch  # noqa: E402
from gpu_checking.out_folder import LOG_NAMES, prepare_out, refuse_unless_a_result, refuse_unless_replaceable  # noqa: E402
from gpu_checking.outcomes import EXIT_PARTLY, EXIT_USAGE, PROOFS_MEANS, SUITE_MEANS, Refused  # noqa: E402
from gpu_checking.proof_selection import PROOF_MODULES  # noqa: E402
from gpu_checking.proof_selection import PROOFS_FOR_ENV as PROOFS_FOR_ENV  # noqa: E402
from gpu_checking.proof_selection import pytest_collection_modifyitems as pytest_collection_modifyitems  # noqa: E402
from gpu_checking.proof_selection import pytest_configure as pytest_configure  # noqa: E402
from gpu_checking.steps import cell_name, child_env, proofs_command, result_answer, run_step, suite_command  # noqa: E402
from gpu_checking.steps import has_xdist as has_xdist  # noqa: E402
from gpu_checking.steps import parallel as parallel  # noqa: E402
from gpu_checking.stop_signals import SIGNALS, Stopped  # noqa: E402
from gpu_checking.summary import Summary, exit_code  # noqa: E402

from cpugpu_conformance.proctree import descendants as descendants  # noqa: E402
from cpugpu_conformance.proctree import stat_fields as _stat_fields  # noqa: E402, F401


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        """Bad options are bad input: one line and exit 4, as every other refusal."""
        print(f"gpu_check: {message} (python tools/gpu_check.py --help)", file=sys.stderr)
        sys.exit(EXIT_USAGE)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = _Parser(prog="python tools/gpu_check.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="folder for the result file, the logs and summary.txt (made if missing)")
    parser.add_argument("--device", default="all", help="the suite's --device (default: all, every device of the registry)")
    parser.add_argument("--proofs-for", default="cuda", help="the device whose variant and alternative proofs run (default: cuda)")
    parser.add_argument("--cpu-half", action="store_true",
                        help="on a machine with no NVIDIA GPU, run the check anyway: only its CPU half can run, the "
                             "cuda half is untested and the answer is no pass (without it, such a machine is refused "
                             "in one line, exit 6, before anything runs)")
    parser.add_argument("--proofs-k", default="", help="a pytest -k expression narrowing the proofs further")
    parser.add_argument("--proofs", nargs="+", default=list(PROOF_MODULES), metavar="PATH",
                        help=f"the test files holding the proofs, relative to the checkout (default: {' '.join(PROOF_MODULES)})")
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
    SIGNALS.install()
    args = parse(sys.argv[1:] if argv is None else argv)
    become_subreaper()
    try:
        return check(args)
    except Refused as exc:
        print(exc, file=sys.stderr)
        return EXIT_USAGE
    except (Stopped, KeyboardInterrupt) as exc:  # before the output folder was ready: nothing to write
        stopped = exc if isinstance(exc, Stopped) else Stopped(signal.SIGINT)
        print(f"gpu_check: stopped by {stopped.name} before any step ran", file=sys.stderr)
        return stopped.code
    finally:
        end_orphans()


def check(args: argparse.Namespace) -> int:
    out = prepare_out(args.out)
    summary = Summary(out)
    phase = "the checks before the suite"
    try:
        facts = gather_facts(args.device, gpu_asked=args.device in ("all", "cuda") or args.proofs_for == "cuda")
        cell = cell_name(facts.release, args.device)
        result = out / f"{cell}.json"
        refuse_unless_replaceable(result)
        refuse_unless_a_result(result)
        with contextlib.suppress(FileNotFoundError):
            result.unlink()  # an earlier check's pass must not stand for a suite that writes nothing this time
        unusable = gpu_unusable(args.device, facts)
        if unusable:
            summary.lines.append(unusable)
            return summary.end(EXIT_PARTLY, "untested: no step ran, torch cannot use this machine's GPU")
        absent = no_gpu(args.device, args.proofs_for, facts, args.cpu_half)
        if absent:
            summary.lines.append(absent)
            return summary.end(EXIT_PARTLY, "untested: no step ran, this machine has no NVIDIA GPU")
        # The suite's workers each open a CUDA context: half the cores is plenty for its ~130 tests.
        phase = "the suite"
        command = suite_command(result, cell, args.device, max(1, args.jobs // 2), args.profile, args.suite_args)
        suite = run_step("suite", command, out / LOG_NAMES["suite"], child_env(), args.suite_timeout, SUITE_MEANS)
        summary.add(suite)
        says_passed, answer = result_answer(result)
        summary.lines += answer
        phase = "the proofs"
        extra = ["-k", args.proofs_k] if args.proofs_k else []
        proofs = run_step(f"proofs for {args.proofs_for}", proofs_command(args.proofs, args.jobs, extra),
                          out / LOG_NAMES["proofs"], child_env(args.proofs_for), args.proofs_timeout, PROOFS_MEANS)
        summary.add(proofs)
    except (Stopped, KeyboardInterrupt) as exc:
        stopped = exc if isinstance(exc, Stopped) else Stopped(signal.SIGINT)
        if stopped.step is not None:
            summary.add(stopped.step)
            if stopped.step.name == "suite":
                summary.lines += result_answer(result)[1]
        end_orphans()
        return summary.end(stopped.code, f"stopped by {stopped.name} during {phase}: not a pass")
    code = exit_code(suite.code, says_passed, proofs.code)
    why = ("the suite exited 0 but its result file does not say passed" if suite.code == 0 and not says_passed
           else "not a pass: see the lines above and the logs")
    return summary.end(code, why)


if __name__ == "__main__":
    sys.exit(main())
