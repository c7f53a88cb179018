"""The next torch before it ships: pre-release and nightly entries, `version: latest`, a
per-entry index, and a local wheel folder that works with no network.

The install tests run uv for real on fake wheels (tests/test_index.py) with a private, empty
uv cache and every proxy pointed at a closed port, so any use of the network fails them.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from test_index import fake_index, fake_numpy_wheel, wheel_folder

from cpugpu_conformance import results
from cpugpu_conformance.cli.matrix_file import main
from cpugpu_conformance.report import summary
from cpugpu_conformance.runner import CellSpec, cell
from cpugpu_conformance.runner import cell as cells
from cpugpu_conformance.runner import install as installing
from cpugpu_conformance.runner.matrix import LATEST, Release, load

ROOT = Path(__file__).resolve().parents[1]
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
HEAD = 'python: "3.11"\nbaseline: "2.14.1"\ncandidates: ["2.15.0"]\n'


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "matrix.yaml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def refused(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> list[str]:
    """The command line's refusal: exit 2, one line per problem, each starting with the file."""
    path = write(tmp_path, text)
    assert main([str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.splitlines()
    assert lines and all(line.startswith(f"{path}: ") for line in lines), lines
    return [line[len(f"{path}: "):] for line in lines]


# --------------------------------------------------------------------------- the matrix


def test_pre_releases_nightlies_and_latest_are_cells_of_their_own(tmp_path: Path) -> None:
    m = load(write(tmp_path, HEAD + textwrap.dedent("""\
        torch:
          - {version: "2.14.1"}
          - {version: "2.15.0"}
          - {version: "2.16.0rc1"}
          - {version: "2.16.0"}
          - {version: "2.16.0.dev20261201", index_url: "https://download.pytorch.org/whl/nightly/cpu"}
          - {version: "2.15.0.post1"}
          - {version: latest}
        """)))
    assert [c.name for c in m.cells] == ["torch-2.14.1-cpu", "torch-2.15.0-cpu", "torch-2.16.0rc1-cpu", "torch-2.16.0-cpu",
                                         "torch-2.16.0.dev20261201-cpu", "torch-2.15.0.post1-cpu", "torch-latest-cpu"]
    latest = m.cell(LATEST, "cpu")
    assert latest.tag == "torch-latest" and latest.session == "conformance(torch='latest', device='cpu')"
    assert latest.release.is_latest and not latest.release.is_prerelease
    assert latest.release.requirements() == ["torch", "numpy"], "unpinned until the cell resolves it"
    rc = m.cell("2.16.0rc1", "cpu").release
    assert rc.is_prerelease and rc.requirements() == ["torch==2.16.0rc1", "numpy"]
    assert m.cell("2.16.0.dev20261201", "cpu").release.is_prerelease
    assert not m.cell("2.15.0.post1", "cpu").release.is_prerelease


def test_an_entrys_index_replaces_the_project_wide_one_for_that_entry_only(tmp_path: Path) -> None:
    (tmp_path / "wheels").mkdir()
    (tmp_path / "nightly-wheels").mkdir()
    m = load(write(tmp_path, HEAD + textwrap.dedent("""\
        index_url: https://download.pytorch.org/whl/cpu
        find_links: wheels
        torch:
          - {version: "2.14.1"}
          - {version: "2.15.0", find_links: nightly-wheels}
          - {version: "2.16.0.dev20261201", index_url: "https://download.pytorch.org/whl/nightly/cpu"}
        """)))
    stable, own_folder, nightly = (m.cell(v, "cpu") for v in ("2.14.1", "2.15.0", "2.16.0.dev20261201"))
    assert (stable.index_url, stable.find_links) == ("https://download.pytorch.org/whl/cpu", str(tmp_path / "wheels"))
    assert own_folder.find_links == str(tmp_path / "nightly-wheels"), "relative to the matrix file"
    assert nightly.index_url == "https://download.pytorch.org/whl/nightly/cpu"
    assert m.index_url == "https://download.pytorch.org/whl/cpu", "the project-wide index stays"
    listed = {c["torch"]: c for c in m.as_json()["cells"]}
    assert "index_url" not in listed["2.14.1"] and "find_links" not in listed["2.14.1"]
    assert listed["2.15.0"]["find_links"] == str(tmp_path / "nightly-wheels")
    assert listed["2.16.0.dev20261201"]["index_url"] == "https://download.pytorch.org/whl/nightly/cpu"


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        ('[{version: "2.14.1"}, {version: "2.15.0"}, {version: "02.16.0rc1"}]',
         "torch[2].version: '02.16.0rc1' is not written canonically (no leading zeros): write '2.16.0rc1'"),
        ('[{version: "2.14.1"}, {version: "2.15.0"}, {version: "2.16.0-rc1"}]',
         "torch[2].version: '2.16.0-rc1' is not written canonically (as PEP 440 spells it): write '2.16.0rc1'"),
        ('[{version: "2.14.1"}, {version: "2.15.0"}, {version: "2.16.0RC1"}]',
         "torch[2].version: '2.16.0RC1' is not written canonically (as PEP 440 spells it): write '2.16.0rc1'"),
        ('[{version: "2.14.1"}, {version: "2.15.0"}, {version: "2.16.0.dev020261201"}]',
         "torch[2].version: '2.16.0.dev020261201' is not written canonically (no leading zeros): write '2.16.0.dev20261201'"),
        ('[{version: "2.14.1"}, {version: "2.15.0"}, {version: "Latest"}]', "torch[2].version: 'Latest' is not a version like 2.13.0"),
        ('[{version: "2.14.1"}, {version: "2.15.0"}, {version: "newest"}]', "torch[2].version: 'newest' is not a version like 2.13.0"),
        ('[{version: "2.14.1"}, {version: "2.15.0"}, {version: "2.16.0+cpu"}]', "torch[2].version: '2.16.0+cpu' is not a version like 2.13.0"),
        ('[{version: "2.14.1"}, {version: "2.15.0"}, {version: "1!2.16.0"}]', "torch[2].version: '1!2.16.0' is not a version like 2.13.0"),
        ('[{version: "2.14.1"}, {version: "2.15.0"}, {version: "2.16"}]', "torch[2].version: '2.16' is not a version like 2.13.0"),
        ('[{version: "2.14.1"}, {version: "2.15.0"}, {version: latest}, {version: latest}]',
         "torch[3].version: duplicate cell: 'latest' is already torch[2]"),
        ('[{version: "2.14.1"}, {version: "2.15.0"}, {version: "2.16.0rc1", index_url: nightly}]',
         "torch[2].index_url: 'nightly' is not an http(s):// or file:// URL"),
        ('[{version: "2.14.1"}, {version: "2.15.0", find_links: ""}]',
         "torch[1].find_links: '' is not a folder of wheels (relative to the matrix file)"),
    ],
    ids=["leading-zero-rc", "dash-rc", "upper-rc", "leading-zero-dev", "capital-latest", "other-word", "local-label", "epoch",
         "two-parts", "two-latest", "entry-index", "empty-find-links"],
)
def test_bad_versions_and_sources_are_one_line_naming_file_and_key(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                   entries: str, expected: str) -> None:
    assert refused(tmp_path, HEAD + f"torch: {entries}\n", capsys) == [expected]


def test_a_missing_find_links_folder_is_refused_with_where_it_looked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = refused(tmp_path, HEAD + 'find_links: wheels\ntorch: [{version: "2.14.1"}, {version: "2.15.0", find_links: /nope}]\n',
                    capsys)
    assert lines == [f"find_links: 'wheels' is not a folder (looked for {tmp_path / 'wheels'})",
                     "torch[1].find_links: '/nope' is not a folder (looked for /nope)"]


def test_offline_latest_needs_a_folder_to_look_in(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = refused(tmp_path, HEAD + 'offline: true\ntorch: [{version: "2.14.1"}, {version: "2.15.0"}, {version: latest}]\n', capsys)
    assert lines == ["torch[2].version: latest with offline: true needs find_links (a folder of wheels to find the newest release in)"]
    assert refused(tmp_path, HEAD + 'offline: "yes"\ntorch: [{version: "2.14.1"}, {version: "2.15.0"}]\n', capsys) == [
        "offline: expected true/false, got 'yes' (a string)"]


def test_latest_may_be_a_candidate_only_when_listed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = 'python: "3.11"\nbaseline: "2.15.0"\ncandidates: [latest]\ntorch: [{version: "2.15.0"}, {version: "2.16.0"}]\n'
    assert refused(tmp_path, text, capsys) == ["candidates[0]: 'latest' is not one of the torch releases listed"]
    m = load(write(tmp_path, text.replace('{version: "2.16.0"}', "{version: latest}")))
    assert m.candidates == ("latest",)


# --------------------------------------------------------------------------- what reaches the installer


def test_a_pre_release_is_installed_with_pre_releases_allowed_for_torch_only() -> None:
    cmd = installing.install_command(Path("/env/bin/python"), Release("2.16.0.dev20261201"),
                               index_url="https://download.pytorch.org/whl/nightly/cpu", requirements_file=None)
    assert cmd[-6:] == ["torch==2.16.0.dev20261201", "numpy", "--extra-index-url",
                        "https://download.pytorch.org/whl/nightly/cpu", "--prerelease", "explicit"]
    assert "--prerelease" not in installing.install_command(Path("/p"), Release("2.15.0"), index_url=None, requirements_file=None)


def test_a_find_links_folder_and_offline_reach_the_installer() -> None:
    cmd = installing.install_command(Path("/env/bin/python"), Release("2.15.0"), index_url=None, requirements_file=None,
                               find_links="/w", offline=True)
    assert cmd[-4:] == ["numpy", "--find-links", "/w", "--offline"]


def test_latest_is_never_installed_unresolved() -> None:
    with pytest.raises(ValueError, match="must be resolved"):
        installing.install_command(Path("/p"), Release(LATEST), index_url=None, requirements_file=None)


def test_a_resolved_latest_records_what_was_asked_and_what_it_became(tmp_path: Path) -> None:
    spec = CellSpec(name="torch-latest-cpu", release=Release(LATEST, numpy="<3"), device="cpu", hypothesis_profile="ci",
                    time_limit_s=60, results_dir=tmp_path, project_dir=ROOT, find_links=str(wheel_folder(tmp_path / "w",
                    ["2.14.1", "2.15.0", "2.16.0rc1"])), offline=True)
    resolved = cells.resolve_latest(spec)
    assert resolved.release == Release("2.15.0", numpy="<3", asked=LATEST)
    asked = resolved.requested()
    assert (asked["torch"], asked["torch_asked"], asked["requirements"]) == ("2.15.0", "latest", ["torch==2.15.0", "numpy<3"])
    assert (asked["find_links"], asked["offline"]) == (spec.find_links, True)
    unresolved = spec.requested()
    assert unresolved["torch"] == "latest" and "torch_asked" not in unresolved
    assert cells.resolve_latest(resolved) is resolved, "a release is left as it is"


# --------------------------------------------------------------------------- installing for real, with no network


@pytest.fixture
def no_network(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """uv with an empty private cache and no way out: a closed local port as every proxy."""
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.setenv(var, "http://127.0.0.1:9")
    for var in ("NO_PROXY", "no_proxy", "UV_OFFLINE", "UV_PRERELEASE", "UV_INDEX_URL", "UV_EXTRA_INDEX_URL", "UV_FIND_LINKS",
                "PIP_FIND_LINKS"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path


def _spec_of(m, torch: str, tmp_path: Path) -> CellSpec:
    """The spec the noxfile's conformance session makes for a cell."""
    c = m.cell(torch, "cpu")
    return CellSpec(name=c.name, release=c.release, device="cpu", hypothesis_profile=m.hypothesis_profile,
                    time_limit_s=c.time_limit_s, results_dir=tmp_path / "results", project_dir=ROOT,
                    index_url=c.index_url, find_links=c.find_links, offline=c.offline)


def _install(spec: CellSpec, tmp_path: Path) -> dict:
    """Install the spec's torch and numpy (not the project: that needs an index) into a new env; its probe."""
    python = installing.create_env(tmp_path / "env", PYTHON)
    spec.results_dir.mkdir(parents=True, exist_ok=True)
    assert spec.release is not None
    done = installing.install(python, spec.release, index_url=spec.index_url, find_links=spec.find_links, offline=spec.offline,
                        log_path=spec.log_path)
    assert done.ok, done.error()
    return installing.probe_torch(python)


def test_a_find_links_entry_installs_from_its_folder_offline(no_network: Path) -> None:
    tmp_path = no_network
    wheel_folder(tmp_path / "wheels", ["2.14.1", "2.15.0"])
    m = load(write(tmp_path, HEAD + 'offline: true\ntorch: [{version: "2.14.1"}, {version: "2.15.0", find_links: wheels}]\n'))
    spec = _spec_of(m, "2.15.0", tmp_path)
    probe = _install(spec, tmp_path)
    assert (probe["torch"], probe["numpy"]) == ("2.15.0", "2.4.6")
    assert installing.torch_mismatch(probe, spec.release, "cpu", tmp_path / "env") is None
    log = spec.log_path.read_text()
    assert f"--find-links {tmp_path / 'wheels'} --offline" in log and "+ torch==2.15.0" in log


@pytest.mark.parametrize("version", ["2.16.0rc1", "2.16.0.dev20261201"])
def test_a_pre_release_entry_installs_even_where_pre_releases_are_disallowed(no_network: Path, monkeypatch: pytest.MonkeyPatch,
                                                                            version: str) -> None:
    tmp_path = no_network
    monkeypatch.setenv("UV_PRERELEASE", "disallow")  # a user's setting the cell must not trip on
    folder = wheel_folder(tmp_path / "wheels", ["2.15.0", version])
    fake_numpy_wheel(folder, "2.5.0rc1")  # a NumPy pre-release: never taken, only torch's is asked for
    m = load(write(tmp_path, HEAD + f'find_links: wheels\noffline: true\ntorch: [{{version: "2.14.1"}}, {{version: "2.15.0"}}, '
                                    f'{{version: "{version}"}}]\n'))
    probe = _install(_spec_of(m, version, tmp_path), tmp_path)
    assert (probe["torch"], probe["numpy"]) == (version, "2.4.6")


def test_latest_against_a_file_index_resolves_to_the_newest_final_release_and_installs_it(no_network: Path) -> None:
    tmp_path = no_network
    url = fake_index(tmp_path / "simple", wheel_folder(tmp_path / "wheels", ["2.9.1", "2.14.1", "2.15.0", "2.16.0rc1"]))
    m = load(write(tmp_path, HEAD + f'torch: [{{version: "2.14.1"}}, {{version: "2.15.0"}}, {{version: latest, index_url: "{url}"}}]\n'))
    spec = cells.resolve_latest(_spec_of(m, LATEST, tmp_path))
    assert spec.release is not None and (spec.release.version, spec.release.asked) == ("2.15.0", LATEST)
    assert _install(spec, tmp_path)["torch"] == "2.15.0"


def test_a_latest_cell_runs_on_the_release_it_resolved_to_and_reports_it(no_network: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole cell, offline from a folder: resolved, installed, checked, then the suite starts
    (and fails: the fake environment has no pytest; never a pass)."""
    tmp_path = no_network
    wheel_folder(tmp_path / "wheels", ["2.14.1", "2.15.0", "2.16.0rc1"])
    m = load(write(tmp_path, HEAD + 'find_links: wheels\noffline: true\ntorch: [{version: "2.14.1"}, {version: "2.15.0"}, '
                                    '{version: latest}]\n'))
    install = installing.install
    monkeypatch.setattr(cell, "install", lambda *args, **kw: install(*args, **{**kw, "project": None}))  # no index for the project
    spec = _spec_of(m, LATEST, tmp_path)
    python = installing.create_env(tmp_path / "env", PYTHON)
    result = cells.install_and_run(spec, python, env_dir=tmp_path / "env")
    assert result == results.CellResult.load(tmp_path / "results" / "torch-latest-cpu.json")
    assert (result.requested["torch"], result.requested["torch_asked"]) == ("2.15.0", "latest")
    assert result.requested["requirements"] == ["torch==2.15.0", "numpy"]
    assert result.environment["torch"] == "2.15.0" and result.release == "2.15.0"
    assert result.status == "error" and "No module named pytest" in result["detail"], result["detail"]
    assert not result.answer().clean
    log = spec.log_path.read_text()
    assert f"cell: torch latest is 2.15.0, the newest final release in {tmp_path / 'wheels'}" in log
    [row] = summary.summarize(tmp_path / "results", ["torch-latest-cpu"])
    assert (row.cell, row.torch) == ("torch-latest-cpu", "2.15.0")


def test_a_latest_that_cannot_be_resolved_is_not_installed_naming_why(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    spec = CellSpec(name="torch-latest-cpu", release=Release(LATEST), device="cpu", hypothesis_profile="ci", time_limit_s=60,
                    results_dir=tmp_path / "results", project_dir=ROOT, find_links=str(tmp_path / "empty"), offline=True)
    result = cells.install_and_run(spec, Path(sys.executable))
    assert result.status == "not_installed"
    assert result["detail"] == f"cannot resolve torch latest: no final torch release in {tmp_path / 'empty'}"
    assert result.requested["torch"] == "latest" and result.release == "latest"
