"""Safe file I/O for result files and the reports made from them, and one writer at a time.

Reading: regular files only, under a size cap, strict UTF-8 JSON; every failure is one
ResultFileError line naming the file. Writing: atomically (a temporary file renamed into
place), never over a FIFO, device or folder. ``exclusive`` holds a lock beside a result
file for a whole run. ``now()`` is the project's one clock for timestamps.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import json
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# A result file is a few hundred KB; anything near this is not one.
MAX_FILE_BYTES = 16 * 1024 * 1024


class ResultFileError(Exception):
    """A result file that is missing, unreadable, or not a cell result: one line naming it."""



def now() -> str:
    """The time now, UTC, to the second, as ISO 8601: when a run started, when a lock was taken."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


# ---------------------------------------------------------------------------- files


def read_regular_file(path: str | os.PathLike[str], *, max_bytes: int = MAX_FILE_BYTES,
                      what: str = "result file") -> bytes:
    """The bytes of a regular file of at most ``max_bytes``; anything else is a ResultFileError.
    ``what`` names the kind of file in the messages ("no such result file").

    FIFOs and devices are refused before they are opened (opening a FIFO blocks), and
    opened without blocking in case the file changed in between.
    """
    path = Path(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise ResultFileError(f"{path}: no such {what}") from None
    except OSError as exc:
        why = "a symbolic link loop" if exc.errno == errno.ELOOP else (exc.strerror or str(exc))
        raise ResultFileError(f"{path}: cannot read: {why}") from None
    if not stat.S_ISREG(info.st_mode):
        raise ResultFileError(f"{path}: not a regular file ({_kind_of(info.st_mode)})")
    if info.st_size > max_bytes:
        raise ResultFileError(f"{path}: {info.st_size:,} bytes, over the {max_bytes:,}-byte limit for a {what}")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise ResultFileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise ResultFileError(f"{path}: not a regular file")
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ResultFileError(f"{path}: over the {max_bytes:,}-byte limit for a {what}")
    return data


def _kind_of(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a plain file"


def json_of(data: bytes, source: str | os.PathLike[str]) -> Any:
    """Parse UTF-8 JSON bytes, turning every way it can fail into one ResultFileError line."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ResultFileError(f"{source}: not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})") from None
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise ResultFileError(f"{source}: not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    except RecursionError:
        raise ResultFileError(f"{source}: not a cell result: nested too deeply") from None
    except ValueError as exc:
        raise ResultFileError(f"{source}: not strict JSON: {exc}") from None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


class NotRegularFile(OSError):
    """A path a writer was given exists and is not a regular file (a FIFO, a device, a
    directory, a socket): writers never replace one. The message names the path and its kind."""


def check_writable(path: str | os.PathLike[str]) -> None:
    """Refuse, before anything is written, a ``path`` that exists and is not a regular file.

    A path that does not exist yet (a dangling symbolic link included) is fine; a symbolic
    link is judged by what it points to, since that is what a reader opens.
    """
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotRegularFile(f"{path}: a symbolic link loop") from None
        raise
    if not stat.S_ISREG(info.st_mode):
        raise NotRegularFile(f"{path}: not a regular file ({_kind_of(info.st_mode)}); a result is written only to a "
                             "regular file or a new path")


def write_json_atomic(path: str | os.PathLike[str], data: Any) -> Path:
    """Write JSON via a temporary file in the same folder, renamed into place, mode 0644.

    A reader never sees half a file, and a failed write leaves the old file untouched.
    NaN and infinities are refused: strict JSON parsers reject them. A path that is not a
    regular file is refused (NotRegularFile) before anything is written.
    """
    path = Path(path)
    text = json.dumps(data, indent=2, sort_keys=True, allow_nan=False, ensure_ascii=False) + "\n"
    write_text_atomic(path, text)
    return path


def write_text_atomic(path: str | os.PathLike[str], text: str, mode: int = 0o644) -> None:
    path = Path(path)
    # The rename would put a regular file where a FIFO or a device node was (as root,
    # /dev/null): refuse first, and make no temporary file beside such a path either.
    check_writable(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)  # mkstemp makes 0600: a published file must be readable
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# ---------------------------------------------------------------------------- one writer at a time


class ResultPathBusy(Exception):
    """Another run is writing the same result file."""


def lock_path(path: str | os.PathLike[str]) -> Path:
    """The lock file ``exclusive`` holds beside a result file (a killed run leaves it behind)."""
    path = Path(path)
    return path.with_name(f".{path.name}.lock")


@contextlib.contextmanager
def exclusive(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Hold ``.<name>.lock`` beside the result file for the whole run; a second run refuses.

    The lock is an flock, so a killed run releases it with its process; the lock file is
    removed on the way out.
    """
    import fcntl

    path = Path(path)
    check_writable(path)  # nothing, not even the lock, beside a path no writer may replace
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = lock_path(path)
    while True:
        fd = _open_lock(lock)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            holder = ""
            with contextlib.suppress(OSError):
                holder = lock.read_text().strip()
            raise ResultPathBusy(
                f"{path}: another run is writing this result file{f' ({holder})' if holder else ''}; "
                "wait for it or choose another path"
            ) from None
        # The file we locked may have been removed by the previous holder in between.
        try:
            same = os.fstat(fd).st_ino == os.stat(lock).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()}, since {now()}\n".encode())
        yield path
    finally:
        with contextlib.suppress(FileNotFoundError):
            lock.unlink()
        os.close(fd)


def _open_lock(lock: Path) -> int:
    """The lock file, opened (or made) as a regular file of its own: never through a symbolic
    link (the truncation would hit its target) and never a FIFO or device planted there."""
    with contextlib.suppress(FileNotFoundError):  # refused unopened: opening a device can act on it
        mode = os.lstat(lock).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(f"{lock}: the lock file is not a regular file ({_lock_kind(mode)}); remove it")
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(lock, flags, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW: a symbolic link put there since the look
            raise NotRegularFile(f"{lock}: the lock file is not a regular file (a symbolic link); remove it") from None
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):  # replaced between the look and the open
        os.close(fd)
        raise NotRegularFile(f"{lock}: the lock file is not a regular file ({_lock_kind(mode)}); remove it")
    return fd


def _lock_kind(mode: int) -> str:
    return "a symbolic link" if stat.S_ISLNK(mode) else _kind_of(mode)

