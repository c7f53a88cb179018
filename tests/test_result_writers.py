"""The result writers and the lock beside a result: only a regular file, or a path that does not
exist yet, is ever written; a FIFO, a device node, a directory is refused untouched, and the lock
never follows a symbolic link. (FIFOs and links made here stand in for device nodes: nothing
here opens or could replace /dev/null.)"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import result_factory as rf

from cpugpu_conformance import results

pytestmark = pytest.mark.skipif(os.name != "posix", reason="FIFOs and symbolic links")


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _targets(tmp_path: Path) -> dict[str, Path]:
    fifo = _fifo(tmp_path / "fifo")
    folder = tmp_path / "folder"
    folder.mkdir()
    link = tmp_path / "link-to-fifo"
    link.symlink_to(fifo)
    return {"fifo": fifo, "directory": folder, "link to a fifo": link}


def _kind(path: Path) -> int:
    return stat.S_IFMT(os.stat(path).st_mode)


@pytest.mark.parametrize("target", ["fifo", "directory", "link to a fifo"])
@pytest.mark.parametrize("writer", ["write_json_atomic", "write_atomic", "CellResult.write"])
def test_writers_refuse_what_is_not_a_regular_file(tmp_path, target, writer):
    path = _targets(tmp_path)[target]
    before = sorted(p.name for p in tmp_path.iterdir()), _kind(path)
    result = results.CellResult(rf.completed("2.13.0"))
    write = {
        "write_json_atomic": lambda: results.write_json_atomic(path, {"a": 1}),
        "write_atomic": lambda: results.write_atomic(path, result),
        "CellResult.write": lambda: result.write(path),
    }[writer]
    with pytest.raises(results.NotRegularFile) as refused:
        write()
    assert str(path) in str(refused.value) and "not a regular file" in str(refused.value)
    assert isinstance(refused.value, OSError), "callers that handle a failed write handle this one"
    after = sorted(p.name for p in tmp_path.iterdir()), _kind(path)
    assert after == before, "the path was replaced, or a temporary file was left beside it"


def test_writers_still_write_a_new_path_a_regular_file_and_a_dangling_link(tmp_path):
    new = tmp_path / "sub" / "new.json"
    results.write_json_atomic(new, {"a": 1})
    results.write_json_atomic(new, {"a": 2})  # a regular file is replaced
    assert results.json_of(new.read_bytes(), new) == {"a": 2}
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    results.write_json_atomic(dangling, {"a": 3})
    assert results.json_of(dangling.read_bytes(), dangling) == {"a": 3}


@pytest.mark.parametrize("target", ["fifo", "directory", "link to a fifo"])
def test_exclusive_refuses_before_making_its_lock(tmp_path, target):
    path = _targets(tmp_path)[target]
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(results.NotRegularFile):
        with results.exclusive(path):
            pytest.fail("the path was held")
    assert sorted(p.name for p in tmp_path.iterdir()) == before, "a lock file was made beside it"


def test_the_lock_never_follows_a_symbolic_link(tmp_path):
    # The lock is truncated when taken: through a link it would empty the link's target.
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me\n")
    path = tmp_path / "cell.json"
    results.lock_path(path).symlink_to(precious)
    with pytest.raises(results.NotRegularFile) as refused:
        with results.exclusive(path):
            pytest.fail("the lock was taken through a link")
    assert "symbolic link" in str(refused.value)
    assert precious.read_text() == "keep me\n"
    assert results.lock_path(path).is_symlink(), "the refusal removed what it refused"


def test_a_lock_path_that_is_a_fifo_is_refused_unopened(tmp_path):
    path = tmp_path / "cell.json"
    _fifo(results.lock_path(path))
    with pytest.raises(results.NotRegularFile) as refused:
        with results.exclusive(path):
            pytest.fail("the lock was taken on a FIFO")
    assert "a FIFO" in str(refused.value)
    assert stat.S_ISFIFO(os.lstat(results.lock_path(path)).st_mode)


# --- a path that holds anything but one of our result files is refused untouched (issue 28, item 6)

NOT_OURS = {
    "notes": b"# my notes\n\nkeep these\n",
    "other JSON": b'{"name": "my-package", "version": "1.0"}\n',
    "JSON array": b"[1, 2, 3]\n",
    "not UTF-8": b"\xff\xfe\x00notes",
}


@pytest.mark.parametrize("content", list(NOT_OURS.values()), ids=list(NOT_OURS))
def test_the_lock_refuses_a_file_that_is_not_a_result_and_leaves_it_as_it_is(tmp_path, content):
    path = tmp_path / "notes.md"
    path.write_bytes(content)
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(results.NotOurFile) as refused:
        with results.exclusive(path):
            pytest.fail("a path that holds someone's file was held")
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"{path}: holds no cell result (")
    assert "left as it is" in message and isinstance(refused.value, results.NotRegularFile)
    assert path.read_bytes() == content
    assert sorted(p.name for p in tmp_path.iterdir()) == before, "a lock file was made beside it"


def test_the_lock_takes_a_new_path_an_empty_file_and_one_of_our_results(tmp_path):
    ours = tmp_path / "cell.json"
    results.placeholder("torch-2.13.0").write(ours)
    empty = tmp_path / "empty.json"
    empty.touch()
    for path in (tmp_path / "new.json", empty, ours):
        with results.exclusive(path):
            results.CellResult(rf.completed("2.13.0")).write(path)
        assert results.CellResult.load(path).status == "completed"


def _pytest(tmp_path: Path, *args: str):

    from suite_runner import outside_env

    (tmp_path / "test_nothing.py").write_text("def test_one():\n    pass\n")
    import forkserver

    return forkserver.run_python(["-m", "pytest", "-p", "no:cacheprovider", "-q", *args], cwd=tmp_path,
                                 env=outside_env(), timeout=300)


@pytest.mark.parametrize("extra", [["--bogus"], []], ids=["refused-command-line", "accepted-command-line"])
def test_a_users_file_at_the_cell_result_path_is_never_replaced(tmp_path, extra):
    """`--cpugpu-cell-result notes.md --bogus`: pytest refuses the command line, and the plugin, which
    marks the path before pytest has accepted it, used to replace the user's notes with an error result."""
    notes = tmp_path / "notes.md"
    notes.write_text("# release notes\n")
    proc = _pytest(tmp_path, "--cpugpu-cell-result", "notes.md", *extra)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert notes.read_text() == "# release notes\n"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "__pycache__") == ["notes.md", "test_nothing.py"]
    if not extra:  # the run's own start refuses it in one line, naming the path
        line = next(line for line in proc.stderr.splitlines() if "notes.md" in line)
        assert "--cpugpu-cell-result" in line and "holds no cell result" in line, proc.stderr
