"""index.py: the final torch releases of an index, a file:// index and a find-links folder, and
the newest of them (what `version: latest` resolves to). No network: fake wheels on disk.

``fake_wheel`` and ``fake_index`` are shared with tests/test_prerelease.py, which installs them.
"""

from __future__ import annotations

import base64
import hashlib
import urllib.error
import zipfile
from pathlib import Path

import pytest

from cpugpu_conformance.runner import bisection as bisect

# --------------------------------------------------------------------------- fake wheels
from cpugpu_conformance.runner import releases as index

# --------------------------------------------------------------------------- fake wheels


def fake_wheel(folder: Path, name: str, version: str, files: dict[str, str]) -> Path:
    """A pure-Python wheel (py3-none-any) with a valid filename, METADATA, WHEEL and RECORD."""
    dist = f"{name}-{version}.dist-info"
    files = {
        **files,
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: cpugpu-conformance-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [f"{path},sha256={_digest(text)},{len(text.encode())}" for path, text in files.items()]
    files[f"{dist}/RECORD"] = "\n".join([*record, f"{dist}/RECORD,,"]) + "\n"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for member, text in files.items():
            wheel.writestr(member, text)
    return path


def _digest(text: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()


def fake_torch_wheel(folder: Path, version: str) -> Path:
    """A torch that works enough for the cell's probe: version.py is real, import torch works."""
    return fake_wheel(folder, "torch", version, {
        "torch/__init__.py": "from torch.version import __version__, cuda\n",
        "torch/version.py": f"from typing import Optional\n__version__ = {version!r}\ncuda: Optional[str] = None\n"
                            "git_version = 'fake'\n",
    })


def fake_numpy_wheel(folder: Path, version: str = "2.4.6") -> Path:
    return fake_wheel(folder, "numpy", version, {"numpy/__init__.py": f"__version__ = {version!r}\n"})


def wheel_folder(folder: Path, torch_versions: list[str]) -> Path:
    """A find-links folder: the torch versions given, and a numpy."""
    for version in torch_versions:
        fake_torch_wheel(folder, version)
    fake_numpy_wheel(folder)
    return folder


def fake_index(root: Path, wheels: Path) -> str:
    """A PEP 503 simple index in a folder (<root>/<project>/index.html), as a file:// URL."""
    for wheel in sorted(wheels.glob("*.whl")):
        project = root / wheel.name.split("-", 1)[0]
        project.mkdir(parents=True, exist_ok=True)
        (project / wheel.name).write_bytes(wheel.read_bytes())
    for project in root.iterdir():
        links = "".join(f'<a href="{w.name}">{w.name}</a><br/>\n' for w in sorted(project.glob("*.whl")))
        (project / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{links}</body></html>\n")
    return root.as_uri()


# --------------------------------------------------------------------------- listing


def test_a_find_links_folder_lists_its_final_torch_releases_only(tmp_path: Path) -> None:
    folder = wheel_folder(tmp_path / "wheels", ["2.14.1", "2.9.1", "2.15.0", "2.16.0rc1", "2.16.0.dev20261201"])
    (folder / "notes.txt").write_text("not a wheel")
    fake_wheel(folder, "torchvision", "9.0.0", {})  # another project: not a torch release
    assert index.folder_releases(folder) == ["2.9.1", "2.14.1", "2.15.0"]


def test_a_missing_folder_is_one_line_naming_it(tmp_path: Path) -> None:
    with pytest.raises(index.ReleaseListingError) as info:
        index.folder_releases(tmp_path / "nope")
    assert str(info.value) == f"cannot list torch releases: find_links folder {tmp_path / 'nope'}: No such file or directory"


def test_a_file_index_is_read_like_a_pep_503_one(tmp_path: Path) -> None:
    url = fake_index(tmp_path / "simple", wheel_folder(tmp_path / "wheels", ["2.13.0", "2.15.0", "2.16.0rc1"]))
    assert url.startswith("file://")
    assert index.available_releases(url) == ["2.13.0", "2.15.0"]
    assert index.available_releases(url + "/") == ["2.13.0", "2.15.0"]


def test_a_file_index_without_the_project_is_unreachable_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "simple").mkdir()
    url = (tmp_path / "simple").as_uri()
    with pytest.raises(index.ReleaseListingError, match=rf"^cannot list torch releases: {url}/torch/ is unreachable \(no such file"):
        index.available_releases(url)


def test_bisect_lists_through_the_shared_module() -> None:
    """bisect keeps its names; the listing lives in index.py."""
    assert bisect.available_releases is index.available_releases
    assert bisect.parse_project_page is index.parse_project_page
    assert bisect.BisectError is index.ReleaseListingError


# --------------------------------------------------------------------------- the newest (latest)


def _page(*versions: str):
    def fetch(url: str, accept: str) -> tuple[str, bytes]:
        links = "".join(f'<a href="x">torch-{v}-cp311-cp311-linux_x86_64.whl</a>' for v in versions)
        return "text/html", links.encode()
    return fetch


def test_latest_is_the_newest_final_release_on_the_index() -> None:
    fetch = _page("2.9.1", "2.15.0+cpu", "2.10.0", "2.16.0rc1", "2.16.0.dev20261201")
    assert index.newest_final_release("https://idx.example", fetch=fetch) == "2.15.0"


def test_latest_compares_versions_not_strings(tmp_path: Path) -> None:
    assert index.newest_final_release(None, fetch=_page("2.9.1", "2.10.0")) == "2.10.0"
    folder = wheel_folder(tmp_path / "w", ["2.9.1", "2.10.0"])
    assert index.newest_final_release(None, [folder], offline=True) == "2.10.0"


def test_latest_takes_the_newest_of_the_folder_and_the_index(tmp_path: Path) -> None:
    folder = wheel_folder(tmp_path / "w", ["2.16.0"])
    assert index.newest_final_release(None, [folder], fetch=_page("2.15.0")) == "2.16.0"
    assert index.newest_final_release(None, [folder], fetch=_page("2.17.0")) == "2.17.0"


def test_offline_latest_never_asks_the_index(tmp_path: Path) -> None:
    def no_network(url: str, accept: str) -> tuple[str, bytes]:
        raise AssertionError(f"asked {url} while offline")

    folder = wheel_folder(tmp_path / "w", ["2.14.1", "2.15.0"])
    assert index.newest_final_release("https://idx.example", [folder], offline=True, fetch=no_network) == "2.15.0"


def test_latest_with_nothing_final_is_one_clear_line(tmp_path: Path) -> None:
    folder = wheel_folder(tmp_path / "w", ["2.16.0rc1"])
    with pytest.raises(index.ReleaseListingError) as info:
        index.newest_final_release(None, [folder], offline=True)
    assert str(info.value) == f"no final torch release in {folder}"
    with pytest.raises(index.ReleaseListingError, match="lists no final torch release"):
        index.newest_final_release("https://idx.example", fetch=_page("2.16.0.dev20261201"))


def test_an_unreachable_index_is_an_error_even_with_a_folder(tmp_path: Path) -> None:
    """Never a silent pick of an older release because the index did not answer."""
    def down(url: str, accept: str) -> tuple[str, bytes]:
        raise urllib.error.URLError("Name or service not known")

    folder = wheel_folder(tmp_path / "w", ["2.14.1"])
    with pytest.raises(index.ReleaseListingError, match=r"https://idx.example/torch/ is unreachable"):
        index.newest_final_release("https://idx.example", [folder], fetch=down)


def test_releases_in_folders_are_the_union_of_their_final_releases_in_version_order(tmp_path: Path) -> None:
    first = wheel_folder(tmp_path / "a", ["2.10.0", "2.9.1"])
    second = wheel_folder(tmp_path / "b", ["2.10.0", "2.16.0rc1", "2.11.0"])
    assert index.releases_in_folders([first, second]) == ["2.9.1", "2.10.0", "2.11.0"]
    assert index.releases_in_folders([]) == []
