"""bisect: the release listing, the range, what counts as a change and the search, with fake cells (no network, no torch)."""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import result_factory as rf

from cpugpu_conformance import results
from cpugpu_conformance.runner import bisection as bisect
from cpugpu_conformance.runner import install as installing
from cpugpu_conformance.runner import releases as index

RELEASES = ["2.5.1", "2.6.0", "2.7.0", "2.7.1", "2.8.0", "2.9.1", "2.10.0", "2.11.0", "2.12.0"]

# observations as observe.observe_all() records them
PIN_DOC = "torch.zeros(4, pin_memory=True) with no accelerator"
OLD_PIN_ERROR = {
    "doc": PIN_DOC,
    "error": {"type": "RuntimeError", "message": "Cannot access accelerator device when none is available."},
}
NEW_PIN_ERROR = {
    "doc": PIN_DOC,
    "error": {"type": "RuntimeError", "message": "Need to provide pin_memory allocator to use pin memory."},
}


def cell_result(
    release: str,
    *,
    pin_error=OLD_PIN_ERROR,
    verdict3="passed",
    observed11="raises RuntimeError",
    numpy_dtypes=("bool", "float32"),
):
    """A completed cell result as the suite writes it, with the parts the answer is made of."""
    failed = {("3", "cpu"): [rf.failure("test_mutable", "refused", None)]} if verdict3 == "failed" else None
    observations = {
        "pin_memory_without_accelerator": pin_error,
        "numpy_dtypes": {"doc": "which dtypes .numpy() accepts", "value": list(numpy_dtypes)},
    }
    return results.CellResult(rf.completed(release, observed_11=observed11, observations=observations, failed=failed))


class FakeCells:
    """probe(): the answer of each release, counting the (expensive) calls."""

    def __init__(self, change_at: int | None, releases=RELEASES, untestable=()):
        self.releases, self.change_at, self.untestable = releases, change_at, set(untestable)
        self.calls: list[str] = []

    def __call__(self, release: str) -> dict:
        self.calls.append(release)
        if release in self.untestable:
            return results.CellResult.new(f"torch-{release}", "not_installed", detail="no matching distribution")
        changed = self.change_at is not None and self.releases.index(release) >= self.change_at
        return cell_result(release, pin_error=NEW_PIN_ERROR if changed else OLD_PIN_ERROR)


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


# ----------------------------------------------------------------------------- releases


def simple_json(*files):
    page = {"meta": {"api-version": "1.1"}, "name": "torch", "files": [{"filename": f, **extra} for f, extra in files]}
    return "application/vnd.pypi.simple.v1+json", json.dumps(page).encode()


def test_parse_json_page_keeps_final_releases_sorted_by_version():
    content_type, body = simple_json(
        ("torch-2.10.0-cp311-cp311-manylinux_2_28_x86_64.whl", {}),
        ("torch-2.9.1-cp311-cp311-manylinux_2_28_x86_64.whl", {}),
        ("torch-2.9.1-cp312-cp312-win_amd64.whl", {}),  # same release twice
        ("torch-2.11.0rc1-cp311-cp311-manylinux_2_28_x86_64.whl", {}),  # pre-release
        ("torch-2.11.0.dev20260101-cp311-cp311-linux_x86_64.whl", {}),  # dev
        ("torch-2.2.0-cp311-cp311-linux_x86_64.whl", {"yanked": "broken wheel"}),  # yanked
        ("torch-1.0.1.post2-cp37-cp37m-linux_x86_64.whl", {}),  # post: still final
        ("torch-0.1.2.tar.gz", {}),  # an sdist counts
        ("README.html", {}),  # not a distribution
    )
    assert bisect.parse_project_page(content_type, body) == ["0.1.2", "1.0.1.post2", "2.9.1", "2.10.0"]


def test_parse_html_page_from_a_pytorch_style_index():
    html = b"""<!DOCTYPE html><html><body>
    <a href="/whl/cpu/torch-2.5.1%2Bcpu-cp311-cp311-linux_x86_64.whl#sha256=ab">torch-2.5.1+cpu-cp311-cp311-linux_x86_64.whl</a><br/>
    <a href="/whl/cpu/torch-2.6.0%2Bcpu-cp311-cp311-linux_x86_64.whl" data-yanked="">torch-2.6.0+cpu-cp311-cp311-linux_x86_64.whl</a>
    <a href="/whl/cpu/torch-2.4.0%2Bcpu-cp311-cp311-linux_x86_64.whl">torch-2.4.0+cpu-cp311-cp311-linux_x86_64.whl</a>
    </body></html>"""
    assert bisect.parse_project_page("text/html", html) == ["2.4.0", "2.5.1"]


def test_available_releases_asks_the_simple_api_of_the_given_index():
    asked = []

    def fetch(url, accept):
        asked.append((url, accept))
        return simple_json(("torch-2.13.0-cp311-cp311-linux_x86_64.whl", {}))

    assert bisect.available_releases(fetch=fetch) == ["2.13.0"]
    assert bisect.available_releases("https://download.example/whl/cpu/", fetch=fetch) == ["2.13.0"]
    assert [url for url, _ in asked] == ["https://pypi.org/simple/torch/", "https://download.example/whl/cpu/torch/"]
    assert "application/vnd.pypi.simple.v1+json" in asked[0][1]


@pytest.mark.parametrize(
    "error, message",
    [
        (urllib.error.URLError("Name or service not known"), "is unreachable"),
        (urllib.error.HTTPError("u", 404, "Not Found", None, None), "answered HTTP 404"),
    ],
)
def test_available_releases_unreachable_index_is_one_clear_error(error, message):
    def fetch(url, accept):
        raise error

    with pytest.raises(bisect.BisectError, match=rf"cannot list torch releases: https://idx.example/torch/ {message}"):
        bisect.available_releases("https://idx.example", fetch=fetch)


def test_available_releases_empty_or_garbled_page():
    with pytest.raises(bisect.BisectError, match="lists no final torch release"):
        bisect.available_releases(fetch=lambda url, accept: simple_json())
    with pytest.raises(bisect.BisectError, match="not a Simple API JSON project page"):
        bisect.available_releases(fetch=lambda url, accept: ("application/vnd.pypi.simple.v1+json", b"{oops"))


def test_releases_between_is_inclusive_and_matches_equal_versions():
    assert bisect.releases_between("2.7.0", "2.9.1", RELEASES) == ["2.7.0", "2.7.1", "2.8.0", "2.9.1"]
    assert bisect.releases_between("2.7", "2.8", RELEASES) == ["2.7.0", "2.7.1", "2.8.0"]
    unsorted = list(reversed(RELEASES))
    assert bisect.releases_between("2.11.0", "2.12.0", unsorted) == ["2.11.0", "2.12.0"]


@pytest.mark.parametrize(
    "good, bad, message",
    [
        ("2.7.2", "2.9.1", "good release 2.7.2 is not a final torch release on the index"),
        ("2.7.0", "3.0.0", "bad release 3.0.0 is not a final torch release on the index"),
        ("2.9.1", "2.7.0", "good release 2.9.1 must be older than bad release 2.7.0"),
        ("2.8.0", "2.8.0", "good release 2.8.0 must be older than bad release 2.8.0"),
        ("latest", "2.8.0", "good release 'latest' is not a version number"),
    ],
)
def test_releases_between_refuses_bad_input(good, bad, message):
    with pytest.raises(bisect.BisectError, match=message.replace("(", r"\(").replace(".", r"\.")):
        bisect.releases_between(good, bad, RELEASES)


# ----------------------------------------------------------------------------- run()


class FakeRunner:
    """run_release(): writes each release's result file like a cell would, and returns its path."""

    def __init__(self, folder: Path, cells: FakeCells):
        self.folder, self.cells = folder, cells

    def __call__(self, release: str) -> Path:
        return results.write_atomic(self.folder / f"bisect-torch-{release}.json", self.cells(release))


def test_run_reports_the_first_change_and_keeps_each_step_file(tmp_path, capsys):
    runner = FakeRunner(tmp_path, FakeCells(change_at=5))
    assert bisect.run("2.5.1", "2.12.0", runner, releases=RELEASES) == 0
    out = capsys.readouterr().out
    assert "first change at torch 2.9.1 (previous: 2.8.0)" in out
    assert "observation pin_memory_without_accelerator: raises RuntimeError: Cannot access" in out
    for release in runner.cells.calls:
        assert f"torch {release}: " in out
        assert (tmp_path / f"bisect-torch-{release}.json").is_file()
    assert f"step {len(runner.cells.calls)}: " in out


def test_run_no_change_is_exit_1(tmp_path, capsys):
    assert bisect.run("2.5.1", "2.12.0", FakeRunner(tmp_path, FakeCells(None)), releases=RELEASES) == 1
    assert "no change: torch 2.12.0 answers like torch 2.5.1" in capsys.readouterr().out


def test_run_bad_input_is_exit_2_before_running_anything(tmp_path, capsys):
    runner = FakeRunner(tmp_path, FakeCells(3))
    assert bisect.run("2.9.1", "2.5.1", runner, releases=RELEASES) == 2
    assert bisect.run("2.5.1", "9.9.9", runner, releases=RELEASES) == 2
    err = capsys.readouterr().err
    assert "good release 2.9.1 must be older than bad release 2.5.1" in err
    assert "bad release 9.9.9 is not a final torch release" in err
    assert runner.cells.calls == []


def test_run_untestable_good_release_is_exit_2(tmp_path, capsys):
    runner = FakeRunner(tmp_path, FakeCells(3, untestable={"2.5.1"}))
    assert bisect.run("2.5.1", "2.12.0", runner, releases=RELEASES) == 2
    assert "good release 2.5.1 could not be tested (not_installed): no matching distribution" in capsys.readouterr().err


def test_run_treats_a_missing_result_file_as_untestable(tmp_path, capsys):
    cells = FakeCells(2)

    def runner(release):
        if release == "2.8.0":  # the midpoint: its cell left no file behind
            return tmp_path / "never-written.json"
        return FakeRunner(tmp_path, cells)(release)

    assert bisect.run("2.5.1", "2.12.0", runner, releases=RELEASES) == 0
    out = capsys.readouterr().out
    assert "torch 2.8.0: untestable (no result: " in out
    assert "first change at torch 2.7.0 (previous: 2.6.0)" in out


def test_run_lists_releases_from_the_index_when_not_given(tmp_path, monkeypatch, capsys):
    seen = []

    def listing(index_url=None):
        seen.append(index_url)
        return ["2.13.0", "2.14.1"]

    monkeypatch.setattr(bisect, "available_releases", listing)
    runner = FakeRunner(tmp_path, FakeCells(1, ["2.13.0", "2.14.1"]))
    assert bisect.run("2.13.0", "2.14.1", runner, index_url="https://idx.example") == 0
    assert seen == ["https://idx.example"]
    assert "first change at torch 2.14.1 (previous: 2.13.0)" in capsys.readouterr().out


# --------------------------------------------------------------------------- offline


def no_network(monkeypatch):
    """Any attempt to reach an index fails the test loudly."""
    def refuse(*args, **kwargs):
        pytest.fail(f"offline, yet the network was asked: {args}")

    monkeypatch.setattr(bisect, "available_releases", refuse)
    monkeypatch.setattr(index, "_http_fetch", refuse)
    monkeypatch.setattr(urllib.request, "urlopen", refuse)


def fake_wheels(folder: Path, versions) -> Path:
    """A find_links folder: the listing reads only the wheels' names."""
    folder.mkdir(parents=True, exist_ok=True)
    for version in versions:
        (folder / f"torch-{version}-cp311-cp311-manylinux_2_28_x86_64.whl").touch()
    (folder / "numpy-2.4.6-py3-none-any.whl").touch()
    return folder


def test_offline_run_lists_the_releases_of_its_folders_only(tmp_path, monkeypatch, capsys):
    no_network(monkeypatch)
    folder = fake_wheels(tmp_path / "wheels", ["2.13.0", "2.14.1", "2.15.0", "2.16.0rc1"])
    runner = FakeRunner(tmp_path, FakeCells(1, ["2.13.0", "2.14.1", "2.15.0"]))
    code = bisect.run("2.13.0", "2.15.0", runner, index_url="https://idx.example", find_links=[str(folder)], offline=True)
    assert code == 0
    out = capsys.readouterr().out
    assert "bisect: 3 final torch releases from 2.13.0 to 2.15.0: 2.13.0, 2.14.1, 2.15.0" in out


def test_offline_run_names_the_folder_a_release_is_missing_from(tmp_path, monkeypatch, capsys):
    no_network(monkeypatch)
    folder = fake_wheels(tmp_path / "wheels", ["2.13.0", "2.14.1"])
    runner = FakeRunner(tmp_path, FakeCells(1))
    assert bisect.run("2.13.0", "2.15.0", runner, find_links=[str(folder)], offline=True) == 2
    assert capsys.readouterr().err == f"bisect: bad release 2.15.0 is not a final torch release in {folder}\n"
    assert runner.cells.calls == []


def test_offline_with_no_folder_is_one_line_exit_2(tmp_path, monkeypatch, capsys):
    no_network(monkeypatch)
    assert bisect.run("2.13.0", "2.15.0", FakeRunner(tmp_path, FakeCells(1)), offline=True) == 2
    assert capsys.readouterr().err == (
        "bisect: offline: true and no find_links: no folder of wheels to list torch releases from\n")


def test_online_run_lists_the_folder_and_the_index(tmp_path, monkeypatch, capsys):
    """uv takes torch from the find_links folder as well as the index, so bisect lists both."""
    monkeypatch.setattr(bisect, "available_releases", lambda index_url=None: ["2.13.0", "2.15.0"])
    folder = fake_wheels(tmp_path / "wheels", ["2.14.1"])
    runner = FakeRunner(tmp_path, FakeCells(1, ["2.13.0", "2.14.1", "2.15.0"]))
    assert bisect.run("2.13.0", "2.15.0", runner, find_links=[str(folder)]) == 0
    assert "3 final torch releases from 2.13.0 to 2.15.0: 2.13.0, 2.14.1, 2.15.0" in capsys.readouterr().out


def test_bisect_command_of_an_offline_matrix_lists_and_installs_offline(tmp_path, monkeypatch, capsys):
    """The matrix says offline: true and find_links: the command never asks PyPI, and every cell it
    runs installs with the installer offline, from that folder."""
    from cpugpu_conformance.cli import bisection as cli_bisect
    from cpugpu_conformance.cli import dispatch as cli
    from cpugpu_conformance.runner import CellSpec

    no_network(monkeypatch)
    folder = fake_wheels(tmp_path / "wheels", ["2.13.0", "2.14.1", "2.15.0"])
    m = tmp_path / "matrix.yaml"
    m.write_text('python: "3.11"\nbaseline: "2.13.0"\ncandidates: ["2.15.0"]\nfind_links: wheels\noffline: true\n'
                 'torch: [{version: "2.13.0"}, {version: "2.15.0"}]\n')
    installs = []

    def fake_cell(c, *, env_dir, python_version, results_dir, project_dir, pytest_args=(), name=None, package=None):
        spec = CellSpec.from_matrix_cell(c, results_dir=results_dir, project_dir=project_dir)
        installs.append(installing.install_command(Path("python"), spec.release, index_url=spec.index_url,
                                              requirements_file=None, find_links=spec.find_links, offline=spec.offline))
        failed = {("1", "cpu"): [rf.failure("t", "shape differs", None)]} if c.torch == "2.15.0" else None
        return results.CellResult(rf.completed(c.torch, cell=c.name, failed=failed)).write(results_dir / f"{c.name}.json")

    monkeypatch.setattr(cli_bisect, "run_matrix_cell", fake_cell)
    code = cli.main(["bisect", "2.13.0", "2.15.0", "--matrix", str(m), "--results", str(tmp_path / "results"),
                     "--envdir", str(tmp_path / "envs")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "3 final torch releases from 2.13.0 to 2.15.0: 2.13.0, 2.14.1, 2.15.0" in out
    assert len(installs) == 3
    for cmd in installs:
        assert ("--offline" in cmd or "--no-index" in cmd) and cmd[cmd.index("--find-links") + 1] == str(folder), cmd
