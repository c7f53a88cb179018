"""The gate compares like with like (issue 28, item 3): two cells whose tests ran under different
hypothesis settings are refused in one line, exit 2; the same settings compare as before."""

from __future__ import annotations

import pytest
import result_factory as rf
from gate_runner import gate

pytestmark = pytest.mark.quick

TEST = "conformance/test_contract.py::TestContract::test_partial_copy[cpu]"


def ran(max_examples: int, derandomize: bool = True, phases=("explicit", "reuse", "generate", "shrink")) -> dict:
    return {TEST: {"examples": max_examples, "floor": 20, "max_examples": max_examples, "phases": list(phases),
                   "derandomize": derandomize, "attempts": 1}}


def with_settings(release: str, **settings) -> dict:
    result = rf.completed(release)
    result["hypothesis_ran"] = ran(**settings)
    return result


def test_cells_run_under_the_same_settings_compare(tmp_path, capsys):
    assert gate(tmp_path, with_settings("2.14.1", max_examples=120), with_settings("2.15.0", max_examples=120)) == 0


@pytest.mark.parametrize("candidate, named", [
    ({"max_examples": 20}, "max_examples 120 vs 20"),
    ({"max_examples": 120, "derandomize": False}, "derandomize True vs False"),
    ({"max_examples": 120, "phases": ("explicit",)}, "phases"),
])
def test_cells_run_under_different_settings_are_refused_in_one_line(tmp_path, capsys, candidate, named):
    code = gate(tmp_path, with_settings("2.14.1", max_examples=120), with_settings("2.15.0", **candidate))
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "different hypothesis settings" in err[0] and named in err[0] and TEST in err[0], err


def test_cells_of_different_profiles_without_per_test_settings_are_refused(tmp_path, capsys):
    code = gate(tmp_path, rf.completed("2.14.1", profile="ci"), rf.completed("2.15.0", profile="theirs-quick"))
    assert code == 2
    err = capsys.readouterr().err
    assert "'ci'" in err and "'theirs-quick'" in err and "one profile" in err, err


def test_cells_of_different_profiles_whose_tests_share_no_name_are_refused(tmp_path, capsys):
    """Settings recorded on both sides for disjoint tests (renamed ids, an edited file): nothing was
    compared, and the two profiles' names were never looked at."""
    baseline = rf.completed("2.14.1", profile="ci")
    baseline["hypothesis_ran"] = ran(max_examples=120)
    candidate = rf.completed("2.15.0", profile="theirs-quick")
    candidate["hypothesis_ran"] = {TEST.replace("[cpu]", "[cpu-renamed]"): ran(max_examples=20)[TEST]}
    assert gate(tmp_path, baseline, candidate) == 2
    err = capsys.readouterr().err
    assert "'ci'" in err and "'theirs-quick'" in err and "one profile" in err, err
