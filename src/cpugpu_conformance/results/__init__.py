"""Result files: the model, the rule that decides a verdict, the comparison of two cells.

    model    CellResult (CellResult.new, CellResult.load, validate, write; its JSON schema is
             schemas/cell-result.schema.json), placeholder, machine_kind, release_key
    rule     Outcome, Answer: a promise passed on a device only when a check of it ran and held
    compare  diff(baseline, candidate) -> Comparison; observation changes
    files    safe reading (ResultFileError; the caps MAX_FILE_BYTES, MAX_VALUES), atomic writing,
             the lock (exclusive), now()
    text     cleaning text from another machine: clean_text, one_line, first_line, last_line

Everything that writes or reads a result file goes through this package; ``from
cpugpu_conformance import results`` and ``results.CellResult`` is the usual spelling.
"""

from __future__ import annotations

from .compare import (
    BUFFER_NOT_IN_RUN,
    MISSING,
    NOT_PROBED,
    Change,
    Comparison,
    StateChange,
    diff,
    observation_changes,
    observation_key,
    observation_text,
    state_verdicts,
    value_changes,
)
from .files import (
    MAX_FILE_BYTES,
    MAX_VALUES,
    NotOurFile,
    NotRegularFile,
    ResultFileError,
    ResultPathBusy,
    check_result_path,
    check_writable,
    count_values,
    exclusive,
    json_of,
    lock_path,
    now,
    read_regular_file,
    write_json_atomic,
    write_text_atomic,
)
from .model import (
    CELL_STATUSES,
    DEVICE_STATUSES,
    MAX_DEPTH,
    NO_ACCELERATOR,
    SCHEMA_ID,
    SCHEMA_VERSION,
    UNKNOWN_MACHINE,
    VERDICTS,
    CellResult,
    fit,
    machine_kind,
    placeholder,
    promise_order,
    release_key,
    schema,
    validate,
    write_atomic,
)
from .rule import NOT_ASKED_KINDS, VERDICT_KINDS, Answer, Outcome
from .text import DETAIL_LIMIT, SHORT_LIMIT, TEXT_LIMIT, clean_text, first_line, last_line, one_line

__all__ = [
    "BUFFER_NOT_IN_RUN", "CELL_STATUSES", "DETAIL_LIMIT", "DEVICE_STATUSES", "MAX_DEPTH", "MAX_FILE_BYTES", "MAX_VALUES", "MISSING", "NOT_ASKED_KINDS", "NOT_PROBED",
    "NO_ACCELERATOR", "SCHEMA_ID", "SCHEMA_VERSION", "SHORT_LIMIT", "TEXT_LIMIT", "UNKNOWN_MACHINE", "VERDICTS",
    "VERDICT_KINDS", "Answer", "CellResult", "Change", "Comparison", "NotOurFile", "NotRegularFile", "Outcome", "ResultFileError", "StateChange",
    "ResultPathBusy", "check_result_path", "check_writable", "clean_text", "count_values", "diff", "exclusive", "fit", "first_line", "json_of", "last_line",
    "lock_path", "machine_kind", "now", "observation_changes", "observation_key",
    "observation_text", "one_line", "placeholder", "promise_order", "read_regular_file", "release_key", "schema",
    "state_verdicts", "validate", "value_changes", "write_atomic", "write_json_atomic", "write_text_atomic",
]
