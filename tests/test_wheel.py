"""The suite ships in the wheel: `pip install cpugpu-conformance` and `cpugpu-conformance run`,
with no checkout, in a directory whose own pytest configuration must not matter."""

from __future__ import annotations

import inspect
import zipfile
from pathlib import Path

import pytest
from suite_runner import (
    PRE_FIX_IMPL,
    TORCH_FOR_ENVS,
    build_wheel,
    hostile_cwd,
    make_env,
    run_installed,
)

from cpugpu_conformance import results, variants

SRC = Path(__file__).resolve().parent.parent / "src" / "cpugpu_conformance"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    return build_wheel(tmp_path_factory.mktemp("dist"))


@pytest.fixture(scope="module")
def installed(tmp_path_factory, wheel):
    """bin/ of a fresh environment: torch, numpy and the wheel with its own dependencies."""
    return make_env(tmp_path_factory.mktemp("env") / "venv", TORCH_FOR_ENVS, "numpy", str(wheel))


def test_the_wheel_holds_the_suite_inside_the_package(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert "cpugpu_conformance/suite/conftest.py" in names and "cpugpu_conformance/suite/suite.ini" in names
    assert "cpugpu_conformance/suite/test_contract.py" in names
    # The suite's tests are the library's: the wheel that holds one holds the other.
    assert "cpugpu_conformance/testing/plugin.py" in names and "cpugpu_conformance/testing/buffer/contract.py" in names
    # Every room of the library, each module of it: a package data rule that misses a folder loses a room.
    rooms = sorted(str(p.relative_to(SRC.parent)) for p in (SRC / "testing").rglob("*.py"))
    assert not [r for r in rooms if r not in names], "modules of testing/ missing from the wheel"
    assert not [n for n in names if n.startswith("conformance/")], "a top-level `conformance` package is too generic a name"
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    metadata = zipfile.ZipFile(wheel).read("cpugpu_conformance-0.1.0.dist-info/METADATA").decode()
    plain = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:") and "extra ==" not in line]
    assert sorted(line.split()[1].split(">")[0] for line in plain) == ["hypothesis", "pytest"], plain


def test_the_wheel_holds_every_data_file_the_package_reads(wheel):
    """The JSON schemas, the report's templates and the mutation equivalents: each file beside the
    modules in src/ is in the wheel, at the same place in the package."""
    names = set(zipfile.ZipFile(wheel).namelist())
    package = Path(results.__file__).resolve().parents[1]
    data = [p for p in package.rglob("*") if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts]
    wanted = sorted(f"cpugpu_conformance/{p.relative_to(package).as_posix()}" for p in data)
    assert {"cpugpu_conformance/schemas/matrix.schema.json", "cpugpu_conformance/mutation/equivalents.yaml"} <= set(wanted)
    assert [n for n in wanted if n not in names] == []


def test_run_passes_the_reference_with_no_checkout(installed, tmp_path):
    cwd = hostile_cwd(tmp_path / "project")
    proc = run_installed(installed, cwd, "run", "--hypothesis-profile", "default", "--cell-result", "cell.json")
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-3000:]
    # pytest ran the installed suite, with the suite's own ini: not the checkout, not the caller's files.
    assert f"rootdir: {installed.parent}" in proc.stdout and "cpugpu_conformance/suite" in proc.stdout, proc.stdout[:1000]
    assert "configfile: suite.ini" in proc.stdout, proc.stdout[:1000]
    cell = results.CellResult.load(cwd / "cell.json")
    assert cell.status == "completed" and cell.answer().clean, cell.answer().lines
    assert cell["environment"]["torch"].startswith("2.13.0")


def test_run_fails_the_pre_fix_class_given_as_a_file(installed, tmp_path):
    cwd = hostile_cwd(tmp_path / "project")
    impl = cwd / "buffers.py"
    impl.write_text(PRE_FIX_IMPL.format(source=inspect.getsource(variants.PreFixCpuGpuBuffer)))
    proc = run_installed(installed, cwd, "run", "--impl", "buffers.py:PreFixCpuGpuBuffer", "--promise", "3",
                         "--cell-result", "cell.json")
    assert proc.returncode == 1, proc.stdout[-5000:] + proc.stderr[-3000:]
    assert "Inplace update to inference tensor outside InferenceMode" in proc.stdout
    assert "Reproducer" in proc.stdout
    cell = results.CellResult.load(cwd / "cell.json")
    assert cell.answer().kind == "failed" and cell.outcome("3", "cpu").kind == "failed"


def test_run_refuses_bad_input_in_one_line(installed, tmp_path):
    proc = run_installed(installed, hostile_cwd(tmp_path / "project"), "run", "--device", "tpu")
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert [line for line in proc.stderr.splitlines() if line.strip()] == [
        "ERROR: --device 'tpu': unknown device; expected cpu, cuda, sim or all"
    ]


@pytest.mark.parametrize("command", ["report", "gate"])
def test_tools_without_their_extra_say_which_in_one_line(installed, tmp_path, command):
    proc = run_installed(installed, tmp_path, command, "--help")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    # torch brings jinja2; jsonschema comes only with the [tools] extra.
    # Not PyPI (the package is not there): the extra from the same wheel file.
    prefix = f'cpugpu-conformance {command} needs jsonschema: add the tools extra to your install: pip install "cpugpu-conformance[tools] @ file://'
    assert proc.stderr.startswith(prefix) and proc.stderr.endswith('.whl"\n'), proc.stderr
    assert proc.stderr.count("\n") == 1
