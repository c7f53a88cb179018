"""--impl: what a spec names, as one line when it names no class, and a file's neighbours importable."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cpugpu_conformance import impl, results

REPO = Path(__file__).resolve().parent.parent
FACTORY = """\
from cpugpu_conformance.reference import CpuGpuBuffer


def make(*size, dtype=None, device=None, pin_memory=False, with_numpy=True):
    return CpuGpuBuffer(*size, dtype=dtype, device=device, pin_memory=pin_memory, with_numpy=with_numpy)
"""
# buffers.py imports a module beside it, as a script may.
BESIDE = {
    "helpers.py": "from cpugpu_conformance.reference import CpuGpuBuffer as Base\n",
    "buffers.py": "from helpers import Base\n\n\nclass Buffer(Base):\n    pass\n",
}


def run_command(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cpugpu_conformance", "run", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=600, check=False)


def folder_of(tmp_path: Path, files: dict[str, str]) -> Path:
    folder = tmp_path / "impls"
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(textwrap.dedent(text))
    return folder


@pytest.fixture
def clean_path(monkeypatch):
    """sys.path and sys.modules as they were: a loaded impl adds its folder, itself and its neighbours."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield
    for name in [n for n in sys.modules if n.startswith("_cpugpu_impl_") or n == "helpers"]:
        del sys.modules[name]


def test_a_directory_is_named_a_directory_not_a_missing_file(tmp_path):
    spec = f"{tmp_path}/:Buffer"
    for step in (impl.check, impl.load):
        with pytest.raises(impl.ImplError) as info:
            step(spec)
        assert str(info.value) == (f"--impl {spec!r}: {str(tmp_path)!r} is a directory, not a Python file "
                                   "(name the file in it: path/to/file.py:Attr)")


def test_a_function_is_not_a_class(tmp_path, clean_path):
    """A factory was called as the constructor; say at once that the suite tests a class."""
    folder = folder_of(tmp_path, {"factory.py": FACTORY})
    spec = f"{folder / 'factory.py'}:make"
    with pytest.raises(impl.ImplError) as info:
        impl.load(spec)
    assert str(info.value) == f"--impl {spec!r}: 'make' is a function, not a class"


@pytest.mark.parametrize(("files", "attr", "culprit"), [
    pytest.param({"factory.py": FACTORY}, "factory.py:make", "'make' is a function, not a class", id="function"),
    pytest.param({}, ":Buffer", "is a directory, not a Python file", id="directory"),
])
def test_run_refuses_a_spec_that_names_no_class_in_one_line_exit_4(tmp_path, files, attr, culprit):
    folder = folder_of(tmp_path, files)
    spec = f"{folder}/{attr}" if attr[0] != ":" else f"{folder}{attr}"
    proc = run_command("--impl", spec, "--cell-result", str(tmp_path / "r.json"), cwd=tmp_path)
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and culprit in lines[0] and spec in lines[0], proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr


def test_a_file_imports_the_modules_beside_it(tmp_path, clean_path):
    folder = folder_of(tmp_path, BESIDE)
    loaded = impl.load(f"{folder / 'buffers.py'}:Buffer")
    assert loaded.cls.__name__ == "Buffer" and sys.path[0] == str(folder)


def test_the_reproducer_import_finds_the_modules_beside_the_file(tmp_path, clean_path):
    """A pasted reproducer runs in a fresh interpreter, from anywhere."""
    folder = folder_of(tmp_path, BESIDE)
    code = impl.load(f"{folder / 'buffers.py'}:Buffer").import_code + "print(Buffer.__mro__[1].__name__)\n"
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path.anchor, capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stdout) == (0, "CpuGpuBuffer\n"), proc.stderr


def test_run_tests_a_file_that_imports_a_module_beside_it(tmp_path):
    folder = folder_of(tmp_path, BESIDE)
    result = tmp_path / "r.json"
    proc = run_command("--impl", f"{folder / 'buffers.py'}:Buffer", "--promise", "1", "--cell-result", str(result),
                       cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert results.CellResult.load(result).outcome("1", "cpu").kind == "passed"
