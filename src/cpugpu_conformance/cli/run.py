"""``cpugpu-conformance run [--impl SPEC] [--device ...] [--cell-result PATH] [pytest args]``.

The suite ships in the package (the wheel maps conformance/ to ``cpugpu_conformance/suite``),
so a team tests its own class with no checkout of this repository. Every argument reaches
pytest: the suite's options and any of pytest's. The exit code is the suite's (the plugin
sets it from the run's answer, as for ``pytest conformance``): 0 every promise asked for
passed (or was recorded), 1 one failed, 2 interrupted, 3 internal error, 4 bad input,
5 nothing was tested, 6 some promises asked for went untested and none failed.

pytest reads the suite's own ini (``-c``) with the suite's folder as rootdir and confcutdir,
so a pytest.ini, pyproject.toml, setup.cfg, tox.ini or conftest.py in the caller's directory
cannot change the run: the suite's own value-taking options are joined to their values
(``--cell-name=.``) before pytest reads them (see SUITE_VALUE_OPTIONS), and the test process
refuses a path outside the suite before pytest loads any conftest.py
(``pytest_load_initial_conftests`` below: this module is a plugin of the test process).

pytest runs in a child process that says, in a file, that it reached its end: a process that
ends without saying so (the class under test called ``os._exit(0)``, or was killed) is an
interrupted run, exit 2, whatever its own exit status; never a 0 (see ``main``).

Importing this module needs pytest and nothing of the [tools] extra.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..exits import SuiteExit
from .run_result import identity, mark_not_started, record_refusal, says_interrupted

HELP = "run the conformance suite on the reference or your class (--impl SPEC); every argument goes to pytest"

# Named so that pytest never picks it up by itself (it looks for pytest.ini): a checkout's
# `pytest conformance` keeps the repository's own configuration.
INI_NAME = "suite.ini"


# The suite's options that take a value (conftest.py adds them). pytest reads the command
# line once before it loads any conftest.py, when it does not know these yet: it takes
# `--cell-name .` for an unknown flag and a path `.`, and loads that folder's conftest.py.
# `--cell-name=.` is one argument that is never a path.
SUITE_VALUE_OPTIONS = ("--impl", "--device", "--cell-result", "--cell-name", "--promise", "--known-failures")

_CACHE = "needs pytest's cache, which `run` keeps off (it would be written into the installed package)"
_SUITE_FOLDER = "`run` sets it to the suite's folder, so that no configuration or conftest.py from elsewhere is read"
# Options `run` refuses before pytest starts (one line, exit 4), and why.
REFUSED_OPTIONS = {
    **dict.fromkeys(("--lf", "--last-failed", "--ff", "--failed-first", "--nf", "--new-first", "--lfnf",
                     "--last-failed-no-failures", "--cache-show", "--cache-clear", "--sw", "--stepwise",
                     "--sw-skip", "--stepwise-skip", "--sw-reset", "--stepwise-reset"), _CACHE),
    "--noconftest": "it would drop the suite's own conftest.py (its options and its result file)",
    "--pyargs": "it would collect modules from anywhere on the path, with their folders' conftest.py",
    **dict.fromkeys(("--confcutdir", "--rootdir", "-c", "--config-file", "--inifile"), _SUITE_FOLDER),
}
# Plugins the suite cannot run without (-p no:NAME).
NEEDED_PLUGINS = {
    "hypothesispytest": "the suite needs hypothesis's pytest plugin (--hypothesis-profile, its health checks)",
    "cpugpu_conformance.testing.plugin": "the library's plugin is what judges the run and writes its result file",
    "cpugpu-cell-recorder": "the recorder is what judges the run and sets its exit status",
    __name__: "it is how `run` keeps the caller's directory out of the run",
}

class SuiteNotFound(Exception):
    """Neither the installed suite nor a checkout's conformance/ is there; one line says where it looked."""


def suite_dir() -> Path:
    """The suite's folder: inside the installed package, or conformance/ next to src/ in a checkout."""
    package = Path(__file__).resolve().parents[1]
    candidates = (package / "suite", package.parent.parent / "conformance")
    for folder in candidates:
        if (folder / "conftest.py").is_file() and (folder / INI_NAME).is_file():
            return folder
    raise SuiteNotFound(f"cpugpu-conformance run: the suite is not installed (looked in {', '.join(map(str, candidates))})")


def suite_pytest_args(folder: Path, args: Sequence[str]) -> list[str]:
    """The suite's folder with its own ini, rootdir and confcutdir, no cache written into the
    package, then the caller's args."""
    return ["-c", str(folder / INI_NAME), "--rootdir", str(folder), "--confcutdir", str(folder),
            "-p", "no:cacheprovider", str(folder), *args]


# ---------------------------------------------------------------------------- the command line


@dataclass
class Prepared:
    """The caller's arguments as pytest gets them, what `run` needs of them, and why it refuses them."""

    args: list[str] = field(default_factory=list)
    values: dict[str, str] = field(default_factory=dict)  # the suite's options (the last one given wins)
    refusal: str | None = None  # the first reason to refuse, as one line

    @property
    def cell_result(self) -> str | None:
        return self.values.get("--cell-result")

    def refuse(self, why: str) -> None:
        self.refusal = self.refusal or why


def prepare(args: Sequence[str]) -> Prepared:
    """Join the suite's options to their values, and find what `run` refuses (bad input, exit 4)."""
    prepared = Prepared()
    args = list(args)
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":  # pytest reads what follows as paths
            prepared.args += args[i:]
            break
        name, eq, value = arg.partition("=")
        if name in SUITE_VALUE_OPTIONS:
            if not eq:
                if i + 1 == len(args) or args[i + 1].startswith("-"):
                    prepared.refuse(f"{name} needs a value")
                    i += 1
                    continue
                i, value = i + 1, args[i + 1]
            prepared.values[name] = value
            prepared.args.append(f"{name}={value}")
        else:
            if arg == "-p" and i + 1 < len(args):
                prepared.args.append(arg)
                i, arg = i + 1, args[i + 1]
                _check_plugin(prepared, arg)
            elif arg.startswith("-p") and not arg.startswith("--"):
                _check_plugin(prepared, arg[2:])
            else:
                _check_option(prepared, arg)
            prepared.args.append(arg)
        i += 1
    _check_result_path(prepared)
    return prepared


def _check_option(prepared: Prepared, arg: str) -> None:
    name = arg.partition("=")[0] if arg.startswith("--") else arg[:2] if arg.startswith("-c") else arg
    if name in REFUSED_OPTIONS:
        prepared.refuse(f"{name}: {REFUSED_OPTIONS[name]}")


def _check_plugin(prepared: Prepared, plugin: str) -> None:
    blocked = plugin.strip().removeprefix("no:") if plugin.strip().startswith("no:") else None
    if blocked in NEEDED_PLUGINS:
        prepared.refuse(f"-p no:{blocked}: {NEEDED_PLUGINS[blocked]}")


def _check_result_path(prepared: Prepared) -> None:
    """--cell-result names a regular file or a path that does not exist yet; never a FIFO, a
    device, a directory (the rename that writes a result would replace it)."""
    from .. import results

    path = prepared.cell_result
    if path is None:
        return
    if not path:
        prepared.refuse("--cell-result '': an empty path is no file")
        return
    try:
        results.check_writable(path)
    except results.NotRegularFile as exc:
        prepared.refuse(f"--cell-result {exc}")
        prepared.values.pop("--cell-result")  # nothing may be written there, not even the refusal
    except OSError:
        pass  # a folder that cannot be read or written: the suite says so when it takes the path


def _refuse(prepared: Prepared) -> int:
    assert prepared.refusal is not None
    problem = record_refusal(prepared, "error", f"usage error (pytest exit status 4): {prepared.refusal}", SuiteExit.USAGE_ERROR)
    print(f"cpugpu-conformance run: {prepared.refusal}" + (f" ({problem})" if problem else ""), file=sys.stderr)
    return SuiteExit.USAGE_ERROR


# ---------------------------------------------------------------------------- the test process

# The test process: the parent's sys.path (so it imports what the parent would, and nothing
# from the caller's directory that `python -c` would put first), the argv the result file
# records, then pytest. Only `sys` is imported before the path is set.
_CHILD = (
    "import sys\n"
    "a = sys.argv; n = int(a[2]); sys.path[:] = a[3:3 + n]; m = int(a[3 + n])\n"
    "sys.argv = ['cpugpu-conformance', *a[4 + n:4 + n + m]]\n"
    f"from {__name__} import child_main\n"
    "child_main(a[1], a[4 + n + m:])\n"
)


def child_command(end: Path, args: Sequence[str]) -> list[str]:
    shown = sys.argv[1:]
    return [sys.executable, "-c", _CHILD, str(end), str(len(sys.path)), *sys.path, str(len(shown)), *shown, *args]


def child_main(end: str, args: Sequence[str]) -> None:
    """In the test process: pytest, then its exit status written to ``end``: the sign that the
    run reached its end. The process then ends at once (no interpreter teardown with torch
    loaded: pytest has written the result and released its lock)."""
    import pytest

    try:
        # This module is the plugin that keeps other folders out (pytest_load_initial_conftests).
        # xdist's workers go without: they read the same arguments, which it let through.
        code = int(pytest.main(list(args), plugins=[sys.modules[__name__]]))
    except KeyboardInterrupt:  # a second Ctrl-C while pytest was ending: interrupted all the same
        code = SuiteExit.INTERRUPTED
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    Path(end).write_text(str(code))
    os._exit(code)


def _in_terminal_foreground() -> bool:
    """Whether this process is in its terminal's foreground group: a Ctrl-C there reaches every
    process of the group, the test process included."""
    for fd in (0, 1, 2):
        try:
            return os.tcgetpgrp(fd) == os.getpgrp()
        except (OSError, AttributeError):
            continue
    return False


@contextlib.contextmanager
def _forwarding_signals(child: list[subprocess.Popen[bytes]]):
    """SIGTERM and SIGHUP sent to `run` reach the test process; so does SIGINT, unless it came
    from the terminal, which sent it to the test process already (twice would interrupt
    pytest while it writes the result). A signal `run` was started with ignored stays ignored,
    as the test process inherits it (a background job ignores SIGINT)."""

    def forward(signum: int, _frame: Any) -> None:
        if signum == signal.SIGINT and _in_terminal_foreground():
            return
        for proc in child:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signum)

    previous = {}
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        signum = getattr(signal, name, None)
        if signum is not None and signal.getsignal(signum) is not signal.SIG_IGN:
            previous[signum] = signal.signal(signum, forward)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _how_it_ended(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "a signal"
        return f"was killed by {name} (signal {-returncode})"
    return f"exited with status {returncode}"


def run_suite(folder: Path, prepared: Prepared) -> int:
    """Run pytest in a child process; its exit status, if it reached its end.

    A test process can end without pytest finishing: the class under test calls os._exit(0),
    or the process is killed. Its own exit status then says nothing (0 would read as a pass),
    and the result file holds the run's ``interrupted`` placeholder: so the run is
    interrupted, exit 2, whatever the status, with one line saying how it ended. Only an
    end marker written after pytest.main returned makes the child's status the run's.
    """
    before = identity(prepared.cell_result)
    child: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory(prefix="cpugpu-conformance-run-") as tmp, _forwarding_signals(child):
        end = Path(tmp) / "end"
        # Hypothesis keeps its example database in the current folder (.hypothesis/): the caller's
        # folder is theirs, so the run's database lives and dies with the run (the ci profile has none).
        env = {**os.environ, "HYPOTHESIS_STORAGE_DIRECTORY": os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY")
               or str(Path(tmp) / "hypothesis")}
        child.append(subprocess.Popen(child_command(end, suite_pytest_args(folder, prepared.args)), env=env))
        returncode = child[0].wait()
        code = int(end.read_text()) if end.is_file() else None
    if code is None:
        # The file holds the run's placeholder, or (killed before pytest held it) an earlier
        # run's answer: either way it now says how this run ended.
        how = f"the test process {_how_it_ended(returncode)} before pytest finished"
        problem = record_refusal(prepared, "interrupted", f"{how}: not every test ran", SuiteExit.INTERRUPTED)
        sys.stdout.write("\n")  # end the line of test progress the process left unfinished
        sys.stdout.flush()
        print(f"cpugpu-conformance run: {how}: the run was interrupted, it is not a pass"
              + (f" ({problem})" if problem else ""), file=sys.stderr)
        return SuiteExit.INTERRUPTED
    if prepared.cell_result and identity(prepared.cell_result) == before:
        # The suite wrote nothing: pytest refused the command line before the suite started (its
        # message is above), or the plugin never loaded. The path still says NOT_STARTED; say how.
        if code == 0:
            why = ("pytest exited 0, but the suite wrote no result: the library's plugin did not run "
                   "(-p no:cpugpu_conformance.testing.plugin in PYTEST_ADDOPTS?)")
            record_refusal(prepared, "error", why, code)
            print(f"cpugpu-conformance run: {why}: it is not a pass", file=sys.stderr)
            return SuiteExit.INTERNAL_ERROR
        status = "interrupted" if code == SuiteExit.INTERRUPTED else "error"
        record_refusal(prepared, status, f"pytest exit status {code} before the suite started (see the run's output)", code)
    elif prepared.cell_result and code != SuiteExit.INTERRUPTED and says_interrupted(prepared.cell_result):
        # pytest reached its end, but the file still says the run never finished (its placeholder:
        # nothing judged the run). The exit status says what the file says: never a pass.
        print(f"cpugpu-conformance run: pytest exited {code}, but {prepared.cell_result} says the run did not "
              "finish: it was interrupted, it is not a pass", file=sys.stderr)
        return SuiteExit.INTERRUPTED
    return code


def main(args: Sequence[str]) -> int:
    """Run the suite with ``args``; returns the suite's exit code."""
    try:
        folder = suite_dir()
    except SuiteNotFound as exc:
        print(exc, file=sys.stderr)
        return SuiteExit.USAGE_ERROR
    prepared = prepare(args)
    if prepared.refusal:
        return _refuse(prepared)
    problem = mark_not_started(prepared)
    if problem:  # nothing was written there: the path is another run's, or not ours to replace
        print(f"cpugpu-conformance run: {problem}", file=sys.stderr)
        return SuiteExit.USAGE_ERROR
    return run_suite(folder, prepared)


# ---------------------------------------------------------------------------- the plugin, in the test process
# (child_main registers this module: pytest takes every function here named pytest_* for a
# hook, so only hooks may have such a name)


def pytest_load_initial_conftests(early_config: Any) -> None:
    """Before pytest loads any conftest.py: refuse a path outside the suite (a positional
    argument, from the command line, PYTEST_ADDOPTS or an @file), whose conftest.py pytest
    would load, and what would change which conftest.py files load. Raised here, a
    UsageError is pytest's one line and exit 4."""
    import pytest

    folder = suite_dir().resolve()
    early = early_config.known_args_namespace
    if early.noconftest:
        raise pytest.UsageError(f"--noconftest: {REFUSED_OPTIONS['--noconftest']}")
    if early.confcutdir and Path(early.confcutdir).resolve() != folder:
        raise pytest.UsageError(f"--confcutdir {early.confcutdir}: {_SUITE_FOLDER}")
    for arg in early.file_or_dir or ():
        path = (Path(early_config.invocation_params.dir) / str(arg).split("::", 1)[0]).resolve()
        if path.exists() and not path.is_relative_to(folder):
            raise pytest.UsageError(
                f"{arg}: not in the suite's folder ({folder}): `run` runs the suite's tests only, and pytest would "
                "load the conftest.py of that folder; choose tests with -k or --promise")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "pytest_args",
        nargs=argparse.REMAINDER,
        metavar="ARGS",
        help="the suite's options (--impl, --device, --cell-result, --cell-name, --promise, --known-failures, "
        "--hypothesis-profile) and any of pytest's; `run --help` lists them all",
    )


def run(args: argparse.Namespace) -> int:
    return main(args.pytest_args)
