"""bisect: the search for the first release that answers differently, and what counts as a change,
with fake cells (no network, no torch)."""

from __future__ import annotations

import math

import pytest
import result_factory as rf
from bisect_cells import RELEASES, FakeCells, cell_result

from cpugpu_conformance import results
from cpugpu_conformance.runner import bisection as bisect

# ----------------------------------------------------------------------------- search


@pytest.mark.parametrize("change_at", range(1, len(RELEASES)))
def test_bisect_finds_the_change_wherever_it_is(change_at):
    cells = FakeCells(change_at)
    found = bisect.bisect_first_change(RELEASES, cells)
    assert found.first_changed == RELEASES[change_at]
    assert found.previous == RELEASES[change_at - 1]
    assert found.diff == [
        (
            "observation pin_memory_without_accelerator: raises RuntimeError: Cannot access accelerator device when "
            "none is available. -> raises RuntimeError: Need to provide pin_memory allocator to use pin memory."
        )
    ]
    assert len(cells.calls) == len(set(cells.calls)), "a release was run twice"
    # both ends, then a binary search over the inner releases
    assert len(cells.calls) <= 2 + math.ceil(math.log2(len(RELEASES) - 1))
    assert [s.release for s in found.steps] == cells.calls


def test_bisect_change_at_first_and_last_positions_names_neighbours():
    first = bisect.bisect_first_change(RELEASES, FakeCells(1))
    last = bisect.bisect_first_change(RELEASES, FakeCells(len(RELEASES) - 1))
    assert (first.previous, first.first_changed) == ("2.5.1", "2.6.0")
    assert (last.previous, last.first_changed) == ("2.11.0", "2.12.0")


def test_bisect_no_change_runs_only_the_two_ends():
    cells = FakeCells(None)
    found = bisect.bisect_first_change(RELEASES, cells)
    assert found.first_changed is None and found.diff == []
    assert cells.calls == ["2.5.1", "2.12.0"]


def test_bisect_two_releases():
    found = bisect.bisect_first_change(["2.13.0", "2.14.1"], FakeCells(1, ["2.13.0", "2.14.1"]))
    assert (found.previous, found.first_changed) == ("2.13.0", "2.14.1")


def test_bisect_steps_say_how_each_release_compared():
    found = bisect.bisect_first_change(RELEASES, FakeCells(4))
    same = {s.release: s.same_as_good for s in found.steps}
    assert same["2.5.1"] is True and same["2.12.0"] is False
    assert all(same[r] is (RELEASES.index(r) < 4) for r in same)


def test_bisect_skips_an_untestable_midpoint():
    # the first midpoint (index 4) cannot be installed: its neighbour is tried instead
    cells = FakeCells(6, untestable={"2.8.0"})
    found = bisect.bisect_first_change(RELEASES, cells)
    assert (found.previous, found.first_changed, found.untestable) == ("2.9.1", "2.10.0", [])
    assert cells.calls.count("2.8.0") == 1
    assert next(s for s in found.steps if s.release == "2.8.0").same_as_good is None


def test_bisect_change_hidden_behind_untestable_releases_is_a_range():
    cells = FakeCells(4, untestable={"2.7.1", "2.8.0"})
    found = bisect.bisect_first_change(RELEASES, cells)
    assert (found.previous, found.first_changed) == ("2.7.0", "2.9.1")
    assert found.untestable == ["2.7.1", "2.8.0"]


@pytest.mark.parametrize("end", ["2.5.1", "2.12.0"])
def test_bisect_refuses_an_untestable_end(end):
    with pytest.raises(bisect.BisectError, match=rf"release {end} could not be tested \(not_installed\)"):
        bisect.bisect_first_change(RELEASES, FakeCells(3, untestable={end}))


def test_bisect_needs_two_releases():
    with pytest.raises(bisect.BisectError, match="at least two"):
        bisect.bisect_first_change(["2.5.1"], FakeCells(None))


# ----------------------------------------------------------------------------- what counts as a change


def edited(result: results.CellResult, edit) -> results.CellResult:
    data = result.to_json()
    edit(data)
    return results.CellResult(data)


def test_counts_timings_and_probe_descriptions_are_no_change_but_verdicts_and_recorded_text_are():
    base = cell_result("2.5.1")

    def noise(data):
        data["duration_s"] = 99.0
        data["promises"]["1"]["devices"]["cpu"]["passed"] = 100
        data["observations"]["numpy_dtypes"]["doc"] = "reworded description"

    assert bisect.changes(base, edited(cell_result("2.6.0"), noise)) == []
    assert bisect.changes(base, cell_result("2.6.0", verdict3="failed")) == [
        "promise 3 (Mutable wherever they were made) on cpu: passed -> failed (test_mutable: refused)"
    ]
    assert bisect.changes(base, cell_result("2.6.0", observed11="no error, tensor not pinned")) == [
        "promise 11 (pin_memory=True with no accelerator (implementation-defined)) on cpu: "
        "recorded (raises RuntimeError) -> recorded (no error, tensor not pinned)"
    ]
    assert bisect.changes(base, cell_result("2.6.0", numpy_dtypes=["bool", "float32", "uint16"])) == [
        'observation numpy_dtypes: ["bool", "float32"] -> ["bool", "float32", "uint16"]'
    ]


def test_a_promise_that_became_untested_is_a_change():
    def skip(data):
        data["promises"]["5"]["devices"]["cpu"] = {"verdict": "skipped", "reason": "numpy missing", "passed": 0, "skipped": 1}

    assert bisect.changes(cell_result("2.5.1"), edited(cell_result("2.6.0"), skip)) == [
        "promise 5 (A true NumPy view) on cpu: passed -> untested (numpy missing)"
    ]


def test_a_table_valued_observation_names_the_entry_that_changed():
    old = {"bool": {"numpy": "bool", "zeros": "ok"}, "complex32": {"numpy": "raises TypeError", "zeros": "ok"}}
    new = {**old, "complex32": {"numpy": "raises TypeError", "zeros": "ok", "copy_": "ok"},
           "bcomplex32": {"numpy": "raises TypeError", "zeros": "ok"}}

    def with_table(table):
        return lambda data: data["observations"].update(dtypes={"value": table})

    a, b = edited(cell_result("2.5.1"), with_table(old)), edited(cell_result("2.6.0"), with_table(new))
    assert bisect.changes(a, b) == [
        'observation dtypes.bcomplex32: (no such dtype: torch 2.5.1 has no bcomplex32) -> {"numpy": "raises TypeError", "zeros": "ok"}',
        'observation dtypes.complex32: {"numpy": "raises TypeError", "zeros": "ok"} -> '
        '{"copy_": "ok", "numpy": "raises TypeError", "zeros": "ok"}',
    ]


def test_changes_order_promises_numerically_and_name_absent_probes():
    def a_edit(data):
        data["observations"] = {"x": {"value": "1"}}

    def b_edit(data):
        for promise in ("2", "9"):
            data["promises"][promise]["devices"]["cpu"].update(verdict="failed", failed=1, failures=[rf.failure("t", "m", None)])
        data["observations"] = {"y": {"value": "2"}}

    a, b = edited(cell_result("2.5.1"), a_edit), edited(cell_result("2.6.0"), b_edit)
    assert bisect.changes(a, b) == [
        "promise 2 (Zeroed) on cpu: passed -> failed (t: m)",
        "promise 9 (In place, for life) on cpu: passed -> failed (t: m)",
        "observation x: 1 -> (absent)",
        "observation y: (absent) -> 2",
    ]
    assert bisect.changes(a, a) == []
