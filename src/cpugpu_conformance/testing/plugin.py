"""The pytest plugin of the library: enable it in your conftest.py, nowhere else.

    pytest_plugins = ["cpugpu_conformance.testing.plugin"]    (or: pytest -p cpugpu_conformance.testing.plugin)

    pytest [--cpugpu-device NAME|all] [--cpugpu-promise N[,N...]] [--cpugpu-known-failures FILE]
           [--cpugpu-cell-result PATH] [--cpugpu-cell-name NAME] [--hypothesis-profile cpugpu-ci]

It parametrizes the tests of the library's classes (BufferTests and its subclasses) by device
and creation context, records a verdict per promise and device, and with --cpugpu-cell-result
writes the result file a matrix cell writes (the same schema: `cpugpu-conformance gate` reads
it). Its markers (cpugpu_promise, cpugpu_devices, cpugpu_costly) and hypothesis profiles
(cpugpu-default, cpugpu-ci, cpugpu-thorough) are namespaced, and it changes nothing
process-wide: it loads no hypothesis profile, sets no thread count, and leaves the exit status
as pytest's own unless a result file is asked for (then the exit code says what the file says:
0 every promise asked for passed or was recorded, 1 one failed, 5 nothing tested, 6 some
untested, none failed).

Where a test runs is single-sourced: its promises (promises.APPLIES_TO) and, for a test that
needs particular devices whatever its promises, ``@pytest.mark.cpugpu_devices("name", ...)``;
elsewhere it is deselected, never skipped.

The shipped suite (conformance/) is one subclass; its conftest.py adds --impl and the old
spellings, and asks for the suite's own exit status (SUITE_EXIT) on every run.

PYTEST_DONT_REWRITE (why: cpugpu_conformance.testing's docstring).
"""

from __future__ import annotations

import sys
from collections import Counter
from typing import Any

import pytest

from cpugpu_conformance import devices

from .collected import check_classes, is_buffer_class, is_state_class, kind_of, runs_here, say_collisions, why_not_here
from .shared import marks
from .shared.marks import COSTLY_MARK
from .verdict import recording, reports, torch_is_torch
from .verdict.plan import (
    DevicePlan,
    as_facts,
    check_device_option,
    flags,
    from_facts,
    plan_devices,
    refused_plan,
    select_promises,
)
from .verdict.start import is_controller, load_known_failures, record_usage_error, start_recorder
from .verdict.stash import (
    LOAD_CLASS,
    PLAN,
    PROMISE_FILTER,
    REFUSED,
    RUN_FACTS,
    SUITE_EXIT,
    TESTED_CLASSES,
    TORCH_REPLACED,
    WARNINGS,
    WORKER_FACTS,
)
from .verdict.state_judge import KIND as STATE_KIND

# The plugin's hypothesis profiles, registered (never loaded) when a run names one: importing
# hypothesis costs a run that never uses it seconds, so the plugin imports it only then.
PROFILE_PREFIX = "cpugpu-"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("cpugpu", "cpugpu-conformance: the CpuGpuBuffer contract")
    group.addoption(
        "--cpugpu-device",
        dest="cpugpu_device",
        metavar="|".join((*devices.NAMES, "all")),
        default=None,  # checked in pytest_configure: a bad name is one line, not argparse's usage
        help="device(s) to test; a missing device is skipped, never passed (default: every device this machine has)",
    )
    group.addoption("--cpugpu-cell-result", dest="cpugpu_cell_result", metavar="PATH", default=None,
                    help="write the verdict of every promise and device to this JSON file "
                         "(the exit code then says it too)")
    group.addoption("--cpugpu-cell-name", dest="cpugpu_cell_name", metavar="NAME", default=None,
                    help="name of this cell in the result file (default: torch-<version>)")
    group.addoption("--cpugpu-promise", dest="cpugpu_promise", metavar="N[,N...]", default=None,
                    help="run only the tests of these promises (CONTRACT.md numbers)")
    group.addoption("--cpugpu-known-failures", dest="cpugpu_known_failures", metavar="FILE", default=None,
                    help="a TOML file of [[known_failure]] entries (promise, device, torch, reason): a listed promise "
                         "that fails is a known failure, not a failure of the run; one that passes fails the run")


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    """Loaded as an entry point, the plugin sees the command line before pytest has accepted it:
    a result path is marked `error` now, before the conftests are imported, so that a run pytest
    refuses later (an unknown option, a bad ini value, a conftest that fails to import) leaves no
    earlier pass behind; the run's own start replaces the mark."""
    path = getattr(early_config.known_args_namespace, "cpugpu_cell_result", None)
    if path:
        recording.mark_refused(path)


@pytest.hookimpl(tryfirst=True, specname="pytest_configure")
def pytest_configure_checks_hypothesis_profile(config: pytest.Config) -> None:
    """Before hypothesis's configure, which loads --hypothesis-profile (and raises an internal error
    for an unknown one): the plugin's profiles are registered, and a profile nobody registered is
    one line, exit 4."""
    name = config.getoption("hypothesis_profile", None)
    if name:
        from hypothesis import settings
        from hypothesis.errors import InvalidArgument

        from .shared import budget

        budget.register_profiles(PROFILE_PREFIX)
        try:
            settings.get_profile(name)
        except InvalidArgument:
            exc = pytest.UsageError(f"--hypothesis-profile {name!r}: no such hypothesis profile (registered: "
                                    f"{', '.join(sorted(settings._profiles)) or 'none'})")
            if config.getoption("cpugpu_cell_result", None) and not hasattr(config, "workerinput"):
                config.stash[PLAN] = refused_plan(config.getoption("cpugpu_device"))
                config.stash[WARNINGS] = []
                record_usage_error(start_recorder(config, None), exc)
            raise exc from None


def _asked(config: pytest.Config) -> bool:
    """Whether this run asks anything of the plugin: the shipped suite, or one of its options. A run
    that does not stays inert until a library test class is collected: no torch imported, nothing
    worked out, nothing said."""
    options = ("cpugpu_device", "cpugpu_promise", "cpugpu_cell_result", "cpugpu_cell_name")
    return config.stash.get(SUITE_EXIT, False) or any(config.getoption(o, None) is not None for o in options)


def pytest_configure(config: pytest.Config) -> None:
    marks.register_markers(config)
    config.stash[WARNINGS] = []
    config.stash[TESTED_CLASSES] = []
    if not _asked(config):
        config.stash[PROMISE_FILTER] = None
        if not hasattr(config, "workerinput"):
            start_recorder(config, None)  # says what went untested, if a library class turns up
        return
    if getattr(config.option, "max_warnings", None) is not None and config.stash.get(SUITE_EXIT, False):
        # pytest 9.2's --max-warnings exits 6 when every test passed: the suite's own 6 says
        # "some promises went untested", and one code must not say two things.
        exc = pytest.UsageError("--max-warnings: its exit code (6) is the suite's 'some promises went untested'")
        config.stash[PLAN] = refused_plan(config.getoption("cpugpu_device"))
        record_usage_error(start_recorder(config, None), exc)
        raise exc
    if _hands_tests_to_workers(config) and not config.getoption("cpugpu_cell_result"):
        _configure_controller(config)
        return
    option = config.getoption("cpugpu_device")
    try:
        plan = plan_devices(option, devices.unavailable_to_run(option), flags(config))
    except pytest.UsageError as exc:
        config.stash[PLAN] = refused_plan(option)
        record_usage_error(start_recorder(config, None), exc)
        raise
    config.stash[PLAN] = plan
    try:
        chosen = select_promises(config.getoption("cpugpu_promise"), flags(config))
    except pytest.UsageError as exc:
        record_usage_error(start_recorder(config, None), exc)
        raise
    config.stash[PROMISE_FILTER] = chosen
    recorder = start_recorder(config, chosen)
    load_known_failures(config, recorder)
    try:
        if recorder is not None and recorder.path is not None:
            recorder.observe()  # before the class under test is imported: it may patch torch
        if LOAD_CLASS in config.stash:
            config.stash[LOAD_CLASS](config)
    except pytest.UsageError as exc:
        record_usage_error(recorder, exc)
        if not hasattr(config, "workeroutput"):
            raise
        # A worker hands the refusal to the controller, which says it in one line: raised
        # here it would be a traceback per worker, and workers restarted in a loop.
        config.stash[REFUSED] = str(exc)
    if hasattr(config, "workeroutput"):  # for the controller, which imported no torch
        config.workeroutput[WORKER_FACTS] = {
            "plan": as_facts(plan),
            "warnings": config.stash[WARNINGS].copy(),
            "refused": config.stash.get(REFUSED, None),
        }


def _hands_tests_to_workers(config: pytest.Config) -> bool:
    """pytest-xdist's controller, which runs no test itself (with --collect-only it collects)."""
    workers = config.getoption("dist", "no") != "no"
    return not hasattr(config, "workerinput") and workers and not config.getoption("collectonly")


def _configure_controller(config: pytest.Config) -> None:
    """The controller of ``-n N`` with no result to record needs no torch: it checks the options
    (the same one-line errors) and starts the workers at once. The device plan and warnings
    arrive from the workers (pytest_testnodedown)."""
    check_device_option(config.getoption("cpugpu_device"), flags(config))
    config.stash[PROMISE_FILTER] = select_promises(config.getoption("cpugpu_promise"), flags(config))
    config.stash[PLAN] = None
    # the workers' reports decide the exit status
    load_known_failures(config, start_recorder(config, config.stash[PROMISE_FILTER]))


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """In the controller: the plan, warnings and run facts of the first worker to finish (they all agree)."""
    facts = getattr(node, "workeroutput", {}).get(WORKER_FACTS)
    if facts and facts.get("torch_replaced"):
        node.config.stash[TORCH_REPLACED] = facts["torch_replaced"]
    if facts and facts.get("refused") and node.config.stash.get(PLAN, None) is not None:
        node.config.stash[REFUSED] = facts["refused"]  # a refusal after the first worker reported its plan
    if facts and facts.get("run") is not None and RUN_FACTS not in node.config.stash:
        node.config.stash[RUN_FACTS] = facts["run"]
    if facts and node.config.stash.get(PLAN, None) is None:
        node.config.stash[PLAN] = from_facts(facts["plan"])
        node.config.stash[WARNINGS] = facts["warnings"]
        if facts["refused"]:
            node.config.stash[REFUSED] = facts["refused"]


# --- what the run collected of the library's tests, for the judge (judge.py)

_INVENTORY = pytest.StashKey[Any]()


def pytest_itemcollected(item: pytest.Item) -> None:
    """Every test of the library's classes as it is collected, before any hook can deselect or drop it."""
    library, kind = kind_of(item)
    if library:
        _inventory(item.config).items[item.nodeid] = reports.item_facts(item, kind)


def pytest_deselected(items: list[pytest.Item]) -> None:
    for item in items:
        if kind_of(item)[0]:
            _inventory(item.config).deselected.add(item.nodeid)


def _inventory(config: pytest.Config) -> Any:
    from .verdict.judge import Inventory

    if _INVENTORY not in config.stash:
        config.stash[_INVENTORY] = Inventory()
    return config.stash[_INVENTORY]


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """Where tests were collected: what the contract requires of this run (manifest.py) beside what
    it collected; an xdist worker hands both to the controller with its plan."""
    config = session.config
    plan = config.stash.get(PLAN, None)
    if plan is None or REFUSED in config.stash:
        return
    from .buffer.contract import AREAS
    from .verdict import manifest

    inventory = _inventory(config)
    facts = {"inventory": inventory.as_data(),
             "required": manifest.required(plan, config.stash.get(PROMISE_FILTER, None), AREAS),
             "area_of": manifest.area_of(AREAS),
             "state_required": manifest.state_required(plan, inventory.classes(STATE_KIND)),
             "deselected_why": config.stash.get(_DESELECTED_WHY, None) or {}}
    config.stash[RUN_FACTS] = facts
    if hasattr(config, "workeroutput"):  # an inert run's worker worked its plan out only now
        config.workeroutput.setdefault(WORKER_FACTS, {"plan": as_facts(plan), "warnings": [], "refused": None})
        config.workeroutput[WORKER_FACTS]["run"] = facts


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if is_state_class(metafunc.cls):
        from .engine.mutable_state import generate_tests

        generate_tests(metafunc, _plan(metafunc.config))
        return
    if not is_buffer_class(metafunc.cls) or "device" not in metafunc.fixturenames:
        return  # a project's own tests, and its own `device` fixture, are its business
    plan = _plan(metafunc.config)

    def param(device: str, *values: object, id: str) -> object:
        marks = pytest.mark.skip(reason=plan.skipped[device]) if device in plan.skipped else ()
        return pytest.param(device, *values, id=id, marks=marks)

    if "context" in metafunc.fixturenames:
        from .shared.contexts import contexts_for

        # Every creation context of each device, as its own test: each run includes them all.
        pairs = [param(d, c, id=f"{d}-{c.name}") for d in plan.parametrized for c in contexts_for(d)]
        metafunc.parametrize("device,context", pairs)
        return
    metafunc.parametrize("device", [param(d, id=d) for d in plan.parametrized])


def _plan(config: pytest.Config) -> DevicePlan:
    """The device plan: worked out in pytest_configure in a run that asks for the plugin, else here,
    when the first library test class is collected (an inert run imports no torch before then)."""
    plan = config.stash.get(PLAN, None)
    if plan is None:
        assert not _hands_tests_to_workers(config), "tests are made where they run, not in xdist's controller"
        plan = config.stash[PLAN] = plan_devices(None, devices.unavailable_to_run(None), flags(config))
    return plan


@pytest.hookimpl(trylast=True)  # after -k and -m have deselected: the classes left are the ones tested
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    say_collisions(config, items)
    if REFUSED not in config.stash and any(kind_of(item)[0] for item in items):
        torch_is_torch.check_before_the_tests(config)
    ours = [item for item in items if is_buffer_class(getattr(item, "cls", None))]
    if not ours:
        return
    if REFUSED not in config.stash:  # a worker that could not load the class has none to check
        check_classes(config, ours)
    # The original bug's scenario first: a pre-fix class fails in the first seconds of a run.
    # Then the costly tests: pytest-xdist hands tests out in this order, and a costly one
    # handed out last leaves the other workers idle while it runs. A project's own tests keep their place.
    def order_key(item: pytest.Item) -> tuple[bool, bool]:
        return not item.name.startswith("test_original_bug"), item.get_closest_marker(COSTLY_MARK) is None

    first = sorted(ours, key=order_key)
    order = iter(first)
    items[:] = [next(order) if is_buffer_class(getattr(item, "cls", None)) else item for item in items]
    drop: list[pytest.Item] = []
    if REFUSED in config.stash:  # a worker that could not load the class runs nothing
        drop = ours
    else:
        drop = [item for item in ours if not runs_here(item, config.stash[PROMISE_FILTER], _plan(config))]
        config.stash[_DESELECTED_WHY] = dict(Counter(why_not_here(item, config, _plan(config)) for item in drop))
    if drop:
        config.hook.pytest_deselected(items=drop)
        dropped = {id(item) for item in drop}
        items[:] = [item for item in items if id(item) not in dropped]


# Why the plugin deselected the tests it did (reason -> how many), for the run's last lines.
_DESELECTED_WHY = pytest.StashKey[dict]()


# The innermost wrapper: hypothesis's own wrapper sets a key of its own for a test with a
# parametrize marker, and the contract key must be the one the test runs with.
@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_call(item: pytest.Item):
    """Each parametrization of a library test (device, creation context, ...) draws examples of its
    own: hypothesis keys a test's examples by its function, and gives a parametrized test one key
    per node only when a parametrize marker made it, not the plugin's parametrization. The key is
    the test's contract key (keys.py), the same in every project, so a derandomized run draws
    the same examples for a test wherever its class lives. After the call: torch is still torch."""
    inner = getattr(getattr(getattr(item, "obj", None), "hypothesis", None), "inner_test", None)
    if inner is not None and is_buffer_class(getattr(item, "cls", None)):
        from .verdict.keys import key_of_item

        inner._hypothesis_internal_add_digest = key_of_item(item).encode()
    try:
        return (yield)
    finally:
        if kind_of(item)[0]:
            torch_is_torch.check_after_the_call(item)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    library, kind = kind_of(item)
    if library:
        reports.annotate(item, report, kind)
    return report


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if "torch" in sys.modules and _INVENTORY in config.stash and _inventory(config).items \
            and not _hands_tests_to_workers(config) and TORCH_REPLACED not in config.stash:
        # Where the tests ran: a test (or a fixture) that patched torch and left it patched.
        why = torch_is_torch.replaced_line("at the end of the run")
        if why is not None:
            torch_is_torch.note(config, why)
    # Every requested device missing means nothing was tested: never let that read as a pass.
    if REFUSED in session.config.stash:
        session.exitstatus = pytest.ExitCode.USAGE_ERROR
        return
    plan = session.config.stash.get(PLAN, None)  # None: a controller no worker reported to (the run failed)
    sets_exit = session.config.stash.get(SUITE_EXIT, False) or session.config.getoption("cpugpu_cell_result")
    if sets_exit and plan is not None and plan.nothing_testable and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.NO_TESTS_COLLECTED


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if REFUSED in config.stash and is_controller(config):  # on stderr, as pytest says a usage error
        sys.stderr.write(f"ERROR: {config.stash[REFUSED]}\n")
    plan = config.stash.get(PLAN, None)
    # Workers report when they finish; none did and nobody pressed Ctrl-C: they all went down.
    if plan is None and _asked(config) and _hands_tests_to_workers(config) \
            and exitstatus != pytest.ExitCode.INTERRUPTED:
        terminalreporter.write_line(
            "no pytest-xdist worker finished its run (see the 'node down' lines above): the run is not a "
            "pass; the same command without -n shows why", red=True)
    if plan is not None and plan.nothing_testable:
        reasons = "; ".join(f"{d}: {r}" for d, r in plan.skipped.items())
        terminalreporter.write_line(f"nothing was tested: no requested device is available ({reasons})", red=True)
    for warning in config.stash.get(WARNINGS, []):
        terminalreporter.write_line(f"warning: {warning}", yellow=True)
    why = config.stash.get(_DESELECTED_WHY, None) or (config.stash.get(RUN_FACTS, None) or {}).get("deselected_why")
    if why and is_controller(config):
        total = sum(why.values())
        terminalreporter.write_line(f"cpugpu-conformance deselected {total} test(s) that do not apply: "
                                    + "; ".join(f"{reason} ({n})" for reason, n in sorted(why.items())))
