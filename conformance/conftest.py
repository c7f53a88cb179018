"""The shipped suite: the library's tests (cpugpu_conformance.testing) against the class --impl names.

    pytest conformance [--impl SPEC] [--device NAME|all] [--cell-result PATH]
                       [--cell-name NAME] [--promise N[,N...]] [--known-failures FILE]
                       [--hypothesis-profile NAME]

Installed, the same suite is `cpugpu-conformance run [the same options]` (run.py). The
library's plugin does the work; this file adds what only the shipped suite has: --impl, the
short spellings of the plugin's options (--device for --cpugpu-device, ...), its hypothesis
profiles under their short names (default, ci, thorough; `ci` is loaded when $CI is set),
and the suite's exit status on every run (0 every promise asked for
passed, 1 one failed, 5 nothing tested, 6 some untested).
"""

from __future__ import annotations

import gc
import os

import pytest
from hypothesis import settings

from cpugpu_conformance import impl as impl_loader
from cpugpu_conformance.testing.shared import budget
from cpugpu_conformance.testing.verdict import plan
from cpugpu_conformance.testing.verdict.stash import (
    IMPL,
    IMPL_SPEC,
    LOAD_CLASS,
    REFUSED,
    SUITE_EXIT,
    WARNINGS,
)

pytest_plugins = ["cpugpu_conformance.testing.plugin"]

budget.register_profiles("")
DEFAULT_PROFILE = "ci" if os.environ.get("CI") else "default"
settings.load_profile(DEFAULT_PROFILE)  # --hypothesis-profile, handled by hypothesis, overrides this

# The plugin's options under the suite's own, shorter names (the same destinations).
SHORT_OPTIONS = {
    "--device": ("cpugpu_device", "device"),
    "--cell-result": ("cpugpu_cell_result", "cell_result"),
    "--cell-name": ("cpugpu_cell_name", "cell_name"),
    "--promise": ("cpugpu_promise", "promise"),
    "--known-failures": ("cpugpu_known_failures", "known_failures"),
}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("cpugpu")
    group.addoption(
        "--impl",
        default=impl_loader.DEFAULT_SPEC,
        metavar="SPEC",
        help="class under test, as module.path:Attr or path/to/file.py:Attr (default: the reference)",
    )
    for flag, (dest, _) in SHORT_OPTIONS.items():
        group.addoption(flag, dest=dest, default=None, help=f"the same as --cpugpu-{flag[2:]}")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.stash[plan.SPELLING] = {key: flag for flag, (_, key) in SHORT_OPTIONS.items()}
    config.stash[SUITE_EXIT] = True
    config.stash[IMPL_SPEC] = config.getoption("impl")
    config.stash[LOAD_CLASS] = _load_impl
    if _hands_tests_to_workers(config) and not config.getoption("cpugpu_cell_result"):
        # xdist's controller imports no torch and no class: it checks the spec, so that a class
        # that cannot be found is one line here rather than a failure in every worker.
        spec = config.getoption("impl")
        try:
            impl_loader.check(spec)
        except impl_loader.ImplError as exc:
            raise pytest.UsageError(str(exc)) from None
        except SystemExit as exc:  # a parent package of the module that ends the process
            raise pytest.UsageError(_exit_at_import(spec, exc)) from None
        return
    # No thread count is pinned: the tests run with torch's own (the machine's cores), as engines
    # and a team's own pytest do, and the copies run each check with one thread and with several
    # (cpugpu_conformance.testing.shared.threads); a class whose copy depends on the count is seen the same
    # way here and there. The result file's environment says which counts ran.


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """This process runs the suite once and ends: what its start made (torch, hypothesis, the class
    under test, the collected tests) lives as long. Frozen out of the collector's sight, it is not
    walked again by the full collections a run makes (hypothesis's at its first example, pytest's
    at the end), which then see only what the tests made: a tenth of a second each, with torch's
    objects. What the tests make is collected as ever; the tests run nothing else differently."""
    gc.freeze()


def _hands_tests_to_workers(config: pytest.Config) -> bool:
    workers = config.getoption("dist", "no") != "no"
    return not hasattr(config, "workerinput") and workers and not config.getoption("collectonly")


def _load_impl(config: pytest.Config) -> None:
    spec = config.getoption("impl")
    try:
        impl = impl_loader.load(spec)
    except impl_loader.ImplError as exc:
        raise pytest.UsageError(str(exc)) from None
    except SystemExit as exc:
        # sys.exit() while the class is imported: a class that cannot be imported is bad input
        # (one line, exit 4, an `error` result), not pytest's INTERNALERROR traceback and exit 3.
        raise pytest.UsageError(_exit_at_import(spec, exc)) from None
    config.stash[IMPL] = impl
    config.stash[WARNINGS] += [
        f"importing --impl {impl.spec} replaced {name}"
        for name in impl.replaced_torch
    ]


def _exit_at_import(spec: str, exc: SystemExit) -> str:
    return f"--impl {spec!r}: importing it called sys.exit({exc.code!r}): the class cannot be imported"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The suite's test class is against the class --impl names (loaded in pytest_configure)."""
    if REFUSED in config.stash or IMPL not in config.stash:
        return
    impl = config.stash[IMPL]
    for cls in {item.cls for item in items if getattr(item.cls, "against_impl", False)}:
        cls.buffer_cls = impl.cls
        cls.buffer_import = impl.import_code
