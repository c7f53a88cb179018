"""``cpugpu-conformance matrix [--jobs N] [--known-failures FILE] [CELL|TAG...] [-- PYTEST_ARGS]``: the
matrix, N cells at a time.

Each cell is ``cpugpu-conformance cell`` in a process of its own, with its own environment
(<envdir>/<cell>; by default .nox/ of the checkout when run inside it, else the cache folder
``cell`` uses: source.default_envdir, the ones ``cell`` makes and reuses) and its
own result file and log (results/<cell>.json and .log). The output is one line when a cell
starts (with its log) and one when it ends (its answer); ``--stream`` adds every line of
every cell, prefixed by the cell's name. SIGINT, SIGTERM or SIGHUP (the terminal closed)
stops every running cell, each recording itself as interrupted, and starts no other. The
run ends with the summary table of the cells it ran. Only a result file this run wrote
answers for a cell: one the cell command left as it was (it refused to start, or could not
write there) is "no answer written this run", never an earlier run's verdict. A closed
output (``| head``) stops the printing, never a cell. Exit 0 only when every cell was clean
or not applicable (its torch cannot host its device: sim before torch 2.8) and one at least
was clean (report/summary.passing); 1 otherwise; 2 for bad input; 129, 130 or 143 when a signal stopped it. ``--known-failures``:
the team's file, checked once before any cell starts and handed to every cell (``cell
--known-failures``).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from cpugpu_conformance import output, results
from cpugpu_conformance.cli import common
from cpugpu_conformance.cli.cell import envs_folder, source, what_to_run
from cpugpu_conformance.exits import ExitCode
from cpugpu_conformance.report import summary
from cpugpu_conformance.runner import matrix as matrices
from cpugpu_conformance.runner import parallel, processes

PROG = "matrix"
HELP = "run the matrix's cells (or those named) side by side, --jobs at a time, then the summary table"
PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the folder that holds cpugpu_conformance/


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("select", nargs="*", metavar="CELL|TAG",
                        help="only these cells (torch-2.15.0-cpu) or tags (torch-2.15.0, device-cpu); default: all")
    parser.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1, metavar="N",
                        help="cells at a time (default: the number of CPUs, %(default)s here)")
    parser.add_argument("--stream", action="store_true", help="print every line of every cell, prefixed by its name")
    parser.add_argument("--known-failures", action=common.PathArgument, metavar="FILE",
                        help="your known failures (TOML [[known_failure]] entries), for every cell")
    common.add_cell_options(parser, device=False,
                            env=("--envdir", "folder of the cells' environments, one per cell (default: .nox inside a "
                                                 "checkout, else ~/.cache/cpugpu-conformance/envs/python<X.Y>)"),
                            epilog="Arguments after -- go to pytest in every cell (--promise 1,2).")


def main(argv: Sequence[str]) -> int:
    args = common.parse(common.parser_for(PROG, HELP, add_arguments), argv)
    return args if isinstance(args, int) else run(args)


def cell_job(matrix: matrices.Matrix, cell: matrices.MatrixCell, *, envdir: Path, results_dir: Path,
             pytest_args: Sequence[str], known_failures: Path | None = None) -> parallel.Job:
    """`cpugpu-conformance cell` for one cell, by the interpreter running this one."""
    known = ["--known-failures", str(known_failures.resolve())] if known_failures is not None else []
    command = [sys.executable, "-m", "cpugpu_conformance", "cell", cell.torch, "--device", cell.device.name,
               "--env", str(envdir / cell.name), "--matrix", str(Path(matrix.path).resolve()),
               "--results", str(results_dir), *known, "--", *pytest_args]
    return parallel.Job(cell.name, command, log=results_dir / f"{cell.name}.log")


def child_env(from_checkout: bool = True) -> dict[str, str]:
    """This package importable in every cell process (nox imports it from a checkout's src/ without
    installing it), and output passed on as it is printed. An installed package is importable by
    the interpreter already; its folder (site-packages, with this environment's torch) never goes
    on a cell's PYTHONPATH."""
    if not from_checkout:
        return dict(os.environ, PYTHONUNBUFFERED="1")
    path = os.pathsep.join(p for p in (str(PACKAGE_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return dict(os.environ, PYTHONPATH=path, PYTHONUNBUFFERED="1")


def run(args: argparse.Namespace) -> int:
    pytest_args = getattr(args, "pytest_args", [])
    try:
        if args.jobs < 1:
            raise common.UsageError(f"--jobs {args.jobs}: run at least one cell at a time")
        common.refuse_owned_options(pytest_args)
        if args.known_failures is not None:  # once, here: not a refusal per cell
            what_to_run(None, args.known_failures, pytest_args)
        results_dir = common.results_folder(args.results).resolve()
        if args.matrix is None and not os.environ.get("CONFORMANCE_MATRIX") and not os.path.lexists(matrices.DEFAULT_PATH):
            raise common.UsageError(
                f"no {matrices.DEFAULT_PATH} in {Path.cwd()} (nor --matrix, $CONFORMANCE_MATRIX): the matrix runs the "
                "releases one lists; make one with `cpugpu-conformance bump-target --baseline A --candidate B "
                "--matrix-out matrix.yaml`, or run one release with `cpugpu-conformance cell RELEASE`")
        matrix = common.load_matrix(args.matrix)
        try:
            chosen = matrix.select(args.select)
        except KeyError as exc:
            raise common.UsageError(exc.args[0]) from None
        project, package = source()
    except common.UsageError as exc:
        return common.error(PROG, str(exc))
    envdir = (args.envdir or envs_folder(project, package, matrix.python)).resolve()
    jobs = [cell_job(matrix, c, envdir=envdir, results_dir=results_dir, pytest_args=pytest_args,
                     known_failures=args.known_failures) for c in chosen]
    output.say(f"matrix: {len(jobs)} cell(s), {min(args.jobs, len(jobs))} at a time; environments in {envdir}")
    return run_cells(jobs, args.jobs, results_dir, stream=args.stream, cwd=project, from_checkout=package is None)


def run_cells(jobs: list[parallel.Job], max_jobs: int, results_dir: Path, *, stream: bool = False,
              cwd: Path | None = None, from_checkout: bool = True) -> int:
    """Run the cells' commands side by side, then the summary table; the exit code of the whole run."""
    progress = Progress(results_dir, jobs)
    outcome = parallel.run_jobs(jobs, max_jobs, stream=stream, cwd=cwd, env=child_env(from_checkout),
                                on_start=progress.started, on_finish=progress.finished)
    if outcome.signum is not None:
        progress.record_interrupted(outcome.signum)
    return report(outcome, results_dir, progress.unanswered)


def file_identity(path: Path) -> tuple[int, ...] | None:
    """What changes whenever a file is written (results are written anew and renamed into place,
    so a new inode and ctime); None when there is none."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns


class Progress:
    """One line when a cell starts, one when it ends; and which cells wrote no answer this run.

    Every cell's result file is noted before any cell starts: a cell whose command ended
    without writing it (refused, could not write there, died before it held its path) has
    no answer from this run, whatever an earlier run left there.
    """

    def __init__(self, results_dir: Path, jobs: Sequence[parallel.Job]) -> None:
        self.results_dir, self.total, self.count = results_dir, len(jobs), 0
        self.before = {job.name: file_identity(self.path(job.name)) for job in jobs}
        self.unanswered: dict[str, str] = {}  # cell -> why it has no answer from this run

    def path(self, name: str) -> Path:
        return self.results_dir / f"{name}.json"

    def started(self, job: parallel.Job) -> str:
        self.count += 1
        return f"[{self.count}/{self.total}] {job.name}: started (log: {job.log})"

    def written_this_run(self, done: parallel.Finished) -> bool:
        """Exit 2 is a cell that refused to run (a busy path is another run's file)."""
        return done.returncode != ExitCode.USAGE and file_identity(self.path(done.name)) != self.before.get(done.name)

    def finished(self, done: parallel.Finished) -> str:
        if self.written_this_run(done):
            try:
                answer = results.CellResult.load(self.path(done.name)).describe()
            except results.ResultFileError as exc:
                answer = f"no usable result ({exc})"
        else:
            self.unanswered[done.name] = no_answer(self.path(done.name), done)
            answer = "NO ANSWER written this run"
        line = f"{done.name}: {answer} in {done.seconds:.1f} s"
        if (done.returncode not in (0, 1) and not _by_signal(done.returncode)) or done.name in self.unanswered:
            line += f"\n{done.name}: the cell command exited {done.returncode}; its last lines:\n" + "\n".join(
                f"  {t}" for t in done.tail[-10:])
        return line

    def record_interrupted(self, signum: int) -> None:
        """After a signal: a cell that wrote nothing this run is recorded as interrupted where it can be."""
        for name in list(self.unanswered):
            if record_interrupted(self.path(name), name, signum):
                del self.unanswered[name]


def no_answer(path: Path, done: parallel.Finished) -> str:
    last = next((line.strip() for line in reversed(done.tail) if line.strip()), None)
    why = f"no answer written this run (the cell command exited {done.returncode}{f': {last}' if last else ''})"
    if path.exists() or path.is_symlink():
        why += f"; {path} is left from an earlier run"
    return why


def _by_signal(returncode: int) -> bool:
    return returncode < 0 or returncode > 128


def record_interrupted(path: Path, name: str, signum: int) -> bool:
    """A cell stopped before it held its result path (its first moments) left the file of an
    earlier run, or none: record it as interrupted, so no earlier pass stands for this run.
    False when that cannot be written (another run holds the path, or it is not writable)."""
    try:
        with results.exclusive(path):
            results.CellResult.new(name, "interrupted", detail=(
                f"interrupted by {processes.signal_name(signum)} before the cell started (cpugpu-conformance matrix)"
            )).write(path)
    except (results.ResultPathBusy, OSError):
        return False  # another run is writing it (its answer, not ours), or nothing can be written there
    return True


def report(outcome: parallel.ParallelOutcome, results_dir: Path, unanswered: dict[str, str] | None = None) -> int:
    """The summary table of the cells that ran (those with no answer from this run as such);
    the exit code of the whole run."""
    unanswered = unanswered or {}
    names = [d.name for d in outcome.finished if d.name not in unanswered]
    rows = summary.summarize(results_dir, names) if names else []
    rows += [summary.unanswered_row(results_dir / f"{name}.json", name, why) for name, why in unanswered.items()]
    rows.sort(key=lambda r: (results.release_key(r.torch), r.device, r.cell))
    if rows:
        output.say("\n" + summary.format_summary(rows))
    if outcome.not_started:
        why = f"stopped by {processes.signal_name(outcome.signum)}" if outcome.signum else "not run"
        output.say(f"not started ({why}): {', '.join(outcome.not_started)}")
    if outcome.signum is not None:
        return common.interrupted_exit(outcome.signum)
    odd = [d.name for d in outcome.finished if d.returncode not in (0, 1)]
    return 0 if rows and summary.passing(rows) and not odd and not outcome.not_started else 1

