"""python -m cpugpu_conformance: subcommands, help, usage errors."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest
import result_factory as rf

from cpugpu_conformance.cli import ExitCode
from cpugpu_conformance.cli import dispatch as cli


def test_module_help_lists_the_subcommands():
    # The one subprocess here: proves `python -m cpugpu_conformance` itself is wired up.
    proc = subprocess.run(
        [sys.executable, "-m", "cpugpu_conformance", "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert "run" in proc.stdout and "report" in proc.stdout and "gate" in proc.stdout


@pytest.mark.parametrize("command", ["report", "gate"])
def test_subcommand_help(command, capsys):
    assert cli.main([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert f"usage: cpugpu-conformance {command}" in out


def test_no_subcommand_is_a_usage_error(capsys):
    assert cli.main([]) == 2
    assert "report" in capsys.readouterr().err


def test_unknown_subcommand_is_a_usage_error(capsys):
    assert cli.main(["publish"]) == 2
    assert "invalid choice: 'publish'" in capsys.readouterr().err


def test_gate_needs_both_files(tmp_path, capsys):
    path = rf.write(tmp_path, "b.json", rf.completed("2.14.1"))
    assert cli.main(["gate", "--baseline", str(path)]) == 2
    assert "--candidate" in capsys.readouterr().err


def test_report_needs_a_results_dir(capsys):
    assert cli.main(["report"]) == 2
    assert "RESULTS_DIR" in capsys.readouterr().err


def test_every_subcommand_module_has_the_interface():
    # Others add subcommands by listing a module; this is what the parser relies on.
    for name in cli.SUBCOMMANDS:
        module = cli.load(name)
        assert isinstance(module.HELP, str) and module.HELP, name
        parser = argparse.ArgumentParser()
        module.add_arguments(parser)
        assert callable(module.run), name


def test_version(capsys):
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"cpugpu-conformance {cli.__version__}"


@pytest.mark.parametrize(("command", "package"), [("report", "jinja2"), ("gate", "jsonschema")])
def test_a_missing_extra_is_one_line(command, package, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, package, None)  # as if not installed: find_spec answers None
    assert cli.main([command, "--help"]) == ExitCode.USAGE
    err = capsys.readouterr().err
    # Not PyPI, where the package is not: the extra added to this install (an editable checkout here).
    assert err == f"cpugpu-conformance {command} needs {package}: {cli.tools_extra()}\n"
    assert "pip install 'cpugpu-conformance[tools]'" not in err


def test_help_names_the_extra_of_an_unavailable_command(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "jinja2", None)
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    text = "".join(out.split())  # argparse wraps lines, at hyphens too
    assert "reportunavailable:needsjinja2(addthetoolsextratoyourinstall:pipinstall" in text
    assert "".join(cli.tools_extra().split()) in text
    assert "gatecompareacandidate" in text, "gate has what it needs"


def test_run_imports_none_of_the_tools():
    # `run` (the suite's entry point) must work where only torch, numpy, hypothesis and pytest are.
    code = (
        "import sys\n"
        "from cpugpu_conformance.cli.dispatch import load\n"
        "load('run').suite_dir()\n"
        "print(sorted({'yaml', 'jinja2', 'jsonschema', 'markupsafe'} & set(sys.modules)))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


# --- an empty path is bad input, never the current folder ---------------------------------------

EMPTY = "an empty path (it would stand for the current folder)"


@pytest.mark.parametrize(("argv", "culprit"), [
    (["report", "results", "--out", ""], "--out"),
    (["report", "results", "--out="], "--out"),
    (["report", ""], "RESULTS_DIR"),
    (["summary", ""], "RESULTS_DIR"),
    (["matrix", "--results", ""], "--results"),
    (["matrix", "--envdir", ""], "--envdir"),
    (["matrix", "--matrix", ""], "--matrix"),
    (["cells", "--matrix", ""], "--matrix"),
    (["cell", "2.13.0", "--results", ""], "--results"),
    (["cell", "2.13.0", "--env", ""], "--env"),
    (["bisect", "2.12.0", "2.13.0", "--results", ""], "--results"),
    (["bisect", "2.12.0", "2.13.0", "--envdir", ""], "--envdir"),
])
def test_an_empty_path_is_one_line_exit_2_and_nothing_is_written(tmp_path, monkeypatch, capsys, argv, culprit):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results").mkdir()
    rf.write(tmp_path / "results", "torch-2.13.0.json", rf.completed("2.13.0"))
    (tmp_path / "index.html").write_text("someone else's page\n", encoding="utf-8")
    before = sorted(p.name for p in tmp_path.iterdir())
    assert cli.main(argv) == 2
    assert capsys.readouterr().err == f"cpugpu-conformance {argv[0]}: error: {culprit} '': {EMPTY}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert (tmp_path / "index.html").read_text(encoding="utf-8") == "someone else's page\n"
