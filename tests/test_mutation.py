"""python -m cpugpu_conformance.mutation: cosmic-ray's outcomes, the equivalents list, bad input, a real tiny run.

cosmic-ray is imported at the top on purpose (as a module: pytest would try to collect its TestOutcome): without it these tests fail, they never skip.
"""

from __future__ import annotations

import shutil
import sys
import textwrap
from pathlib import Path

import pytest
from cosmic_ray import work_item as cr
from cosmic_ray.testing import run_tests

from cpugpu_conformance.cli import mutation as cli
from cpugpu_conformance.mutation import equivalents as eq
from cpugpu_conformance.mutation import report, score
from cpugpu_conformance.mutation import run as runs

# ---------------------------------------------------------------- outcomes


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        (None, score.NOT_RUN),
        (cr.WorkResult(cr.WorkerOutcome.NORMAL, "1 failed", cr.TestOutcome.KILLED), score.KILLED),
        (cr.WorkResult(cr.WorkerOutcome.NORMAL, "", cr.TestOutcome.KILLED), score.KILLED),
        (cr.WorkResult(cr.WorkerOutcome.NORMAL, "timeout", cr.TestOutcome.KILLED), score.TIMEOUT),
        (cr.WorkResult(cr.WorkerOutcome.NORMAL, "3 passed", cr.TestOutcome.SURVIVED), score.SURVIVED),
        (cr.WorkResult(cr.WorkerOutcome.NORMAL, "Traceback", cr.TestOutcome.INCOMPETENT), score.INCOMPETENT),
        (cr.WorkResult(cr.WorkerOutcome.EXCEPTION, "Traceback", cr.TestOutcome.INCOMPETENT), score.INCOMPETENT),
        (cr.WorkResult(cr.WorkerOutcome.ABNORMAL), score.INCOMPETENT),
        (cr.WorkResult(cr.WorkerOutcome.NO_TEST), score.NOT_RUN),
        (cr.WorkResult(cr.WorkerOutcome.SKIPPED, "filtered"), score.NOT_RUN),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_classify_cosmic_ray_outcomes(result, expected):
    assert score.classify(result) == expected


def test_a_real_cosmic_ray_timeout_is_a_timeout_not_a_kill():
    # Pins the assumption classify rests on: cosmic-ray stores a timeout as killed + "timeout".
    outcome, output = run_tests(f"{sys.executable} -c 'import time; time.sleep(30)'", 0.5)
    assert (outcome, output) == (cr.TestOutcome.KILLED, score.TIMEOUT_OUTPUT)
    assert score.classify(cr.WorkResult(cr.WorkerOutcome.NORMAL, output, outcome)) == score.TIMEOUT


def _mutant(outcome=score.KILLED, operator="core/ReplaceTrueWithFalse", before="x = True", after="x = False", line=3):
    return score.Mutant("job", operator, line, before, after, outcome=outcome, diff="-x = True\n+x = False", output="FAILED t.py::test_x - boom")


def _entry(operator="core/ReplaceTrueWithFalse", before="x = True", after="x = False"):
    return score.Equivalent(operator, before, after, "a reason")


@pytest.mark.parametrize(
    ("outcome", "checked", "expected"),
    [
        (score.NOT_RUN, False, score.EQUIVALENT),  # skipped, as listed
        (score.SURVIVED, True, score.EQUIVALENT),  # run and confirmed
        (score.KILLED, True, f"{score.CONTRADICTED} killed"),
        (score.TIMEOUT, True, f"{score.CONTRADICTED} timeout"),
        (score.NOT_RUN, True, f"{score.CONTRADICTED} not run"),  # asked to check, never ran: unconfirmed
    ],
)
def test_settle_listed_equivalents(outcome, checked, expected):
    mutant = _mutant()
    mutant.equivalent = _entry()
    assert score.settle(mutant, outcome, checked) == expected
    assert score.settle(_mutant(), outcome, checked) == outcome  # not listed: as classified


def test_summary_all_killed_exits_0():
    code, lines = report.summarize([_mutant(), _mutant(line=4)], stale=[])
    assert code == 0 and lines[0] == "killed 2 of 2" and lines[1] == "equivalent 0 (reviewed)"
    assert any("by FAILED t.py::test_x" in line for line in lines)


def test_summary_lists_a_survivor_with_its_diff():
    code, lines = report.summarize([_mutant(), _mutant(score.SURVIVED)], stale=[])
    text = "\n".join(lines)
    assert code == 1 and lines[0] == "killed 1 of 2"
    assert "SURVIVED line 3 core/ReplaceTrueWithFalse: 'x = True' -> 'x = False'\n-x = True\n+x = False" in text


@pytest.mark.parametrize("outcome", [score.TIMEOUT, score.INCOMPETENT, score.NOT_RUN])
def test_summary_never_counts_an_unjudged_mutant_as_killed(outcome):
    code, lines = report.summarize([_mutant(), _mutant(outcome)], stale=[])
    assert code == 1 and lines[0] == "killed 1 of 2"
    assert any(line.startswith(outcome.upper()) for line in lines)


def test_summary_with_nothing_left_to_test_is_not_a_pass():
    listed = _mutant(score.EQUIVALENT)
    listed.equivalent = _entry()
    code, lines = report.summarize([listed], stale=[])
    assert code == 1 and "killed 0 of 0" in lines and "equivalent 1 (reviewed)" in lines


def test_summary_fails_on_a_stale_or_contradicted_entry():
    code, lines = report.summarize([_mutant()], stale=[_entry(before="y = True")])
    assert code == 1 and any(line.startswith("STALE equivalent entry") and "'y = True'" in line for line in lines)
    killed = _mutant(f"{score.CONTRADICTED} killed")
    killed.equivalent = _entry()
    code, lines = report.summarize([_mutant(), killed], stale=[])
    assert code == 1 and "equivalent 0 (reviewed)" in lines and lines[0] == "killed 1 of 1"


# ---------------------------------------------------------------- identity and equivalents


def test_changed_lines_are_stripped_and_ignore_context():
    original = "class A:\n    x = True\n    y = 1\n"
    assert eq.changed_lines(original, original.replace("x = True", "x = False")) == ("x = True", "x = False")


def test_an_entry_matches_by_operator_and_lines_not_by_line_number():
    moved = _mutant(line=40)
    other_operator = _mutant(operator="core/AddNot")
    other_line = _mutant(before="z = True", after="z = False")
    entries = [_entry(), _entry(before="never = True")]
    stale = eq.match_equivalents([moved, other_operator, other_line], entries)
    assert moved.equivalent == entries[0]
    assert other_operator.equivalent is None and other_line.equivalent is None
    assert stale == [entries[1]]


def test_an_entry_without_after_covers_an_operator_glob_on_that_line():
    mutants = [_mutant(operator=f"core/ReplaceBinaryOperator_BitOr_{op}", before="n: int | None", after=f"n: int {sym} None")
               for op, sym in (("Add", "+"), ("Sub", "-"))]
    entry = score.Equivalent("core/ReplaceBinaryOperator_BitOr_*", "n: int | None", None, "annotation")
    assert eq.match_equivalents(mutants, [entry]) == []
    assert all(m.equivalent == entry for m in mutants)


def _write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


def test_load_equivalents_normalizes_lines(tmp_path):
    path = _write(tmp_path / "eq.yaml", """\
        equivalents:
          - operator: core/ReplaceTrueWithFalse
            before: "   x = True  "
            after: |
              x = False
            reason: >
              folded
              reason
            cpu_only: true
        """)
    assert eq.load_equivalents(path) == [score.Equivalent("core/ReplaceTrueWithFalse", "x = True", "x = False", "folded reason", True)]


@pytest.mark.parametrize(
    ("text", "culprit"),
    [
        ("equivalents: [\n", "unreadable"),
        ("- just a list\n", "expected a mapping with an 'equivalents' list"),
        ("equivalents:\n  - operator: core/AddNot\n    before: x\n", "entry 1: 'reason' must be a non-empty string"),
        ("equivalents:\n  - {operator: o, before: x, reason: r, line: 3}\n", "entry 1: unknown key 'line'"),
        ("equivalents:\n  - {operator: o, before: x, reason: r, after: 3}\n", "entry 1: 'after' must be a string"),
        ("equivalents:\n  - {operator: o, before: x, reason: r, cpu_only: maybe}\n", "entry 1: 'cpu_only' must be true or false"),
        ("equivalents:\n  - 7\n", "entry 1: expected a mapping"),
    ],
)
def test_a_corrupt_equivalents_file_names_the_culprit(tmp_path, text, culprit):
    path = _write(tmp_path / "eq.yaml", text)
    with pytest.raises(score.BadInput, match=culprit) as info:
        eq.load_equivalents(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_cpu_only_entries_drop_when_the_suite_tests_cuda(monkeypatch):
    entries = [_entry(), score.Equivalent("o", "b", None, "r", cpu_only=True)]
    monkeypatch.setattr(eq, "suite_tests_cuda", lambda extra: True)
    assert eq.applicable(entries, []) == entries[:1]
    monkeypatch.setattr(eq, "suite_tests_cuda", lambda extra: False)
    assert eq.applicable(entries, []) == entries
    assert eq.suite_tests_cuda(["--device", "cpu"]) is False and eq.suite_tests_cuda(["--device=cpu"]) is False


def mutants_of_a_copy_of_the_reference(tmp_path, name: str) -> list:
    """The mutants cosmic-ray makes of a byte-identical copy of reference.py saved as ``name``."""
    copy = tmp_path / name
    shutil.copyfile(eq.REFERENCE_FILE, copy)
    config = runs.write_config(tmp_path, copy, ["true"], 60)
    runs.init_session(config, tmp_path / "s.sqlite", tmp_path, tmp_path / "log")
    return runs.list_mutants(tmp_path / "s.sqlite", copy)


def test_the_committed_list_matches_the_reference_mutants_exactly(tmp_path):
    """No stale entry, and exactly the reviewed mutants: 44 annotations, dtype is, 4 non_blocking."""
    mutants = mutants_of_a_copy_of_the_reference(tmp_path, "reference.py")
    equivalents = eq.default_equivalents(eq.REFERENCE_FILE)
    assert eq.match_equivalents(mutants, equivalents) == []
    listed = [m for m in mutants if m.equivalent is not None]
    assert len(listed) == 49 and sum(m.operator.startswith("core/ReplaceBinaryOperator_BitOr_") for m in listed) == 44
    judged = {(m.operator, m.before) for m in mutants if m.equivalent is None}
    assert ("core/ReplaceTrueWithFalse", "with_numpy: bool = True,") in judged  # a suite gap, not an equivalent
    assert ("core/ReplaceFalseWithTrue", "with torch.inference_mode(False):") in judged


# ---------------------------------------------------------------- command line: bad input and a real tiny run

CONFTEST = """\
from hypothesis import settings

settings.register_profile("ci")


def pytest_addoption(parser):
    parser.addoption("--impl")
"""
TEST = """\
import runpy


def test_checked(pytestconfig):
    path, attr = pytestconfig.getoption("impl").rsplit(":", 1)
    assert runpy.run_path(path)[attr].checked is True
"""
TINY = "class Tiny:\n    checked = True  # the suite reads it: a mutant is killed\n    verbose = False  # nobody reads it: a mutant survives\n"


@pytest.fixture
def tiny(tmp_path):
    """A tiny target with two mutation sites and a one-test fake suite (no torch: seconds, not minutes)."""
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text(CONFTEST)
    (suite / "test_tiny.py").write_text(TEST)
    target = tmp_path / "tiny.py"
    target.write_text(TINY)
    return tmp_path


def _main(tiny: Path, *args: str, target: str = "tiny.py") -> int:
    return cli.main(["--impl", f"{tiny / target}:Tiny", "--suite", str(tiny / "suite"), *args])


def _one_error_line(capsys) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if "suite command:" not in line]
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize(
    ("impl", "culprit"),
    [
        ("no/such/file.py:Tiny", "no such file 'no/such/file.py'"),
        ("tiny.py", "expected 'path/to/file.py:Attr'"),
        ("no_such_module_xyz:Tiny", "no module named 'no_such_module_xyz'"),
    ],
)
def test_bad_impl_is_exit_2_naming_it(capsys, impl, culprit):
    assert cli.main(["--impl", impl]) == 2
    assert culprit in _one_error_line(capsys)


def test_corrupt_or_missing_equivalents_is_exit_2(tiny, capsys):
    assert _main(tiny, "--equivalents", str(tiny / "missing.yaml")) == 2
    assert "missing.yaml" in _one_error_line(capsys)
    (tiny / "bad.yaml").write_text("equivalents: {")
    assert _main(tiny, "--equivalents", str(tiny / "bad.yaml")) == 2
    assert "bad.yaml': unreadable" in _one_error_line(capsys)


def test_a_target_the_suite_already_fails_is_exit_2(tiny, capsys):
    (tiny / "broken.py").write_text("class Tiny:\n    checked = False\n")
    assert _main(tiny, target="broken.py") == 2
    assert "baseline: the suite fails on the unmutated" in _one_error_line(capsys)


def test_nothing_to_mutate_is_exit_2(tiny, capsys):
    (tiny / "plain.py").write_text("class Tiny:\n    checked = all(())\n")  # passes, and no operator applies
    assert _main(tiny, target="plain.py") == 2
    assert "cosmic-ray found nothing to mutate" in _one_error_line(capsys)


def test_a_real_run_counts_the_kill_and_shows_the_survivor(tiny, capsys):
    work = tiny / "work"
    assert _main(tiny, "--workdir", str(work)) == 1
    out = capsys.readouterr().out
    assert out.startswith("killed 1 of 2\nequivalent 0 (reviewed)\nsurvived 1, timeout 0, incompetent 0, not run 0\n")
    assert "SURVIVED line 3 core/ReplaceFalseWithTrue: 'verbose = False  # nobody reads it: a mutant survives'" in out
    assert "-    verbose = False  # nobody" in out and "+    verbose = True  # nobody" in out
    assert "line 2 core/ReplaceTrueWithFalse" in out and "by FAILED" in out and "test_checked" in out
    assert (tiny / "tiny.py").read_text() == TINY  # only the copy in the work directory was ever mutated
    assert (work / "tiny.py").read_text() == TINY and (work / "session.sqlite").is_file()


def test_a_listed_survivor_makes_the_run_pass(tiny, capsys):
    _write(tiny / "eq.yaml", """\
        equivalents:
          - operator: core/ReplaceFalseWithTrue
            before: "verbose = False  # nobody reads it: a mutant survives"
            after: "verbose = True  # nobody reads it: a mutant survives"
            reason: nothing reads verbose
        """)
    assert _main(tiny, "--equivalents", str(tiny / "eq.yaml")) == 0
    out = capsys.readouterr().out
    assert out.startswith("killed 1 of 1\nequivalent 1 (reviewed)\n") and "SURVIVED" not in out
    assert "(1 mutant, line 3)" in out and "why: nothing reads verbose" in out


# ---------------------------------------------------------------- the reference by content, a file's neighbours


def test_a_byte_identical_copy_of_the_reference_gets_the_reviewed_list(tmp_path):
    """The review is of reference.py's content: a copy elsewhere reported its 49 equivalents as survivors."""
    copy = tmp_path / "elsewhere" / "buffers.py"
    copy.parent.mkdir()
    shutil.copyfile(eq.REFERENCE_FILE, copy)
    reviewed = eq.default_equivalents(eq.REFERENCE_FILE)
    assert reviewed and eq.default_equivalents(copy) == reviewed
    edited = tmp_path / "edited.py"
    edited.write_bytes(eq.REFERENCE_FILE.read_bytes() + b"# one more line\n")
    assert eq.default_equivalents(edited) == [], "an edited copy was not reviewed"


def test_the_reviewed_list_covers_the_mutants_of_a_copy_of_the_reference(tmp_path):
    mutants = mutants_of_a_copy_of_the_reference(tmp_path, "buffers.py")
    assert eq.match_equivalents(mutants, eq.default_equivalents(tmp_path / "buffers.py")) == []
    assert sum(m.equivalent is not None for m in mutants) == 49


def test_a_directory_as_impl_is_named_a_directory(tmp_path, capsys):
    assert cli.main(["--impl", f"{tmp_path}/:Tiny"]) == 2
    assert _one_error_line(capsys) == f"mutation: --impl '{tmp_path}/:Tiny': '{tmp_path}/' is a directory, not a Python file (name the file in it)"


# A fake suite that loads the impl as impl.load does a file: its folder first on sys.path.
TEST_BESIDE = """\
import os
import runpy
import sys


def test_checked(pytestconfig):
    path, attr = pytestconfig.getoption("impl").rsplit(":", 1)
    sys.path.insert(0, os.path.dirname(path))
    assert runpy.run_path(path)[attr].checked is True
"""


def test_a_target_importing_a_module_beside_it_is_mutated_with_its_neighbour(tiny, capsys):
    (tiny / "suite" / "test_tiny.py").write_text(TEST_BESIDE)
    (tiny / "flags.py").write_text("UNUSED = 1\n")
    (tiny / "beside.py").write_text("import flags  # a module beside the file\n\n" + TINY)
    work = tiny / "work"
    assert _main(tiny, "--workdir", str(work), target="beside.py") == 1, capsys.readouterr()
    assert capsys.readouterr().out.startswith("killed 1 of 2\nequivalent 0 (reviewed)\nsurvived 1,")
    assert (work / "flags.py").is_symlink() and (work / "flags.py").resolve() == tiny / "flags.py"
    assert not (work / "work").exists() and (work / "beside.py").read_text() == (tiny / "beside.py").read_text()


def test_neighbours_are_linked_never_over_what_the_work_directory_holds(tmp_path):
    src, work = tmp_path / "src", tmp_path / "src" / "work"
    for folder in (src / "pkg", src / "__pycache__", work):
        folder.mkdir(parents=True)
    for name in ("target.py", "helper.py", "data.csv", ".hidden.py", "kept.py"):
        (src / name).write_text("")
    (work / "kept.py").write_text("ours\n")
    made = runs.link_neighbours(src / "target.py", work)
    assert sorted(p.name for p in made) == ["helper.py", "pkg"]
    assert (work / "kept.py").read_text() == "ours\n" and not (work / "target.py").exists()
