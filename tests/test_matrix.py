"""matrix.yaml: the default file's content, and a clear one-line refusal of each kind of bad file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cpugpu_conformance.cli.matrix_file import main
from cpugpu_conformance.runner import matrix
from cpugpu_conformance.runner.matrix import Release, default_release, load

ROOT = Path(__file__).resolve().parents[1]

GOOD = """\
python: "3.11"
devices:
  cpu: {runner: ubuntu-latest}
  cuda: {runner: [self-hosted, gpu]}
hypothesis_profile: ci
time_limit_s: 300
index_url: https://download.pytorch.org/whl/cpu
baseline: "2.13.0"
candidates: ["2.14.1"]
torch:
  - {version: "2.2.2", numpy: "<2", time_limit_s: 30}
  - {version: "2.13.0", build: cpu}
  - {version: "2.14.1", extra_packages: ["setuptools<80"]}
"""


def write(tmp_path: Path, text: str, name: str = "matrix.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def refusal(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> list[str]:
    """Run the command line on a bad file: exit 2, one line per problem on stderr, nothing on stdout."""
    path = write(tmp_path, text, "bad.yaml")
    assert main([str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.splitlines()
    assert lines and all(line.startswith(f"{path}") for line in lines), lines
    return [line[len(str(path)):] for line in lines]


# --------------------------------------------------------------------------- the default file


def test_default_matrix_covers_the_releases_the_project_promises() -> None:
    m = load(ROOT / "matrix.yaml")
    versions = [r.version for r in m.releases]
    keys = [r.key for r in m.releases]
    assert len(versions) >= 9
    assert keys == sorted(keys), "releases are listed oldest first"
    assert min(keys) <= (2, 2, 99) and "2.15.0" in versions
    assert any(k[:2] == (2, 13) for k in keys) and any(k[:2] == (2, 14) for k in keys)
    assert len({k[:2] for k in keys}) == len(keys), "one release (its newest patch) per minor"
    assert m.python == "3.11" and m.hypothesis_profile == "ci" and m.index_url is None
    assert [d.name for d in m.devices] == ["cpu"]
    assert m.baseline in versions and set(m.candidates) <= set(versions)


def test_default_matrix_pairs_old_releases_with_numpy_1_and_setuptools() -> None:
    for r in load(ROOT / "matrix.yaml").releases:
        assert (r.numpy == "<2") == (r.key < (2, 3)), r
        if r.key < (2, 2):
            assert "setuptools" in r.extra_packages, r


def test_good_matrix_loads_into_cells(tmp_path: Path) -> None:
    m = load(write(tmp_path, GOOD))
    assert [c.name for c in m.cells] == [
        "torch-2.2.2-cpu", "torch-2.2.2-cuda", "torch-2.13.0-cpu", "torch-2.13.0-cuda",
        "torch-2.14.1-cpu", "torch-2.14.1-cuda",
    ]
    first = m.cells[0]
    assert first.session == "conformance(torch='2.2.2', device='cpu')"
    assert first.tag == "torch-2.2.2"
    assert first.time_limit_s == 30 and m.cells[2].time_limit_s == 300
    assert m.cell("2.13.0", "cuda").device.runner == ("self-hosted", "gpu")
    assert m.release("2.14.1").requirements() == ["torch==2.14.1", "numpy", "setuptools<80"]
    assert m.release("2.13.0").build == "cpu"
    assert m.index_url == "https://download.pytorch.org/whl/cpu"


def test_releases_not_listed_get_the_measured_pairing() -> None:
    assert default_release("2.1.2").requirements() == ["torch==2.1.2", "numpy<2", "setuptools"]
    assert default_release("2.2.1").requirements() == ["torch==2.2.1", "numpy<2"]
    assert default_release("2.5.1").requirements() == ["torch==2.5.1", "numpy"]
    m = load(ROOT / "matrix.yaml")
    assert m.release("2.5.1") == default_release("2.5.1")
    assert m.release("2.13.0") is m.releases[[r.version for r in m.releases].index("2.13.0")]


def test_json_listing_names_every_cell_with_its_runner_and_session(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main([str(write(tmp_path, GOOD)), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["baseline"] == "2.13.0" and data["candidates"] == ["2.14.1"]
    cuda = [c for c in data["cells"] if c["device"] == "cuda"]
    assert [c["runner"] for c in cuda] == [["self-hosted", "gpu"]] * 3
    assert cuda[0] == {
        "name": "torch-2.2.2-cuda", "session": "conformance(torch='2.2.2', device='cuda')", "tag": "torch-2.2.2",
        "torch": "2.2.2", "device": "cuda", "runner": ["self-hosted", "gpu"],
        "requirements": ["torch==2.2.2", "numpy<2"], "build": None, "time_limit_s": 30.0,
        "result": "results/torch-2.2.2-cuda.json",
    }


def test_text_listing_shows_each_cell(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(ROOT / "matrix.yaml")]) == 0
    out = capsys.readouterr().out
    assert "torch-2.15.0-cpu" in out and "torch==2.1.2 numpy<2 setuptools" in out


# --------------------------------------------------------------------------- refusals

BASE = 'python: "3.11"\nbaseline: "2.13.0"\ncandidates: ["2.14.1"]\n'
TWO = 'torch: [{version: "2.13.0"}, {version: "2.14.1"}]\n'


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param('python: "3.11\ntorch: [ {\n', [":3:1: not valid YAML: found unexpected end of stream (while scanning a quoted scalar at line 1, column 9)"], id="unparseable"),
        pytest.param("", [": expected a mapping of keys (python, devices"], id="empty"),
        pytest.param(BASE + TWO + "colour: red\n", [": colour: unknown key (expected one of: python,"], id="unknown-top-key"),
        pytest.param(BASE + 'torch: [{version: "2.13.0", numpi: "<2"}, {version: "2.14.1"}]\n',
                     [": torch[0].numpi: unknown key (expected one of: version, numpy,"], id="unknown-entry-key"),
        pytest.param(BASE + TWO + "devices: {gpu: {runner: x}}\n", [": devices.gpu: unknown key (expected one of: cpu, cuda, sim)"],
                     id="unknown-device"),
        pytest.param(BASE + 'torch: [{numpy: "<2"}, {version: "2.14.1"}]\n', [": torch[0].version: missing"], id="missing-version"),
        pytest.param('python: "3.11"\ncandidates: ["2.14.1"]\n' + TWO, [": baseline: missing"], id="missing-baseline"),
        pytest.param(BASE + 'torch: [{version: "2.13.0"}, {version: "2.14.1"}, {version: "2.x"}]\n',
                     [": torch[2].version: '2.x' is not a version like 2.13.0"], id="malformed-version"),
        pytest.param(BASE + 'torch: [{version: "2.13.0"}, {version: "2.14.1"}, {version: 2.10}]\n',
                     [": torch[2].version: expected a string, got 2.1 (a number); quote it"], id="unquoted-version"),
        pytest.param(BASE + 'torch: [{version: "2.13.0", numpy: 2}, {version: "2.14.1"}]\n',
                     [": torch[0].numpy: expected a string, got 2 (a number)"], id="wrong-type-numpy"),
        pytest.param(BASE + TWO + "time_limit_s: ten\n", [": time_limit_s: expected a number, got 'ten' (a string)"],
                     id="wrong-type-limit"),
        pytest.param(BASE + TWO + "time_limit_s: 0\n", [": time_limit_s: 0 is not a number of seconds above 0"], id="zero-limit"),
        pytest.param(BASE + TWO + "devices: {cpu: {runner: 3}}\n", [": devices.cpu.runner: 3 is not a CI runner label"],
                     id="wrong-type-runner"),
        pytest.param(BASE + TWO + "hypothesis_profile: fast\n", [": hypothesis_profile: 'fast' is not one of default, ci, thorough"],
                     id="unknown-profile"),
        pytest.param(BASE + TWO + "index_url: pypi\n", [": index_url: 'pypi' is not an http(s):// or file:// URL"], id="bad-index"),
        pytest.param(BASE + 'torch: [{version: "2.13.0"}, {version: "2.14.1"}, {version: "2.13.0"}]\n',
                     [": torch[2].version: duplicate cell: '2.13.0' is already torch[0]"], id="duplicate-cell"),
        pytest.param(BASE + 'baseline: "2.14.1"\n' + TWO, [":4:1: not valid YAML: duplicate key 'baseline'"], id="duplicate-key"),
        pytest.param('python: "3.11"\nbaseline: "2.12.0"\ncandidates: ["2.14.1"]\n' + TWO,
                     [": baseline: '2.12.0' is not one of the torch releases listed"], id="baseline-not-listed"),
        pytest.param('python: "3.11"\nbaseline: "2.13.0"\ncandidates: ["2.13.0"]\n' + TWO,
                     [": candidates[0]: '2.13.0' is the baseline"], id="candidate-is-baseline"),
        pytest.param(BASE + 'torch: [{version: "2.13.0", numpy: "lt2"}, {version: "2.14.1"}]\n',
                     [": torch[0].numpy: 'lt2' is not a version requirement like '<2' or '==1.26.4'"], id="bad-numpy-spec"),
        pytest.param(BASE + 'torch: [{version: "2.13.0", extra_packages: [numpy]}, {version: "2.14.1"}]\n',
                     [": torch[0].extra_packages[0]: 'numpy' is not an extra requirement"], id="numpy-as-extra"),
        pytest.param(BASE + "torch: []\n", [": torch: must not be empty"], id="no-releases"),
        pytest.param(BASE + TWO + "time_limit_s: .nan\n", [": time_limit_s: nan is not a finite number of seconds above 0"],
                     id="nan-limit"),
        pytest.param(BASE + TWO + "time_limit_s: .inf\n", [": time_limit_s: inf is not a finite number of seconds above 0"],
                     id="inf-limit"),
        pytest.param(BASE + 'torch: [{version: "2.13.0", time_limit_s: .NaN}, {version: "2.14.1"}]\n',
                     [": torch[0].time_limit_s: nan is not a finite number of seconds above 0"], id="nan-release-limit"),
        pytest.param(BASE + TWO + "time_limit_s: -.inf\n", [": time_limit_s: -inf is not a number of seconds above 0"],
                     id="minus-inf-limit"),
        pytest.param(BASE + 'torch: [{version: "02.13.0"}, {version: "2.14.1"}]\n',
                     [": torch[0].version: '02.13.0' is not written canonically (no leading zeros): write '2.13.0'"],
                     id="leading-zero-version"),
        pytest.param('python: "3.11"\nbaseline: "2.13.00"\ncandidates: ["2.14.1"]\n' + TWO,
                     [": baseline: '2.13.00' is not written canonically (no leading zeros): write '2.13.0'"],
                     id="leading-zero-baseline"),
        pytest.param('python: "3.11"\nbaseline: "2.13.0"\ncandidates: ["2.014.1"]\n' + TWO,
                     [": candidates[0]: '2.014.1' is not written canonically (no leading zeros): write '2.14.1'"],
                     id="leading-zero-candidate"),
    ],
)
def test_bad_matrix_is_refused_naming_file_and_key(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str,
                                                   expected: list[str]) -> None:
    lines = refusal(tmp_path, text, capsys)
    assert len(lines) == len(expected), lines
    for line, want in zip(lines, expected):
        assert line.startswith(want), (line, want)


def test_every_problem_gets_its_own_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = refusal(tmp_path, BASE + 'torch: [{version: "2.x", numpi: 1}, {version: "2.14.1"}]\nhypothesis_profile: 7\n', capsys)
    assert sorted(lines) == sorted([
        ": torch[0].numpi: unknown key (expected one of: version, numpy, extra_packages, build, time_limit_s, index_url, find_links)",
        ": torch[0].version: '2.x' is not a version like 2.13.0",
        ": hypothesis_profile: 7 is not one of default, ci, thorough",
    ])


def test_missing_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path / "nope.yaml")]) == 2
    assert capsys.readouterr().err == f"{tmp_path / 'nope.yaml'}: no such file\n"


def test_load_raises_matrix_error_with_the_lines(tmp_path: Path) -> None:
    with pytest.raises(matrix.MatrixError) as info:
        load(write(tmp_path, BASE + 'torch: [{version: "2.13.0"}, {version: "2.14.1"}, {version: "2.14.1"}]\n'))
    assert info.value.lines == [f"{tmp_path / 'matrix.yaml'}: torch[2].version: duplicate cell: '2.14.1' is already torch[1]"]


def test_module_command_exits_2_without_a_traceback(tmp_path: Path) -> None:
    path = write(tmp_path, BASE + 'torch: [{version: "2.13.0"}, {version: "2.14.1"}, {version: "2.x"}]\n')
    proc = subprocess.run([sys.executable, "-m", "cpugpu_conformance.matrix", str(path)], check=False, capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr == f"{path}: torch[2].version: '2.x' is not a version like 2.13.0\n"


def test_release_requirements_put_torch_first() -> None:
    assert Release("2.1.2", numpy="<2", extra_packages=("setuptools",)).requirements() == ["torch==2.1.2", "numpy<2", "setuptools"]


def test_a_refused_limit_never_reaches_the_json_listing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """NaN in the listing would be invalid JSON for the CI job matrix, and a limit never enforced."""
    path = write(tmp_path, BASE + TWO + "time_limit_s: .nan\n")
    assert main([str(path), "--json"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == f"{path}: time_limit_s: nan is not a finite number of seconds above 0\n"


def test_canonical_versions_and_finite_limits_load(tmp_path: Path) -> None:
    m = load(write(tmp_path, BASE + 'torch: [{version: "2.13.0", time_limit_s: 0.5}, {version: "2.14.1"}, {version: "10.0.0"}]\n'))
    assert [r.version for r in m.releases] == ["2.13.0", "2.14.1", "10.0.0"]
    assert m.cells[0].time_limit_s == 0.5


# --------------------------------------------------------------------------- hostile files


def matrix_command(*args: str, env: dict[str, str] | None = None, limit_memory: bool = False) -> subprocess.CompletedProcess[str]:
    """`python -m cpugpu_conformance.matrix`, killed after a minute (a hang fails the test, not the run);
    with limit_memory, under a 1 GiB address space, so a file that expands in memory fails fast."""
    def cap() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (2**30, 2**30))
    return subprocess.run([sys.executable, "-m", "cpugpu_conformance.matrix", *args], check=False, capture_output=True,
                          text=True, timeout=60, env=env, preexec_fn=cap if limit_memory else None)


@pytest.mark.parametrize(("make", "why"), [
    pytest.param(lambda d: os.mkfifo(d / "m.yaml") or d / "m.yaml", "not a regular file (a FIFO)", id="fifo"),
    pytest.param(lambda d: Path("/dev/zero"), "not a regular file (a character device)", id="dev-zero"),
    pytest.param(lambda d: d, "not a regular file (a directory)", id="directory"),
])
def test_a_matrix_that_is_not_a_regular_file_is_one_line_at_once(tmp_path: Path, make, why: str) -> None:
    """A FIFO blocked every command (open waits for a writer); /dev/zero read until MemoryError."""
    path = make(tmp_path)
    proc = matrix_command(str(path), limit_memory=True)
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", f"{path}: {why}\n")


def test_a_fifo_matrix_stops_nox_list_in_one_line(tmp_path: Path) -> None:
    """noxfile.py loads the matrix when nox imports it: `nox -l` hung on a FIFO."""
    pytest.importorskip("nox")
    fifo = tmp_path / "m.yaml"
    os.mkfifo(fifo)
    proc = subprocess.run([sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "-l"], check=False,
                          capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={**os.environ, "CONFORMANCE_MATRIX": str(fifo)})
    assert proc.returncode == 2
    assert proc.stderr == f"{fifo}: not a regular file (a FIFO)\n"


def test_a_matrix_over_a_mebibyte_is_refused_unread(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "big.yaml"
    path.write_text(BASE + TWO + "#" * matrix.MAX_MATRIX_BYTES + "\n")
    assert main([str(path)]) == 2
    size = path.stat().st_size
    assert capsys.readouterr().err == f"{path}: {size:,} bytes, over the 1,048,576-byte limit for a file\n"


def alias_bomb(levels: int, width: int) -> str:
    """extra_packages: *a<levels>, where each level lists the one below `width` times: width**levels strings."""
    lines = ['a0: &a0 ["x"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, levels + 1)]
    return BASE + "\n".join(lines) + f'\ntorch: [{{version: "2.13.0", extra_packages: *a{levels}}}, {{version: "2.14.1"}}]\n'


def test_yaml_aliases_are_refused_where_they_start(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert refusal(tmp_path, alias_bomb(2, 2), capsys) == [
        ":4:5: not valid YAML: &a0: anchors and aliases are not accepted in a matrix (write the value out)"]


def test_an_alias_without_its_anchor_is_refused_as_an_alias(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = BASE + 'torch: [{version: "2.13.0", extra_packages: *pkgs}, {version: "2.14.1"}]\n'
    assert refusal(tmp_path, text, capsys) == [
        ":4:45: not valid YAML: *pkgs: anchors and aliases are not accepted in a matrix (write the value out)"]


def test_an_alias_bomb_is_refused_before_it_expands(tmp_path: Path) -> None:
    """9 levels of 9 aliases (387 million strings) took 5.8 GB; under a 1 GiB cap it must still be one line."""
    path = write(tmp_path, alias_bomb(9, 9))
    proc = matrix_command(str(path), limit_memory=True)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [f"{path}:4:5: not valid YAML: &a0: anchors and aliases are not accepted in a matrix "
                                        "(write the value out)"]


def test_deep_nesting_is_one_line_not_a_recursion_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = BASE + TWO + "devices: " + "[" * 100_000 + "\n"
    [line] = refusal(tmp_path, text, capsys)
    assert line.endswith(f"not valid YAML: nested deeper than {matrix.MAX_YAML_DEPTH} levels"), line


def test_a_thousand_problems_print_twenty_lines_and_a_count(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = BASE + "torch:\n" + '  - {version: "2.13.0"}\n' * 1000 + '  - {version: "2.14.1"}\n'
    lines = refusal(tmp_path, text, capsys)
    assert len(lines) == matrix.MAX_PROBLEMS_SHOWN + 1
    assert lines[0] == ": torch[1].version: duplicate cell: '2.13.0' is already torch[0]"
    assert lines[-1] == ": ... 979 more problems"


def test_a_mebibyte_of_duplicates_stays_a_screenful(tmp_path: Path) -> None:
    """The largest matrix accepted, all duplicates (2 million of them once printed 2 million lines)."""
    entry = '  - {version: "2.13.0"}\n'
    count = (matrix.MAX_MATRIX_BYTES - 200) // len(entry)
    path = write(tmp_path, BASE + "torch:\n" + entry * count + '  - {version: "2.14.1"}\n')
    proc = matrix_command(str(path), limit_memory=True)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == matrix.MAX_PROBLEMS_SHOWN + 1 and lines[-1] == f"{path}: ... {count - 1 - 20:,} more problems"


@pytest.mark.parametrize(("limit", "shown"), [
    pytest.param("9" * 330, "a 330-digit number (99999999...)", id="330-digits"),
    pytest.param("1.0e+308", "1e+308", id="1e308"),
    pytest.param("86401", "86401", id="a-day-and-a-second"),
])
@pytest.mark.parametrize("where", ["top", "entry"])
def test_a_time_limit_over_a_day_is_refused_naming_key_and_value(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                 limit: str, shown: str, where: str) -> None:
    """330 digits overflowed float() in every command and `nox -l`; 1e308 gave a 300-digit timeout_minutes."""
    if where == "top":
        text, key = BASE + TWO + f"time_limit_s: {limit}\n", "time_limit_s"
    else:
        text, key = BASE + f'torch: [{{version: "2.13.0"}}, {{version: "2.14.1", time_limit_s: {limit}}}]\n', "torch[1].time_limit_s"
    assert refusal(tmp_path, text, capsys) == [f": {key}: {shown} is over the limit of 86400 seconds (a day)"]


def test_a_day_is_the_longest_time_limit(tmp_path: Path) -> None:
    m = load(write(tmp_path, BASE + 'torch: [{version: "2.13.0", time_limit_s: 86400}, {version: "2.14.1"}]\n'))
    assert m.cells[0].time_limit_s == 86400


def test_an_integer_too_long_to_read_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Python refuses int() of over 4300 digits with a ValueError that escaped PyYAML."""
    [line] = refusal(tmp_path, BASE + TWO + f"time_limit_s: {'9' * 5000}\n", capsys)
    assert line.startswith(": not valid YAML: Exceeds the limit (4300 digits)"), line


def test_a_huge_time_limit_stops_nox_list_and_the_cells_listing(tmp_path: Path) -> None:
    pytest.importorskip("nox")
    path = write(tmp_path, BASE + TWO + f"time_limit_s: {'9' * 330}\n")
    expected = f"{path}: time_limit_s: a 330-digit number (99999999...) is over the limit of 86400 seconds (a day)\n"
    env = {**os.environ, "CONFORMANCE_MATRIX": str(path)}
    for cmd, prefix in (([sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "-l"], ""),
                        ([sys.executable, "-m", "cpugpu_conformance", "cells", "--json"], "cpugpu-conformance cells: error: ")):
        proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
        assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", prefix + expected), cmd
