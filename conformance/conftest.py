"""Options, hypothesis profiles and devices for the conformance suite.

    pytest conformance [--impl SPEC] [--device cpu|cuda|all] [--cell-result PATH]
                       [--cell-name NAME] [--promise N[,N...]] [--hypothesis-profile NAME]
"""

from __future__ import annotations

import os

import pytest
import torch
from hypothesis import HealthCheck, Phase, settings

from conformance import recording, repro
from conformance.recording import DEVICES_KEY, IMPL, PROMISE_FILTER
from cpugpu_conformance import impl as impl_loader
from cpugpu_conformance.promises import DEVICES, PROMISES

# Examples per test. The default keeps a development run in seconds; `ci` is
# derandomized with no example database, so the same torch gives the same verdict.
_EXAMPLES = 250
_COMMON = dict(
    deadline=None,  # the first CUDA call in a process takes seconds
    report_multiple_bugs=False,  # one failure per test, so the last example run is the reproducer's
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    stateful_step_count=40,
    # No explain phase: the reproducer says more, and explaining costs more than shrinking.
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
)
settings.register_profile("default", max_examples=_EXAMPLES, **_COMMON)
settings.register_profile("ci", max_examples=2 * _EXAMPLES, derandomize=True, database=None, print_blob=True, **_COMMON)
settings.register_profile("thorough", max_examples=10 * _EXAMPLES, **{**_COMMON, "stateful_step_count": 50})
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
        choices=("cpu", "cuda", "all"),
        default=None,
        help="device(s) to test; a missing device is skipped, never passed (default: every device this machine has)",
    )
    group.addoption("--cell-result", metavar="PATH", default=None, help="write the verdict of every promise and device to this JSON file")
    group.addoption("--cell-name", metavar="NAME", default=None, help="name of this cell in the result file (default: torch-<version>)")
    group.addoption("--promise", metavar="N[,N...]", default=None, help="run only the tests of these promises (CONTRACT.md numbers)")


def _cuda_missing_reason() -> str | None:
    if torch.cuda.is_available():
        return None
    build = f"built with CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
    return f"no CUDA device: torch.cuda.is_available() is False (torch {torch.__version__}, {build})"


def _devices(option: str | None) -> tuple[list[str], dict[str, str]]:
    """Devices to parametrize over, and the reason each device of the contract is not tested."""
    missing = _cuda_missing_reason()
    if option is None:
        wanted = ["cpu"] if missing else ["cpu", "cuda"]
        not_tested = {"cuda": f"not requested: {missing}"} if missing else {}
        return wanted, not_tested
    wanted = list(DEVICES) if option == "all" else [option]
    not_tested = {"cuda": missing} if missing and "cuda" in wanted else {}
    not_tested.update({d: "not requested (--device)" for d in DEVICES if d not in wanted})
    return wanted, not_tested


def _selected_promises(option: str | None) -> set[str] | None:
    if option is None:
        return None
    chosen = {p.strip() for p in option.split(",") if p.strip()}
    unknown = sorted(chosen - PROMISES.keys())
    if unknown or not chosen:
        raise pytest.UsageError(f"--promise {option!r}: unknown promise {', '.join(unknown) or '(none)'}; expected numbers 1-{len(PROMISES)}")
    return chosen


def pytest_configure(config: pytest.Config) -> None:
    # The suite checks semantics on tiny tensors: extra intra-op threads only fight
    # pytest-xdist workers for the cores.
    torch.set_num_threads(1)
    config.addinivalue_line("markers", "promise(*numbers): the CONTRACT.md promises a test checks")
    try:
        impl = impl_loader.load(config.getoption("impl"))
    except impl_loader.ImplError as exc:
        raise pytest.UsageError(str(exc)) from None
    repro.set_impl_import(impl.import_code)
    devices, not_tested = _devices(config.getoption("device"))
    config.stash[IMPL] = impl
    config.stash[DEVICES_KEY] = (devices, not_tested)
    config.stash[PROMISE_FILTER] = _selected_promises(config.getoption("promise"))
    if config.getoption("cell_result") and not hasattr(config, "workerinput"):
        profile = config.getoption("hypothesis_profile", None) or DEFAULT_PROFILE
        config.pluginmanager.register(
            recording.CellRecorder(config, impl.spec, profile, devices, not_tested), "cpugpu-cell-recorder"
        )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "device" not in metafunc.fixturenames:
        return
    devices, not_tested = metafunc.config.stash[DEVICES_KEY]
    params = [
        pytest.param(d, id=d, marks=pytest.mark.skip(reason=not_tested[d])) if d in not_tested else pytest.param(d, id=d)
        for d in devices
    ]
    metafunc.parametrize("device", params)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # The original bug's scenario first: a pre-fix class fails in the first seconds of a run.
    items.sort(key=lambda item: not item.name.startswith("test_original_bug"))
    chosen = config.stash[PROMISE_FILTER]
    if chosen is None:
        return
    keep, drop = [], []
    for item in items:
        (keep if recording.promises_of(item) & chosen else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(scope="session")
def Buffer(pytestconfig: pytest.Config):
    """The class under test (--impl)."""
    return pytestconfig.stash[IMPL].cls


def pytest_runtest_setup(item: pytest.Item) -> None:
    repro.reset()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    recording.annotate(item, report)
    return report


def _nothing_testable(config: pytest.Config) -> bool:
    devices, not_tested = config.stash[DEVICES_KEY]
    return all(d in not_tested for d in devices)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # Every requested device missing means nothing was tested: never let that read as a pass.
    if _nothing_testable(session.config) and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.NO_TESTS_COLLECTED


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if _nothing_testable(config):
        _, not_tested = config.stash[DEVICES_KEY]
        reasons = "; ".join(f"{d}: {r}" for d, r in not_tested.items())
        terminalreporter.write_line(f"nothing was tested: no requested device is available ({reasons})", red=True)
