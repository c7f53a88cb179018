"""The output folder: every file replaced whole (written under a temporary name beside it and
renamed into place), or refused before anything runs."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

from gpu_checking.outcomes import Refused
from gpu_checking.stop_signals import SIGNALS

LOG_NAMES = {"suite": "suite.log", "proofs": "proofs.log"}
SUMMARY = "summary.txt"


def _what_is(info: os.stat_result, path: Path) -> str:
    mode = info.st_mode
    if stat.S_ISLNK(mode):
        with contextlib.suppress(OSError):
            return f"a symbolic link (to {os.readlink(path)})"
        return "a symbolic link"
    kinds = {stat.S_ISDIR: "a folder", stat.S_ISFIFO: "a FIFO", stat.S_ISSOCK: "a socket",
             stat.S_ISCHR: "a character device", stat.S_ISBLK: "a block device"}
    return next((kind for test, kind in kinds.items() if test(mode)), "not a plain file")


def refuse_unless_replaceable(path: Path) -> None:
    """Nothing at ``path``, or a plain file, which gpu_check replaces whole; anything else (a link,
    a FIFO, a folder, a device) is refused: gpu_check never writes through what is there."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise Refused(f"gpu_check: cannot look at {path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        raise Refused(f"gpu_check: {path} is {_what_is(info, path)}, not a plain file: gpu_check replaces its "
                      "files whole and writes through nothing; remove it or name another output folder")


def refuse_unless_a_result(path: Path) -> None:
    """The result file's name holds nothing, or one of our result files (an earlier check's), which is
    removed before the suite runs: anything else there (notes, another tool's JSON) is refused untouched."""
    from cpugpu_conformance import results

    try:
        results.check_result_path(path)
    except results.NotRegularFile as exc:
        raise Refused(f"gpu_check: {exc}") from None
    except OSError as exc:
        raise Refused(f"gpu_check: cannot look at {path}: {exc.strerror or exc}") from None


def prepare_out(raw: str) -> Path:
    """The output folder, absolute and made, checked before anything runs: writable, and nothing
    but plain files at the names gpu_check writes (the result file's is checked once known)."""
    if not raw:
        raise Refused("gpu_check: the output folder is '' (empty): name one, e.g. python tools/gpu_check.py out")
    try:
        out = Path(raw) if os.path.isabs(raw) else Path.cwd() / raw  # the children run in the checkout
        out.mkdir(parents=True, exist_ok=True)
        out = out.resolve(strict=True)
    except OSError as exc:
        raise Refused(f"gpu_check: cannot make the output folder {raw!r}: {exc.strerror or exc}") from None
    if not out.is_dir():
        raise Refused(f"gpu_check: the output folder {raw!r} is not a folder")
    for name in (*LOG_NAMES.values(), SUMMARY):
        refuse_unless_replaceable(out / name)
    try:
        fd, probe = tempfile.mkstemp(dir=out, prefix=".gpu_check.")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise Refused(f"gpu_check: cannot write in the output folder {str(out)!r}: {exc.strerror or exc}") from None
    return out


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _new_beside(path: Path):
    """A new file in ``path``'s folder under a temporary name (created exclusively: never through a
    link), with the permissions a plain open would give; returns (file object, its path)."""
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    except OSError as exc:
        raise Refused(f"gpu_check: cannot write {path}: {exc.strerror or exc}") from None
    os.fchmod(fd, 0o666 & ~_umask())
    return os.fdopen(fd, "wb"), Path(tmp)


def _into_place(tmp: Path, path: Path) -> None:
    try:
        os.replace(tmp, path)  # replaces a link or FIFO planted since the check, never what it points to
    except OSError as exc:
        raise Refused(f"gpu_check: cannot put {path.name} in place: {exc.strerror or exc}; "
                      f"what was written is in {tmp.name}") from None


def write_whole(path: Path, text: str) -> None:
    """``text`` into ``path``, atomically: a reader sees the old file or the new one."""
    with SIGNALS.deferred():
        out, tmp = _new_beside(path)
        try:
            with out:
                out.write(text.encode())
        except BaseException:
            tmp.unlink()
            raise
        _into_place(tmp, path)


class StepLog:
    """A step's log, written under a temporary name beside its own and renamed into place at the end."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with SIGNALS.deferred():
            self.file, self.tmp = _new_beside(path)

    def write(self, text: str) -> None:
        self.file.write(text.encode())
        self.file.flush()

    def finish(self, last_line: str) -> None:
        with SIGNALS.deferred():
            with self.file:
                self.write(f"\n{last_line}\n")
            _into_place(self.tmp, self.path)
