"""A mutation run: copy the target, check the suite passes on the copy, let cosmic-ray mutate it.

The target file is copied into the work directory and only the copy is mutated, so an
interrupted run never leaves a mutant in the source tree; the modules beside a target file are
linked beside the copy, so that the file imports them as it does in place. The committed
equivalents apply to reference.py and to any byte-identical copy of it. The suite must pass on the
unmutated copy first (the baseline); then ``cosmic-ray init`` lists the mutants and
``cosmic-ray exec`` (local distributor) runs, for each, from the project root:

    python -m pytest conformance -x -q -p no:cacheprovider --hypothesis-profile=ci --impl COPY:Attr [extra]

How long it takes (reference.py, torch 2.13 CPU, a 2-core machine shared with other jobs): 63
mutants, 49 of them listed equivalents. A kill costs seconds (-x stops at the first failure), a
survivor a full suite run (30-60 s here). The default run took about 5 minutes; with
--check-equivalents, which runs all 63, about 36 minutes.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..impl import DEFAULT_SPEC
from ..results.text import last_line
from .equivalents import applicable, changed_lines, default_equivalents, load_equivalents, match_equivalents
from .report import NO_OUTPUT, duration, summarize, tidy_diff
from .score import BadInput, Mutant, classify, settle

CHECKOUT = Path(__file__).resolve().parents[3]  # src/cpugpu_conformance/mutation/ -> the checkout
SUITE_ARGS = ("-x", "-q", "-p", "no:cacheprovider", "--hypothesis-profile=ci")
POLL_S = 15.0


@dataclass(frozen=True)
class Options:
    """What the command line asks for (cli/mutation.py)."""

    impl: str = DEFAULT_SPEC  # FILE.py:Attr or module:Attr
    equivalents: str | None = None  # a reviewed list; None: the committed one, for the reference only
    workdir: str | None = None  # kept; None: a temporary directory
    timeout: float | None = None  # per mutant; None: from the baseline
    check_equivalents: bool = False
    suite: str = "conformance"


def resolve_target(spec: str) -> tuple[Path, str]:
    """The source file and attribute an --impl spec names (the file must exist)."""
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr:
        raise BadInput(f"--impl {spec!r}: expected 'path/to/file.py:Attr' or 'module.path:Attr'")
    if is_file_spec(spec):
        path = Path(target)
        if path.is_dir():
            raise BadInput(f"--impl {spec!r}: {target!r} is a directory, not a Python file (name the file in it)")
        if not path.is_file():
            raise BadInput(f"--impl {spec!r}: no such file {target!r}")
        return path.resolve(), attr
    return _module_file(spec, target), attr


def is_file_spec(spec: str) -> bool:
    target = spec.rpartition(":")[0]
    return target.endswith(".py") or "/" in target or "\\" in target


def _module_file(spec: str, module: str) -> Path:
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError) as exc:
        raise BadInput(f"--impl {spec!r}: cannot find module {module!r}: {exc}") from None
    if found is None:
        raise BadInput(f"--impl {spec!r}: no module named {module!r}")
    if not found.origin or not found.origin.endswith(".py"):
        raise BadInput(f"--impl {spec!r}: module {module!r} is not a Python source file ({found.origin})")
    return Path(found.origin).resolve()


def project_root() -> Path:
    """The directory the suite runs from: the one holding conformance/ (the cwd first, then this checkout)."""
    for candidate in (Path.cwd(), CHECKOUT):
        if (candidate / "conformance" / "conftest.py").is_file():
            return candidate.resolve()
    raise BadInput(f"no conformance/ suite in {str(Path.cwd())!r} or {str(CHECKOUT)!r}: run from the project root")


def link_neighbours(target: Path, workdir: Path) -> list[Path]:
    """Link the target's importable neighbours (modules, extension modules, packages) beside its
    copy: the suite puts the copy's folder on sys.path as Python does for a script, and a file that
    imports a module beside it must find it there too. Links, not copies (nothing but the copy is
    mutated); nothing that is already in the work directory is replaced."""
    made = []
    work = workdir.resolve()
    for entry in sorted(target.parent.iterdir()):
        link = workdir / entry.name
        importable = entry.suffix in (".py", ".so", ".pyd") or (entry.is_dir() and entry.name != "__pycache__")
        if (entry.name == target.name or not importable or entry.name.startswith(".") or link.exists()
                or link.is_symlink() or entry.resolve() == work):
            continue
        link.symlink_to(entry.resolve(), target_is_directory=entry.is_dir())
        made.append(link)
    return made


def suite_command(copy: Path, attr: str, suite: str, extra: Sequence[str]) -> list[str]:
    return [sys.executable, "-m", "pytest", suite, *SUITE_ARGS, "--impl", f"{copy}:{attr}", *extra]


def child_env() -> dict[str, str]:
    # An enclosing pytest(-xdist) run must not leak into the suite it starts.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST") and k != "PYTEST_CURRENT_TEST"}
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # as cosmic-ray does: a stale .pyc must not hide a mutant
    return env


def run_baseline(command: list[str], root: Path, display: str, limit: float) -> float:
    """Seconds the suite took on the unmutated copy; BadInput if it does not pass there."""
    started = time.monotonic()
    try:
        proc = subprocess.run(command, cwd=root, env=child_env(), capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        raise BadInput(f"baseline: the suite did not finish on the unmutated {display} within {limit:.0f} s") from None
    if proc.returncode != 0:
        raise BadInput(
            f"baseline: the suite fails on the unmutated {display} (pytest exit {proc.returncode}): "
            f"{last_line(proc.stderr, 300, NO_OUTPUT) or last_line(proc.stdout, 300, NO_OUTPUT)}"
        )
    return time.monotonic() - started


def default_timeout(baseline_s: float) -> float:
    # A survivor runs the whole suite; leave room for a machine busier than at the baseline.
    return round(max(60.0, 4 * baseline_s + 30))


def write_config(workdir: Path, copy: Path, command: list[str], timeout: float) -> Path:
    from cosmic_ray.config import serialize_config

    config = {
        "module-path": str(copy),
        "timeout": float(timeout),
        "excluded-modules": [],
        "test-command": shlex.join(command),
        "distributor": {"name": "local"},
    }
    path = workdir / "cosmic-ray.toml"
    path.write_text(serialize_config(config), encoding="utf-8")
    return path


def cosmic_ray(args: Sequence[Any], root: Path, log: Path) -> subprocess.Popen:
    with log.open("a", encoding="utf-8") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "cosmic_ray.cli", *map(str, args)], cwd=root, env=child_env(), stdout=out, stderr=out
        )


def init_session(config: Path, session: Path, root: Path, log: Path) -> None:
    rc = cosmic_ray(["init", config, session, "--force"], root, log).wait()
    if rc != 0:
        raise BadInput(f"cosmic-ray init failed (exit {rc}): {last_line(log.read_text(encoding='utf-8'), 300, NO_OUTPUT)}")


def list_mutants(session: Path, copy: Path) -> list[Mutant]:
    """Every job of the session, identified by operator and the lines it changes."""
    import cosmic_ray.plugins
    from cosmic_ray.mutating import mutate_code
    from cosmic_ray.work_db import WorkDB, use_db

    source = copy.read_text(encoding="utf-8")
    mutants = []
    with use_db(str(session), WorkDB.Mode.open) as db:
        for item in db.work_items:
            (spec,) = item.mutations  # init makes first-order mutants only
            operator = cosmic_ray.plugins.get_operator(spec.operator_name)(**(spec.operator_args or {}))
            mutated = mutate_code(source, operator, spec.occurrence)
            before, after = changed_lines(source, mutated) if mutated is not None else ("", "")
            mutants.append(Mutant(item.job_id, spec.operator_name, spec.start_pos[0], before, after))
    return sorted(mutants, key=lambda m: (m.line, m.operator))


def skip_equivalents(session: Path, mutants: Sequence[Mutant]) -> None:
    """Mark listed equivalents done, so that exec does not spend a full suite run on each."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    with use_db(str(session), WorkDB.Mode.open) as db:
        for mutant in mutants:
            if mutant.equivalent is not None:
                result = WorkResult(worker_outcome=WorkerOutcome.SKIPPED, output="listed equivalent (reviewed)")
                db.set_result(mutant.job_id, result)


def _done(session: Path) -> int:
    from cosmic_ray.work_db import WorkDB, use_db

    with use_db(str(session), WorkDB.Mode.open) as db:
        return db.num_results


def execute(config: Path, session: Path, root: Path, log: Path, total: int) -> int:
    """Run cosmic-ray exec, printing progress on stderr; its exit code."""
    started = time.monotonic()
    proc = cosmic_ray(["exec", config, session], root, log)
    shown = -1
    try:
        while True:
            try:
                return proc.wait(timeout=POLL_S)
            except subprocess.TimeoutExpired:
                done = _done(session)
                if done != shown:
                    print(f"mutation: {done} of {total} mutants done ({duration(time.monotonic() - started)})", file=sys.stderr)
                    shown = done
    finally:
        if proc.poll() is None:  # interrupted: stop exec (it restores the copy, not that it matters)
            proc.terminate()
            proc.wait()


def read_results(session: Path, mutants: Sequence[Mutant], copy: Path, display: str, checked: bool) -> None:
    from cosmic_ray.work_db import WorkDB, use_db

    with use_db(str(session), WorkDB.Mode.open) as db:
        results = dict(db.results)
    for mutant in mutants:
        result = results.get(mutant.job_id)
        mutant.outcome = settle(mutant, classify(result), checked)
        mutant.output = (result.output or "") if result is not None else ""
        mutant.diff = tidy_diff((result.diff or "") if result is not None else "", copy, display)


@contextlib.contextmanager
def work_directory(given: str | None) -> Iterator[Path]:
    """The given directory (kept, for `cosmic-ray dump`), else a temporary one (removed)."""
    if given:
        path = Path(given).resolve()
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="cpugpu-mutation-") as tmp:
        yield Path(tmp)


def _display(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def run(options: Options, extra: list[str]) -> int:
    """Print the report (stdout) and return the exit code; BadInput for bad input."""
    try:
        import cosmic_ray  # noqa: F401
    except ImportError:
        raise BadInput("cosmic-ray is not installed: pip install 'cosmic-ray>=8,<9'") from None
    root = project_root()
    target, attr = resolve_target(options.impl)
    equivalents = load_equivalents(Path(options.equivalents)) if options.equivalents else default_equivalents(target)
    equivalents = applicable(equivalents, extra)
    display = _display(target)
    with work_directory(options.workdir) as workdir:
        copy = workdir / target.name
        if copy.resolve() == target:
            raise BadInput(f"--workdir {options.workdir!r}: is the target's own directory; the copy would be the original")
        shutil.copyfile(target, copy)
        if is_file_spec(options.impl):  # a module's neighbours come through its package
            link_neighbours(target, workdir)
        command = suite_command(copy, attr, options.suite, extra)
        print(f"mutation: target {display}:{attr}, suite command: {shlex.join(command)}", file=sys.stderr)
        baseline = run_baseline(command, root, display, limit=options.timeout or 3600.0)
        timeout = options.timeout or default_timeout(baseline)
        config, session, log = write_config(workdir, copy, command, timeout), workdir / "session.sqlite", workdir / "cosmic-ray.log"
        init_session(config, session, root, log)
        mutants = list_mutants(session, copy)
        if not mutants:
            raise BadInput(f"--impl {options.impl!r}: cosmic-ray found nothing to mutate in {display}")
        stale = match_equivalents(mutants, equivalents)
        if not options.check_equivalents:
            skip_equivalents(session, mutants)
        started = time.monotonic()
        rc = execute(config, session, root, log, len(mutants))
        took = time.monotonic() - started
        read_results(session, mutants, copy, display, options.check_equivalents)
        code, lines = summarize(mutants, stale)
        if rc != 0:
            lines.insert(0, f"cosmic-ray exec failed (exit {rc}): {last_line(log.read_text(encoding='utf-8'), 300, NO_OUTPUT)}")
            code = code or 1
    print("\n".join(lines))
    print(f"\nbaseline {duration(baseline)}, timeout {timeout:.0f} s per mutant, exec {duration(took)}; {len(mutants)} mutants")
    return code
