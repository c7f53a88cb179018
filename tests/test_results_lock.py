"""results: one run per result path: the lock a run holds while it writes, a stale one removed,
whatever else is planted at its path refused and left untouched, and the placeholder never a pass.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cpugpu_conformance import results

pytestmark = pytest.mark.quick  # the core: nox -s quick


# ----------------------------------------------------------------------------- one run per result path


def test_a_second_run_on_the_same_path_is_refused(tmp_path):
    path = tmp_path / "cell.json"
    with results.exclusive(path):
        with pytest.raises(results.ResultPathBusy, match="another run is writing this result file"):
            with results.exclusive(path):
                pass
        code = f"from cpugpu_conformance import results\nwith results.exclusive({str(path)!r}): pass"
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert "ResultPathBusy" in proc.stderr and f"pid {os.getpid()}" in proc.stderr
    with results.exclusive(path):  # released, and the lock file is gone after
        pass
    assert list(tmp_path.iterdir()) == []


def test_a_killed_holder_releases_the_lock(tmp_path):
    path = tmp_path / "cell.json"
    code = f"import os\nfrom cpugpu_conformance import results\nwith results.exclusive({str(path)!r}): os._exit(9)"
    subprocess.run([sys.executable, "-c", code], timeout=60)
    lock = results.lock_path(path)
    assert lock.read_text().startswith("pid "), "the killed run left its lock file behind"
    with results.exclusive(path):  # stale: removed, and made anew
        assert lock.read_text().startswith(f"pid {os.getpid()}, since ")
    assert not lock.exists()


def test_a_stale_lock_left_by_any_process_is_removed_and_made_anew(tmp_path):
    """A regular lock file of one name and a line of text that nobody holds: what a killed run leaves."""
    path = tmp_path / "cell.json"
    lock = results.lock_path(path)
    lock.write_text("held")
    before = os.stat(lock).st_ino
    with results.exclusive(path):
        assert lock.read_text().startswith(f"pid {os.getpid()}, since ")
        assert os.stat(lock).st_ino != before or lock.read_text() != "held"
    assert list(tmp_path.iterdir()) == []


def _precious(tmp_path: Path) -> Path:
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me\n")
    return precious


def _planted(tmp_path: Path, kind: str) -> tuple[Path, Path | None]:
    """Something planted at the lock path of tmp_path/cell.json, and the file it could harm."""
    lock = results.lock_path(tmp_path / "cell.json")
    if kind == "hard link":
        precious = _precious(tmp_path)
        os.link(precious, lock)
        return lock, precious
    if kind == "symbolic link":
        precious = _precious(tmp_path)
        lock.symlink_to(precious)
        return lock, precious
    if kind == "dangling symbolic link":  # O_CREAT through it would make a file outside the folder
        outside = tmp_path / "elsewhere" / "made-through-the-link"
        outside.parent.mkdir()
        lock.symlink_to(outside)
        return lock, outside
    if kind == "FIFO":
        os.mkfifo(lock)
        return lock, None
    if kind == "directory":
        lock.mkdir()
        return lock, None
    if kind == "large regular file":  # a file someone moved there: more than a lock line
        lock.write_text("keep me\n" * 1000)
        return lock, lock
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["hard link", "symbolic link", "dangling symbolic link", "FIFO", "directory",
                                  "large regular file"])
def test_whatever_is_planted_at_the_lock_path_is_refused_in_one_line_and_left_untouched(tmp_path, kind):
    lock, harmed = _planted(tmp_path, kind)
    before = os.lstat(lock)
    content = harmed.read_bytes() if harmed is not None and harmed.exists() else None
    with pytest.raises(results.NotRegularFile) as refused:
        with results.exclusive(tmp_path / "cell.json"):
            pytest.fail("the lock was taken")
    message = str(refused.value)
    assert message.startswith(f"{lock}: the lock file ") and message.endswith("remove it") and "\n" not in message
    after = os.lstat(lock)
    assert (after.st_ino, after.st_mode, after.st_nlink, after.st_size) == \
           (before.st_ino, before.st_mode, before.st_nlink, before.st_size), "what was refused was changed"
    if kind == "dangling symbolic link":
        assert not harmed.exists(), "a file was made through the link"
    elif harmed is not None:
        assert harmed.read_bytes() == content
    assert not (tmp_path / "cell.json").exists()


def test_a_hard_link_at_the_lock_path_of_a_suite_run_is_refused_and_its_target_kept(tmp_path):
    """Issue 22: `ln precious.txt .r.json.lock`, then the suite with --cpugpu-cell-result=r.json."""
    lock, precious = _planted(tmp_path, "hard link")
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", str(root / "conformance"), "--impl", "cpugpu_conformance.reference:CpuGpuBuffer",
         f"--cpugpu-cell-result={tmp_path / 'cell.json'}", "--hypothesis-profile", "ci", "-p", "no:cacheprovider", "-q"],
        cwd=root, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert f"{lock}: the lock file has 2 names (a hard link to another file?)" in proc.stdout + proc.stderr
    assert precious.read_text() == "keep me\n" and os.stat(precious).st_nlink == 2
    assert not (tmp_path / "cell.json").exists()


@pytest.mark.fresh_processes  # the lock names the holder's pid: the process the test holds
def test_a_held_lock_is_never_removed_as_stale(tmp_path):
    """A lock whose holder lives is busy, whatever its file looks like; its file is left as it is."""
    path = tmp_path / "cell.json"
    code = ("import sys, time\nfrom cpugpu_conformance import results\n"
            f"with results.exclusive({str(path)!r}):\n    print('held', flush=True)\n    sys.stdin.read()\n")
    holder = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        lock = results.lock_path(path)
        before = lock.read_text()
        for _ in range(3):
            with pytest.raises(results.ResultPathBusy) as refused:
                with results.exclusive(path):
                    pytest.fail("a held lock was taken")
            assert f"(pid {holder.pid}, since " in str(refused.value)
        assert lock.read_text() == before
    finally:
        holder.communicate("", timeout=60)
    assert holder.returncode == 0 and not results.lock_path(path).exists()


def test_the_placeholder_is_never_a_pass(tmp_path):
    placeholder = results.placeholder("torch-2.13.0-cpu", requested={"device": "cpu"})
    assert placeholder.status == "interrupted" and not placeholder.answer().clean
    assert "did not finish: it was killed, or is still running" in placeholder.detail
