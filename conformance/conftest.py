"""Options, hypothesis profiles and devices for the conformance suite.

    pytest conformance [--impl SPEC] [--device NAME|all] [--cell-result PATH]
                       [--cell-name NAME] [--promise N[,N...]] [--hypothesis-profile NAME]

Installed, the same suite is `cpugpu-conformance run [the same options]` (run.py).

Tests take the device as an argument. Where a test runs is single-sourced: its promises
(promises.APPLIES_TO) and, for a test that needs particular devices whatever its promises,
``@pytest.mark.devices("name", ...)``; elsewhere it is deselected, never skipped.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, Phase, settings

from cpugpu_conformance import devices
from cpugpu_conformance import impl as impl_loader
from cpugpu_conformance.promises import DEVICES

from . import recording
from .contexts import contexts_for
from .plan import (
    as_facts,
    check_device_option,
    from_facts,
    marked_devices,
    plan_devices,
    refused_plan,
    select_promises,
    wanted,
)
from .recording import IMPL, PLAN, PROMISE_FILTER, RECORD, REFUSED, WARNINGS

if TYPE_CHECKING:
    from .repro import Record

# Examples per test. The default keeps a development run in seconds; `ci` is
# derandomized with no example database, so the same torch gives the same verdict.
# The axes a bug hides behind (creation context, engine-scale size, copy direction) are
# pytest parameters, so every run covers them whatever the example budget; the examples
# vary the rest (dtype, shape, flags, n), where a few dozen per test find what thousands do.
# The budget keeps a ci run within a few times the cost of importing torch.
_EXAMPLES = 60
_COMMON = dict(
    deadline=None,  # the first CUDA call in a process takes seconds
    report_multiple_bugs=False,  # one failure per test, so the last example run is the reproducer's
    # function_scoped_fixture: the `record` fixture spans every example of a test on
    # purpose; the last example run (the shrunk failure) is the one it reports.
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
    stateful_step_count=30,
    # No explain phase: the reproducer says more, and explaining costs more than shrinking.
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
)
settings.register_profile("default", max_examples=_EXAMPLES, **_COMMON)
settings.register_profile("ci", max_examples=2 * _EXAMPLES, derandomize=True, database=None, print_blob=True, **_COMMON)
settings.register_profile("thorough", max_examples=30 * _EXAMPLES, **{**_COMMON, "stateful_step_count": 50})
DEFAULT_PROFILE = "ci" if os.environ.get("CI") else "default"
settings.load_profile(DEFAULT_PROFILE)  # --hypothesis-profile, handled by hypothesis, overrides this


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("cpugpu-conformance", "CpuGpuBuffer conformance")
    group.addoption(
        "--impl",
        default=impl_loader.DEFAULT_SPEC,
        metavar="SPEC",
        help="class under test, as module.path:Attr or path/to/file.py:Attr (default: the reference)",
    )
    group.addoption(
        "--device",
        metavar="|".join((*DEVICES, "all")),
        default=None,  # checked in pytest_configure: a bad name is one line, not argparse's usage
        help="device(s) to test; a missing device is skipped, never passed (default: every device this machine has)",
    )
    group.addoption("--cell-result", metavar="PATH", default=None, help="write the verdict of every promise and device to this JSON file")
    group.addoption("--cell-name", metavar="NAME", default=None, help="name of this cell in the result file (default: torch-<version>)")
    group.addoption("--promise", metavar="N[,N...]", default=None, help="run only the tests of these promises (CONTRACT.md numbers)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "promise(*numbers): the CONTRACT.md promises a test checks")
    config.addinivalue_line("markers", "devices(*names): the only devices a test runs on (devices.py names)")
    config.addinivalue_line("markers", "costly: a test that takes many times the others (run first, for xdist's balance)")
    config.stash[WARNINGS] = []
    if getattr(config.option, "max_warnings", None) is not None:
        # pytest 9.2's --max-warnings exits 6 when every test passed: the suite's own 6 says
        # "some promises went untested", and one code must not say two things.
        exc = pytest.UsageError("--max-warnings: its exit code (6) is the suite's 'some promises went untested'")
        config.stash[PLAN] = refused_plan(config.getoption("device"))
        _record_usage_error(_start_recorder(config, None), exc)
        raise exc
    if _hands_tests_to_workers(config) and not config.getoption("cell_result"):
        _configure_controller(config)
        return
    import torch

    # The suite checks semantics on tiny tensors: extra intra-op threads only fight
    # pytest-xdist workers for the cores.
    torch.set_num_threads(1)
    option = config.getoption("device")
    try:
        plan = plan_devices(option, devices.unavailable())
    except pytest.UsageError as exc:
        config.stash[PLAN] = refused_plan(option)
        _record_usage_error(_start_recorder(config, None), exc)
        raise
    config.stash[PLAN] = plan
    try:
        chosen = select_promises(config.getoption("promise"))
    except pytest.UsageError as exc:
        _record_usage_error(_start_recorder(config, None), exc)
        raise
    config.stash[PROMISE_FILTER] = chosen
    recorder = _start_recorder(config, chosen)
    try:
        if recorder is not None and recorder.path is not None:
            recorder.observe()  # before the class under test is imported: it may patch torch
        config.stash[IMPL] = _load_impl(config)
    except pytest.UsageError as exc:
        _record_usage_error(recorder, exc)
        if not hasattr(config, "workeroutput"):
            raise
        # A worker hands the refusal to the controller, which says it in one line: raised
        # here it would be a traceback per worker, and workers restarted in a loop.
        config.stash[REFUSED] = str(exc)
    if hasattr(config, "workeroutput"):  # for the controller, which imported no torch
        config.workeroutput[_WORKER_FACTS] = {
            "plan": as_facts(plan),
            "warnings": list(config.stash[WARNINGS]),
            "refused": config.stash.get(REFUSED, None),
        }


def _hands_tests_to_workers(config: pytest.Config) -> bool:
    """pytest-xdist's controller, which runs no test itself (with --collect-only it collects)."""
    return not hasattr(config, "workerinput") and config.getoption("dist", "no") != "no" and not config.getoption("collectonly")


def _configure_controller(config: pytest.Config) -> None:
    """The controller of ``-n N`` with no result to record needs no torch: it checks the options
    (the same one-line errors) and starts the workers at once, rather than after importing
    torch and the class under test for nothing. The device plan and warnings arrive from the
    workers (pytest_testnodedown); a class that fails to import fails in every worker."""
    check_device_option(config.getoption("device"))
    config.stash[PROMISE_FILTER] = select_promises(config.getoption("promise"))
    spec = config.getoption("impl")
    try:
        impl_loader.check(spec)
    except impl_loader.ImplError as exc:
        raise pytest.UsageError(str(exc)) from None
    except SystemExit as exc:  # a parent package of the module that ends the process
        raise pytest.UsageError(_exit_at_import(spec, exc)) from None
    config.stash[PLAN] = None
    _start_recorder(config, config.stash[PROMISE_FILTER])  # the workers' reports decide the exit status


# The key of what a worker tells the controller in its workeroutput (plain data).
_WORKER_FACTS = "cpugpu_conformance"


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """In the controller: the plan and warnings of the first worker to finish (they all agree)."""
    facts = getattr(node, "workeroutput", {}).get(_WORKER_FACTS)
    if facts and node.config.stash.get(PLAN, None) is None:
        node.config.stash[PLAN] = from_facts(facts["plan"])
        node.config.stash[WARNINGS] = facts["warnings"]
        if facts["refused"]:
            node.config.stash[REFUSED] = facts["refused"]


def _is_controller(config: pytest.Config) -> bool:
    """The only process, or xdist's controller: not a worker."""
    return not hasattr(config, "workerinput")


def _start_recorder(config: pytest.Config, chosen: frozenset[str] | None) -> recording.CellRecorder | None:
    """In the controller (or the only process), always: the recorder whose answer sets the exit
    status. With --cell-result it first holds the path and marks it in progress."""
    if not _is_controller(config):
        return None
    path = config.getoption("cell_result")
    if path == "":
        raise pytest.UsageError("--cell-result '': an empty path is no file")
    name = config.getoption("cell_name") or "this run"
    if path is not None and not config.getoption("cell_name"):
        import torch  # only for the name in the file: xdist's controller without one imports no torch

        name = f"torch-{torch.__version__.split('+')[0]}"
    profile = config.getoption("hypothesis_profile", None) or DEFAULT_PROFILE
    recorder = recording.CellRecorder(config, path, name, chosen, config.getoption("impl"), profile)
    if path is not None:
        recorder.hold()
    config.pluginmanager.register(recorder, "cpugpu-cell-recorder")
    return recorder


def _record_usage_error(recorder: recording.CellRecorder | None, exc: pytest.UsageError) -> None:
    """A run refused for bad input still replaces the result: an older pass must not stand."""
    if recorder is not None:
        recorder.write_usage_error(str(exc))


def _load_impl(config: pytest.Config) -> impl_loader.Impl:
    spec = config.getoption("impl")
    try:
        impl = impl_loader.load(spec)
    except impl_loader.ImplError as exc:
        raise pytest.UsageError(str(exc)) from None
    except SystemExit as exc:
        # sys.exit() while the class is imported: a class that cannot be imported is bad input
        # (one line, exit 4, an `error` result), not pytest's INTERNALERROR traceback and exit 3.
        raise pytest.UsageError(_exit_at_import(spec, exc)) from None
    config.stash[WARNINGS] += [
        f"importing --impl {impl.spec} replaced {name}: the suite tested the class against the replacement, not torch's own"
        for name in impl.replaced_torch
    ]
    return impl


def _exit_at_import(spec: str, exc: SystemExit) -> str:
    return f"--impl {spec!r}: importing it called sys.exit({exc.code!r}): the class cannot be imported"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "device" not in metafunc.fixturenames:
        return
    plan = metafunc.config.stash[PLAN]

    def param(device: str, *values: object, id: str) -> object:
        marks = pytest.mark.skip(reason=plan.skipped[device]) if device in plan.skipped else ()
        return pytest.param(device, *values, id=id, marks=marks)

    if "context" in metafunc.fixturenames:
        # Every creation context of each device, as its own test: each run includes them all.
        pairs = [param(d, c, id=f"{d}-{c.name}") for d in plan.parametrized for c in contexts_for(d)]
        metafunc.parametrize("device,context", pairs)
        return
    metafunc.parametrize("device", [param(d, id=d) for d in plan.parametrized])


def _wanted(item: pytest.Item, chosen: frozenset[str] | None) -> bool:
    """Whether the test runs: see plan.wanted (its devices marker, its promises, --promise)."""
    marked = [str(name) for mark in item.iter_markers("devices") for name in mark.args]
    try:
        allowed = marked_devices(marked) if marked else None
    except ValueError as exc:
        raise pytest.UsageError(f"{item.nodeid}: {exc}") from None
    plan = item.config.stash[PLAN]  # None only in xdist's controller, which runs no test
    return wanted(recording.promises_of(item), recording.device_of(item), chosen, allowed, plan.accelerators if plan else ())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # The original bug's scenario first: a pre-fix class fails in the first seconds of a run.
    # Then the costly tests: pytest-xdist hands tests out in this order, and a costly one
    # handed out last leaves the other workers idle while it runs.
    items.sort(key=lambda item: (not item.name.startswith("test_original_bug"), item.get_closest_marker("costly") is None))
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    if REFUSED in config.stash:  # a worker that could not load the class runs nothing
        drop = list(items)
    else:
        for item in items:
            (keep if _wanted(item, config.stash[PROMISE_FILTER]) else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(scope="session")
def Buffer(pytestconfig: pytest.Config):
    """The class under test (--impl)."""
    return pytestconfig.stash[IMPL].cls


@pytest.fixture
def record(request: pytest.FixtureRequest) -> Record:
    """This test's reproducer, blame and observation, kept on its item for its report."""
    from .repro import Record

    rec = Record(request.config.stash[IMPL].import_code)
    request.node.stash[RECORD] = rec
    return rec


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    recording.annotate(item, report)
    return report


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # Every requested device missing means nothing was tested: never let that read as a pass.
    if REFUSED in session.config.stash:
        session.exitstatus = pytest.ExitCode.USAGE_ERROR
        return
    plan = session.config.stash[PLAN]  # None: a controller no worker reported to (the run failed)
    if plan is not None and plan.nothing_testable and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.NO_TESTS_COLLECTED


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if REFUSED in config.stash and _is_controller(config):  # on stderr, as pytest says a usage error
        sys.stderr.write(f"ERROR: {config.stash[REFUSED]}\n")
    plan = config.stash[PLAN]
    # Workers report when they finish; none did and nobody pressed Ctrl-C: they all went down.
    if plan is None and _hands_tests_to_workers(config) and exitstatus != pytest.ExitCode.INTERRUPTED:
        terminalreporter.write_line(
            "no pytest-xdist worker finished its run (see the 'node down' lines above): the run is not a "
            "pass; the same command without -n shows why", red=True)
    if plan is not None and plan.nothing_testable:
        reasons = "; ".join(f"{d}: {r}" for d, r in plan.skipped.items())
        terminalreporter.write_line(f"nothing was tested: no requested device is available ({reasons})", red=True)
    for warning in config.stash[WARNINGS]:
        terminalreporter.write_line(f"warning: {warning}", yellow=True)
