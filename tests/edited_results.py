"""A cell result for the tests of results: result_factory.completed, edited by the test, then
read through the model (CellResult), as every reader reads one."""

from __future__ import annotations

import result_factory as rf

from cpugpu_conformance.results import CellResult


def cell(edit=None, **kwargs) -> CellResult:
    data = rf.completed("2.13.0", **kwargs)
    if edit:
        edit(data)
    return CellResult(data)
