"""Mutation score of a CpuGpuBuffer implementation against the conformance suite, with cosmic-ray.

    python -m cpugpu_conformance.mutation [--impl FILE.py:Attr | module:Attr] [--equivalents FILE]
        [--workdir DIR] [--timeout SECONDS] [--check-equivalents] [--suite DIR] [-- extra pytest args]

The target file is copied into the work directory and only the copy is mutated, so an
interrupted run never leaves a mutant in the source tree; the modules beside a target file are
linked beside the copy, so that the file imports them as it does in place. The committed
equivalents apply to reference.py and to any byte-identical copy of it. The suite must pass on the
unmutated copy first (the baseline); then ``cosmic-ray init`` lists the mutants and
``cosmic-ray exec`` (local distributor) runs, for each, from the project root:

    python -m pytest conformance -x -q -p no:cacheprovider --hypothesis-profile=ci --impl COPY:Attr [extra]

How cosmic-ray's outcomes are read (cosmic-ray itself calls everything but "survived" killed):
  killed       test outcome killed: the suite exited non-zero (a test failed, or it refused the impl)
  timeout      test outcome killed with output "timeout": cosmic-ray stopped the suite at the
               per-mutant timeout. Not a kill: the suite gave no verdict.
  survived     test outcome survived: the suite passed on the mutant
  incompetent  test outcome incompetent, or a worker exception/abnormal exit: not judged
  not run      no result (exec interrupted), or cosmic-ray made no mutation (no-test/skipped)
  equivalent   a mutant the reviewed equivalents list names: skipped without a run (or, with
               --check-equivalents, run and required to survive); not counted in N

Exit codes: 0 every non-equivalent mutant killed, and there was at least one;
1 anything else after a run (a survivor, a timeout, an incompetent or unrun mutant, no mutant
left to test, an equivalents entry that matches no mutant (stale) or that the suite kills);
2 bad input, one line naming the culprit (a missing file, a bad spec, a corrupt equivalents
file, a suite that fails on the unmutated target, nothing to mutate, cosmic-ray missing or its
init failing). A failing ``cosmic-ray exec`` is reported, and leaves its mutants "not run": exit 1.

How long it takes (reference.py, torch 2.13 CPU, a 2-core machine shared with other jobs): 63
mutants, 49 of them listed equivalents. A kill costs seconds (-x stops at the first failure), a
survivor a full suite run (30-60 s here). The default run took about 5 minutes; with
--check-equivalents, which runs all 63, about 36 minutes.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import fnmatch
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .impl import DEFAULT_SPEC
from .results.text import last_line

NO_OUTPUT = "(no output)"  # what a run that printed nothing shows as its last line

HERE = Path(__file__).resolve().parent
REFERENCE_FILE = HERE / "reference.py"
DEFAULT_EQUIVALENTS = HERE / "mutation_equivalents.yaml"
SUITE_ARGS = ("-x", "-q", "-p", "no:cacheprovider", "--hypothesis-profile=ci")
TIMEOUT_OUTPUT = "timeout"  # what cosmic-ray.testing.run_tests stores as output on a timeout
POLL_S = 15.0

KILLED, SURVIVED, TIMEOUT, INCOMPETENT, NOT_RUN, EQUIVALENT = (
    "killed", "survived", "timeout", "incompetent", "not run", "equivalent"
)
# Listed as equivalent, yet run under --check-equivalents and not seen to survive.
CONTRADICTED = "listed equivalent, but"


class BadInput(Exception):
    """Exit 2; the message is one line naming the culprit."""


@dataclass(frozen=True)
class Equivalent:
    """A reviewed equivalent mutant: operator glob, changed source line(s) before and after, reason."""

    operator: str
    before: str
    after: str | None  # None: every mutant of this operator on that line
    reason: str
    cpu_only: bool = False  # equivalent only when the suite tests no CUDA device

    def matches(self, mutant: Mutant) -> bool:
        return (
            fnmatch.fnmatchcase(mutant.operator, self.operator)
            and mutant.before == self.before
            and (self.after is None or mutant.after == self.after)
        )

    def describe(self) -> str:
        return f"{self.operator}: {self.before!r} -> {'(any)' if self.after is None else repr(self.after)}"


@dataclass
class Mutant:
    job_id: str
    operator: str
    line: int
    before: str  # the changed source line(s), stripped, joined by newlines
    after: str
    outcome: str = NOT_RUN
    diff: str = ""
    output: str = ""
    equivalent: Equivalent | None = field(default=None, repr=False)


# ---------------------------------------------------------------- input


def resolve_target(spec: str) -> tuple[Path, str]:
    """The source file and attribute an --impl spec names (the file must exist)."""
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr:
        raise BadInput(f"--impl {spec!r}: expected 'path/to/file.py:Attr' or 'module.path:Attr'")
    if _is_file_spec(spec):
        path = Path(target)
        if path.is_dir():
            raise BadInput(f"--impl {spec!r}: {target!r} is a directory, not a Python file (name the file in it)")
        if not path.is_file():
            raise BadInput(f"--impl {spec!r}: no such file {target!r}")
        return path.resolve(), attr
    return _module_file(spec, target), attr


def _is_file_spec(spec: str) -> bool:
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


def _normalize(text: str) -> str:
    return "\n".join(line.strip() for line in text.strip().splitlines())


def load_equivalents(path: Path) -> list[Equivalent]:
    """The reviewed equivalents in a YAML (or JSON) file: ``equivalents: [{operator, before, after?, reason}]``."""
    try:
        import yaml
    except ImportError:
        raise BadInput("pyyaml is not installed: pip install 'cpugpu-conformance[test]'") from None
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BadInput(f"--equivalents {str(path)!r}: no such file") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise BadInput(f"--equivalents {str(path)!r}: unreadable: {reason}") from None
    if not isinstance(data, dict) or not isinstance(data.get("equivalents"), list):
        raise BadInput(f"--equivalents {str(path)!r}: expected a mapping with an 'equivalents' list")
    return [_entry(path, number, raw) for number, raw in enumerate(data["equivalents"], 1)]


def _entry(path: Path, number: int, raw: Any) -> Equivalent:
    where = f"--equivalents {str(path)!r}: entry {number}"
    if not isinstance(raw, dict):
        raise BadInput(f"{where}: expected a mapping, got {type(raw).__name__}")
    unknown = sorted(set(raw) - {"operator", "before", "after", "reason", "cpu_only"})
    if unknown:
        raise BadInput(f"{where}: unknown key {unknown[0]!r}")
    for key in ("operator", "before", "reason"):
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise BadInput(f"{where}: {key!r} must be a non-empty string")
    after = raw.get("after")
    if after is not None and not isinstance(after, str):
        raise BadInput(f"{where}: 'after' must be a string")
    if not isinstance(raw.get("cpu_only", False), bool):
        raise BadInput(f"{where}: 'cpu_only' must be true or false")
    return Equivalent(
        operator=raw["operator"].strip(),
        before=_normalize(raw["before"]),
        after=None if after is None else _normalize(after),
        reason=" ".join(raw["reason"].split()),
        cpu_only=raw.get("cpu_only", False),
    )


def default_equivalents(target: Path) -> list[Equivalent]:
    """The committed list applies to the reference only, wherever it lies: to reference.py and to a
    byte-identical copy of it (the review was of that content, not of a path); other targets
    start with none."""
    return load_equivalents(DEFAULT_EQUIVALENTS) if is_the_reference(target) else []


def is_the_reference(target: Path) -> bool:
    if target == REFERENCE_FILE:
        return True
    try:
        return target.stat().st_size == REFERENCE_FILE.stat().st_size and target.read_bytes() == REFERENCE_FILE.read_bytes()
    except OSError:
        return False


def suite_tests_cuda(extra: Sequence[str]) -> bool:
    """Whether the suite will test a CUDA device: it tests every device this machine has unless told --device cpu."""
    if "--device=cpu" in extra or any(a == "--device" and b == "cpu" for a, b in zip(extra, extra[1:])):
        return False
    import torch

    return torch.cuda.is_available()


def applicable(equivalents: list[Equivalent], extra: Sequence[str]) -> list[Equivalent]:
    if any(e.cpu_only for e in equivalents) and suite_tests_cuda(extra):
        return [e for e in equivalents if not e.cpu_only]
    return equivalents


def project_root() -> Path:
    """The directory the suite runs from: the one holding conformance/ (the cwd first, then this checkout)."""
    for candidate in (Path.cwd(), HERE.parent.parent):
        if (candidate / "conformance" / "conftest.py").is_file():
            return candidate.resolve()
    raise BadInput(f"no conformance/ suite in {str(Path.cwd())!r} or {str(HERE.parent.parent)!r}: run from the project root")


# ---------------------------------------------------------------- mutants and outcomes


def changed_lines(original: str, mutated: str) -> tuple[str, str]:
    """The lines a mutation changed, stripped: what identifies it across unrelated edits."""
    a, b = original.splitlines(), mutated.splitlines()
    before: list[str] = []
    after: list[str] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag != "equal":
            before += a[i1:i2]
            after += b[j1:j2]
    return _normalize("\n".join(before)), _normalize("\n".join(after))


def classify(result: Any) -> str:
    """Our outcome for a cosmic-ray WorkResult (None: no result yet). See the module docstring."""
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome

    if result is None or result.worker_outcome in (WorkerOutcome.SKIPPED, WorkerOutcome.NO_TEST):
        return NOT_RUN
    if result.worker_outcome != WorkerOutcome.NORMAL:
        return INCOMPETENT
    if result.test_outcome == TestOutcome.SURVIVED:
        return SURVIVED
    if result.test_outcome == TestOutcome.KILLED:
        # cosmic-ray reports a timed-out suite as killed; it gave no verdict, so it is not.
        return TIMEOUT if result.output == TIMEOUT_OUTPUT else KILLED
    return INCOMPETENT


def settle(mutant: Mutant, outcome: str, checked: bool) -> str:
    """A listed equivalent is skipped, or under --check-equivalents must survive; else it contradicts the list."""
    if mutant.equivalent is None:
        return outcome
    if outcome == (SURVIVED if checked else NOT_RUN):
        return EQUIVALENT
    return f"{CONTRADICTED} {outcome}"


def match_equivalents(mutants: Sequence[Mutant], equivalents: Sequence[Equivalent]) -> list[Equivalent]:
    """Attach each mutant's entry; return the stale entries (those that match no mutant)."""
    used: set[int] = set()
    for mutant in mutants:
        for index, entry in enumerate(equivalents):
            if entry.matches(mutant):
                mutant.equivalent = entry
                used.add(index)
                break
    return [entry for index, entry in enumerate(equivalents) if index not in used]


# ---------------------------------------------------------------- running


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
                    print(f"mutation: {done} of {total} mutants done ({_duration(time.monotonic() - started)})", file=sys.stderr)
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


# ---------------------------------------------------------------- report


def tidy_diff(diff: str, copy: Path, display: str) -> str:
    """cosmic-ray's stored diff names the mutated copy; the reader knows the original."""
    lines = [line for line in diff.splitlines() if line != "--- mutation diff ---"]
    return "\n".join(lines).replace(f"/{copy}", f"/{display.lstrip('/')}").replace(str(copy), display)


def killer(output: str) -> str:
    """The first failing test in a killed run's output, else its last line."""
    for line in output.splitlines():
        if line.startswith(("FAILED ", "ERROR ")):
            return line.split(" - ")[0][:200]
    return last_line(output, 300, NO_OUTPUT)


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes}m {secs:02d}s" if minutes else f"{secs}s"


def _mutant_line(m: Mutant) -> str:
    return f"line {m.line} {m.operator}: {m.before!r} -> {m.after!r}"


def _section(title: str, items: list[str]) -> list[str]:
    return ["", title] + [f"  {item}" for item in items] if items else []


def _equivalent_lines(mutants: Sequence[Mutant]) -> list[str]:
    """One line per entry (with its mutant count and lines), then its reason."""
    by_entry: dict[Equivalent, list[Mutant]] = {}
    for m in mutants:
        by_entry.setdefault(m.equivalent, []).append(m)
    lines = []
    for entry, matched in by_entry.items():
        where = ", ".join(str(n) for n in sorted({m.line for m in matched}))
        lines += [f"{entry.describe()}  ({len(matched)} mutant{'s' * (len(matched) > 1)}, line {where})", f"  why: {entry.reason}"]
    return lines


def summarize(mutants: Sequence[Mutant], stale: Sequence[Equivalent]) -> tuple[int, list[str]]:
    """Exit code and report lines."""
    judged = [m for m in mutants if m.equivalent is None]
    count = {o: sum(m.outcome == o for m in judged) for o in (KILLED, SURVIVED, TIMEOUT, INCOMPETENT, NOT_RUN)}
    listed = [m for m in mutants if m.equivalent is not None]
    contradicted = [m for m in listed if m.outcome != EQUIVALENT]
    lines = [
        f"killed {count[KILLED]} of {len(judged)}",
        f"equivalent {len(listed) - len(contradicted)} (reviewed)",
        f"survived {count[SURVIVED]}, timeout {count[TIMEOUT]}, incompetent {count[INCOMPETENT]}, not run {count[NOT_RUN]}",
    ]
    for m in judged:
        if m.outcome == SURVIVED:
            lines += ["", f"SURVIVED {_mutant_line(m)}", m.diff or "(no diff stored)"]
        elif m.outcome != KILLED:
            lines += ["", f"{m.outcome.upper()} {_mutant_line(m)}", last_line(m.output, 300, NO_OUTPUT)]
    lines += [f"EQUIVALENT-LISTED MUTANT {m.outcome}: {_mutant_line(m)}" for m in contradicted]
    lines += [f"STALE equivalent entry (matches no mutant): {e.describe()}" for e in stale]
    lines += _section("killed:", [f"{_mutant_line(m)}  by {killer(m.output)}" for m in judged if m.outcome == KILLED])
    lines += _section("equivalent (reviewed):", _equivalent_lines([m for m in listed if m.outcome == EQUIVALENT]))
    verdict_ok = bool(judged) and count[KILLED] == len(judged) and not contradicted and not stale
    if not judged:
        lines.insert(0, "no mutant left to test: every mutant is listed as equivalent")
    return (0 if verdict_ok else 1), lines


# ---------------------------------------------------------------- command line


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m cpugpu_conformance.mutation",
        description="Mutation score of an implementation against the conformance suite (cosmic-ray).",
        epilog="Arguments after -- go to every pytest run of the suite.",
    )
    parser.add_argument("--impl", default=DEFAULT_SPEC, metavar="SPEC", help="FILE.py:Attr or module:Attr (default: the reference)")
    parser.add_argument("--equivalents", metavar="FILE", help="reviewed equivalent mutants, YAML (default: the committed list, for the reference only)")
    parser.add_argument("--workdir", metavar="DIR", help="where the copy, config and cosmic-ray session go (kept; default: a temporary directory)")
    parser.add_argument("--timeout", type=float, metavar="SECONDS", help="per-mutant timeout (default: 4 x baseline + 30 s, at least 60 s)")
    parser.add_argument("--check-equivalents", action="store_true", help="run the listed equivalents too; each must survive")
    parser.add_argument("--suite", default="conformance", metavar="DIR", help="the test directory, from the project root (default: conformance)")
    return parser


def split_extra(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    argv = list(argv)
    if "--" in argv:
        cut = argv.index("--")
        return argv[:cut], argv[cut + 1 :]
    return argv, []


def run(args: argparse.Namespace, extra: list[str]) -> int:
    try:
        import cosmic_ray  # noqa: F401
    except ImportError:
        raise BadInput("cosmic-ray is not installed: pip install 'cosmic-ray>=8,<9'") from None
    root = project_root()
    target, attr = resolve_target(args.impl)
    equivalents = load_equivalents(Path(args.equivalents)) if args.equivalents else default_equivalents(target)
    equivalents = applicable(equivalents, extra)
    display = _display(target)
    with work_directory(args.workdir) as workdir:
        copy = workdir / target.name
        if copy.resolve() == target:
            raise BadInput(f"--workdir {args.workdir!r}: is the target's own directory; the copy would be the original")
        shutil.copyfile(target, copy)
        if _is_file_spec(args.impl):  # a module's neighbours come through its package
            link_neighbours(target, workdir)
        command = suite_command(copy, attr, args.suite, extra)
        print(f"mutation: target {display}:{attr}, suite command: {shlex.join(command)}", file=sys.stderr)
        baseline = run_baseline(command, root, display, limit=args.timeout or 3600.0)
        timeout = args.timeout or default_timeout(baseline)
        config, session, log = write_config(workdir, copy, command, timeout), workdir / "session.sqlite", workdir / "cosmic-ray.log"
        init_session(config, session, root, log)
        mutants = list_mutants(session, copy)
        if not mutants:
            raise BadInput(f"--impl {args.impl!r}: cosmic-ray found nothing to mutate in {display}")
        stale = match_equivalents(mutants, equivalents)
        if not args.check_equivalents:
            skip_equivalents(session, mutants)
        started = time.monotonic()
        rc = execute(config, session, root, log, len(mutants))
        took = time.monotonic() - started
        read_results(session, mutants, copy, display, args.check_equivalents)
        code, lines = summarize(mutants, stale)
        if rc != 0:
            lines.insert(0, f"cosmic-ray exec failed (exit {rc}): {last_line(log.read_text(encoding='utf-8'), 300, NO_OUTPUT)}")
            code = code or 1
    print("\n".join(lines))
    print(f"\nbaseline {_duration(baseline)}, timeout {timeout:.0f} s per mutant, exec {_duration(took)}; {len(mutants)} mutants")
    return code


def main(argv: Sequence[str] | None = None) -> int:
    ours, extra = split_extra(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = parser.parse_args(ours)
    except SystemExit as exc:  # --help, or a usage error argparse has printed
        return exc.code if isinstance(exc.code, int) else 2
    try:
        return run(args, extra)
    except BadInput as exc:
        print(f"mutation: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
