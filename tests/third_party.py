"""A third-party project that runs the contract's checks inside its own pytest run (issue 16,
item 5), as a new user of `cpugpu_conformance.testing` would write it: its own strict pytest.ini,
its own conftest.py (the plugin enabled explicitly, an autouse fixture, a hypothesis profile of
its own, loaded), its own buffer module, and test modules that subclass the library's base
classes. It runs from an environment that holds the wheel and no checkout."""

from __future__ import annotations

import inspect
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import forkserver
from suite_runner import TESTS, outside_env

from cpugpu_conformance import reference, results, variants

# The project's hypothesis profile: few examples, the same ones every run. The library's tests
# carry only the settings they need (deadline, health checks), so this governs the rest.
PROFILE = "theirs"
MAX_EXAMPLES = 20  # the floor (budget.py): fewer examples and a test is untested
# A second profile of theirs, for runs that ask only whether classes are rejected: no shrinking
# (a failing example at engine scale shrinks for seconds; two broken classes took 120 s, not 12).
QUICK_PROFILE = "theirs-quick"
# The examples of the shipped suite's ci profile, which tests/test_variants.py relies on: fewer miss
# the bugs that need one particular draw (copy_to_gpu(0); float32 under a float16 default).
QUICK_EXAMPLES = 120

# The area classes LIBRARY_API.md names, each usable alone.
AREA_NAMES = ("ShapeAndDtypeTests", "ZeroedTests", "MutabilityTests", "StorageTests", "NumpyViewTests",
              "ExoticDtypeTests", "CopyTests", "StoragesForLifeTests", "DeviceTests", "SideEffectTests",
              "IndependenceTests", "EngineScaleTests", "StateMachineTests")

PYTEST_INI = """\
[pytest]
addopts = --strict-markers
filterwarnings = error
xfail_strict = true
testpaths = tests
pythonpath = .
"""

CONFTEST = f'''\
"""The project's own conftest: the contract's plugin, a fixture of ours, a profile of ours."""

import pathlib

import pytest
from hypothesis import Phase, settings

pytest_plugins = ["cpugpu_conformance.testing.plugin"]

settings.register_profile({PROFILE!r}, max_examples={MAX_EXAMPLES}, stateful_step_count=10, derandomize=True, database=None)
settings.load_profile({PROFILE!r})
settings.register_profile({QUICK_PROFILE!r}, parent=settings.get_profile({PROFILE!r}), max_examples={QUICK_EXAMPLES},
                          phases=[Phase.explicit, Phase.reuse, Phase.generate])

RAN = pathlib.Path(__file__).with_name("autouse-ran.txt")


@pytest.fixture(autouse=True)
def our_own_fixture(request):
    with RAN.open("a") as log:
        log.write(f"{{request.node.cls.__name__}}::{{request.node.name}}\\n")
    yield
'''

# The project's buffers: the reference's source and the class before the fix, copied in, and a
# class with a constructor of its own (a shape tuple, its own names for the flags), for an adapter.
SHAPED_BUFFER = '''

class ShapedBuffer(CpuGpuBuffer):
    """Our own constructor: one shape tuple, and our own names for the flags."""

    def __init__(self, shape, *, dtype, device, pin=False, numpy=True):
        super().__init__(*shape, dtype=dtype, device=device, pin_memory=pin, with_numpy=numpy)
'''
BUFFERS = inspect.getsource(reference) + "\n\n" + inspect.getsource(variants.PreFixCpuGpuBuffer) + SHAPED_BUFFER

# The adapter the README documents, for ShapedBuffer: with_numpy defaults to True, as the
# contract's constructor's does (the library leaves it out where it checks that default).
ADAPTER = '''
    def make_buffer(self, *size, dtype, device, pin_memory=False, with_numpy=True):
        return self.buffer_cls(size, dtype=dtype, device=device, pin=pin_memory, numpy=with_numpy)
'''

# A module where the pre-fix class's name is the reference: a reproducer written against the
# project's module, run beside this one instead, must hold.
FIXED_BUFFERS = "from cpugpu_conformance.reference import CpuGpuBuffer as PreFixCpuGpuBuffer  # noqa: F401\n"

# A hook for a project's conftest that rewrites every failed report as a pass: the trick neither
# the buffer promises (test_promise_evidence.py) nor a MutableStateTests class
# (test_mutable_state_result.py) may be talked out of their failures by.
REWRITE_FAILURES = '''
import pytest


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.failed:
        report.outcome = "passed"
        report.longrepr = None
    return report
'''

# The head of a project's module of state classes: the seed's bug (a workspace allocated at
# warm-up in the caller's mode) and its fix, for the MutableStateTests runs of
# test_mutable_state_result.py and test_gate_mutable_state.py; each adds its own test class.
SEED_STATES = '''
import torch

from cpugpu_conformance.testing import MutableStateTests


class Lazy:
    """A workspace allocated at warm-up, in whatever mode the caller is in: the seed's bug."""

    def __init__(self, device):
        self.device, self.workspace = device, None

    def warm_up(self):
        self.workspace = torch.zeros(4, dtype=torch.float32, device=self.device)


class Fixed(Lazy):
    def warm_up(self):
        with torch.inference_mode(False):  # and the dtype and device named: no default moves it
            self.workspace = torch.zeros(4, dtype=torch.float32, device=self.device)
'''


def contract_module(cls_name: str, buffer: str, body: str = "", imports: str = "from ourbuffers import {buffer}") -> str:
    """A test module with one subclass of BufferContractTests against ``buffer``."""
    head = f"import pytest  # noqa: F401\n\nfrom cpugpu_conformance.testing import BufferContractTests\n{imports.format(buffer=buffer)}\n"
    return f"{head}\n\nclass {cls_name}(BufferContractTests):\n    buffer_cls = {buffer}\n{body}"


def many_classes_module(classes: dict[str, str], bodies: dict[str, str] | None = None,
                        bases: dict[str, list[str]] | None = None) -> str:
    """A test module with one test class per entry: test class name -> the buffer class, as
    `module.Name` (the variants from the installed package; the alternatives and the project's own
    buffers copied in); it subclasses BufferContractTests, or the area classes ``bases`` names for
    it, with the body ``bodies`` gives it, if any."""
    out = ["import alt_impls  # noqa: F401",
           "import ourbuffers  # noqa: F401",
           "from cpugpu_conformance import variants  # noqa: F401",
           f"from cpugpu_conformance.testing import BufferContractTests, {', '.join(AREA_NAMES)}  # noqa: F401",
           ""]
    for test_cls, buffer in classes.items():
        parents = ", ".join((bases or {}).get(test_cls, ["BufferContractTests"]))
        out += ["", f"class {test_cls}({parents}):", f"    buffer_cls = {buffer}", (bodies or {}).get(test_cls, "")]
    return "\n".join(out)


def promises_of_tests() -> dict[str, set[str]]:
    """Each test of the library (by function name) -> the promises its cpugpu_promise marker names."""
    from cpugpu_conformance.testing import BufferContractTests  # tests/conftest.py registers its marks

    out = {}
    for name in dir(BufferContractTests):
        if name.startswith("test_"):
            marks = getattr(getattr(BufferContractTests, name), "pytestmark", [])
            out[name] = {str(n) for mark in marks if mark.name == "cpugpu_promise" for n in mark.args}
    return out


def areas_checking(promise: str) -> list[str]:
    """The area classes with a test of ``promise``: a class built of them runs what `--promise` would."""
    from cpugpu_conformance import testing

    tests = promises_of_tests()
    return [name for name in AREA_NAMES
            if any(promise in tests.get(attr, ()) for attr in vars(getattr(testing, name)))]


def make_project(where: Path, modules: dict[str, str]) -> Path:
    """The project in ``where``: its configuration, its buffers and the test modules given
    (file name under tests/ -> source)."""
    (where / "tests").mkdir(parents=True)
    (where / "pytest.ini").write_text(PYTEST_INI)
    (where / "conftest.py").write_text(CONFTEST)
    (where / "ourbuffers.py").write_text(BUFFERS)
    (where / "alt_impls.py").write_text((TESTS / "alt_impls.py").read_text())
    for name, source in modules.items():
        (where / "tests" / name).write_text(source)
    return where


def broken_class_project(where: Path, module: str, source: str, buffer: str, *, body: str = "",
                         bases: str = "BufferContractTests", conftest_extra: str = "") -> Path:
    """A project whose ``module`` (its source given) holds broken classes, and one test class of
    ``bases`` against ``buffer`` from it, with ``body``; ``conftest_extra`` appended to its conftest."""
    test = (f"import pytest  # noqa: F401\n\nfrom cpugpu_conformance.testing import {bases}\n"
            f"from {module} import {buffer}\n\n\nclass TestOurs({bases}):\n    buffer_cls = {buffer}\n{body}")
    make_project(where, {"test_ours.py": test})
    (where / f"{module}.py").write_text(source)
    if conftest_extra:
        with (where / "conftest.py").open("a") as conftest:
            conftest.write(conftest_extra)
    return where


@dataclass(frozen=True)
class Case:
    """One test case as the run's JUnit XML says: its class, its name, what became of it."""

    cls: str
    name: str
    outcome: str  # passed, failed, error, skipped
    seconds: float = 0.0

    @property
    def function(self) -> str:
        return self.name.split("[", 1)[0]


@dataclass
class ProjectRun:
    project: Path
    returncode: int
    stdout: str
    stderr: str
    cases: list[Case]
    result_path: Path | None

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def tail(self, n: int = 6000) -> str:
        return f"exit {self.returncode}\n{self.stdout[-n:]}\n{self.stderr[-3000:]}"

    @property
    def cell(self) -> results.CellResult:
        assert self.result_path is not None and self.result_path.exists(), f"no result file\n{self.tail()}"
        return results.CellResult.load(self.result_path)

    def outcomes(self, cls: str | None = None) -> Counter[str]:
        return Counter(c.outcome for c in self.cases if cls is None or c.cls == cls)

    def seconds(self) -> dict[str, float]:
        """Test time per class, for a report on where a run's time went."""
        out: dict[str, float] = {}
        for c in self.cases:
            out[c.cls] = out.get(c.cls, 0.0) + c.seconds
        return out

    def autouse_log(self) -> list[str]:
        path = self.project / "autouse-ran.txt"
        return path.read_text().splitlines() if path.exists() else []


def _cases(junit: Path) -> list[Case]:
    out = []
    for case in ET.parse(junit).iter("testcase"):
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[kinds[0]] if kinds else "passed"
        out.append(Case(case.get("classname", "").rsplit(".", 1)[-1], case.get("name", ""), outcome,
                        float(case.get("time") or 0)))
    return out


def run_project(bin_dir: Path, project: Path, *args: str, result: str | None = None, timeout: float = 600) -> ProjectRun:
    """The project's own pytest, from the environment, in the project: ``pytest ARGS`` (with
    ``--cpugpu-cell-result RESULT`` when given), its JUnit XML read back."""
    junit = project / "junit.xml"
    extra = ["--cpugpu-cell-result", result] if result else []
    command = [str(bin_dir / "pytest"), f"--junitxml={junit}", *extra, *args]
    if Path(bin_dir).resolve() == Path(sys.executable).parent.resolve():
        # The tests' own environment: its console script, from the fork server (torch imported once).
        proc = forkserver.run_python(command, cwd=project, env=outside_env(), timeout=timeout)
    else:
        proc = subprocess.run(command, cwd=project, env=outside_env(), capture_output=True, text=True, timeout=timeout)
    cases = _cases(junit) if junit.exists() else []
    return ProjectRun(project, proc.returncode, proc.stdout, proc.stderr, cases, project / result if result else None)


def run_python(bin_dir: Path, cwd: Path, script: str, name: str) -> subprocess.CompletedProcess[str]:
    """A script of the project's, run with the environment's python from ``cwd`` (its folder first on the path)."""
    path = cwd / name
    path.write_text(script)
    return subprocess.run([str(bin_dir / "python"), str(path)], cwd=cwd, env=outside_env(),
                          capture_output=True, text=True, timeout=300)


def run_tool(bin_dir: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(bin_dir / "cpugpu-conformance"), *args], cwd=cwd, env=outside_env(),
                          capture_output=True, text=True, timeout=300)
