"""The recorder's start, in the controller (or the only process) of every run: with a result
path it first holds the path and marks it in progress; the team's known-failures file is loaded
for it; a run refused for bad input still writes its `error` result.
"""

from __future__ import annotations

import pytest

from .plan import flags
from .recording import CellRecorder
from .stash import IMPL_SPEC, SUITE_EXIT

# The name the recorder is registered under, which `-p no:NAME` would block.
RECORDER = "cpugpu-cell-recorder"


def is_controller(config: pytest.Config) -> bool:
    """The only process, or xdist's controller: not a worker."""
    return not hasattr(config, "workerinput")


def start_recorder(config: pytest.Config, chosen: frozenset[str] | None) -> CellRecorder | None:
    """In the controller (or the only process), always: the recorder of the run's answer. With a
    result path it first holds the path and marks it in progress."""
    if not is_controller(config):
        return None
    path = config.getoption("cpugpu_cell_result")
    if path == "":
        raise pytest.UsageError(f"{flags(config)['cell_result']} '': an empty path is no file")
    name = config.getoption("cpugpu_cell_name") or "this run"
    if path is not None and not config.getoption("cpugpu_cell_name"):
        import torch  # only for the name in the file: xdist's controller without one imports no torch

        name = f"torch-{torch.__version__.split('+')[0]}"
    profile = config.getoption("hypothesis_profile", None)
    impl = config.stash.get(IMPL_SPEC, "")
    sets_exit = path is not None or config.stash.get(SUITE_EXIT, False)
    recorder = CellRecorder(config, path, name, chosen, impl, profile, sets_exit=sets_exit)
    if path is not None:
        recorder.hold()
    if config.pluginmanager.is_blocked(RECORDER):
        # `-p no:cpugpu-cell-recorder`: pytest would register nothing and say nothing, and no one
        # would judge the run (a failing class would exit 0, the file keep its placeholder).
        error = pytest.UsageError(f"-p no:{RECORDER}: the recorder is what judges the run and sets its exit "
                                  "status; it cannot be turned off")
        record_usage_error(recorder, error)
        raise error
    if sets_exit:
        recorder.watch_sigint()
    config.pluginmanager.register(recorder, RECORDER)
    return recorder


def load_known_failures(config: pytest.Config, recorder: CellRecorder | None) -> None:
    """The team's known failures, for the recorder (the controller, or the only process: workers
    only run tests). A file that cannot be used is bad input: one line, exit 4, an `error` result."""
    path = config.getoption("cpugpu_known_failures")
    if path is None or recorder is None:
        return
    from cpugpu_conformance.results import known_failures

    try:
        recorder.known_failures = known_failures.load(path)
    except known_failures.KnownFailuresError as exc:
        flag = flags(config).get("known_failures", "--cpugpu-known-failures")
        error = pytest.UsageError(f"{flag} {exc}")
        record_usage_error(recorder, error)
        raise error from None


def record_usage_error(recorder: CellRecorder | None, exc: pytest.UsageError) -> None:
    """A run refused for bad input still replaces the result: an older pass must not stand."""
    if recorder is not None:
        recorder.write_usage_error(str(exc))
