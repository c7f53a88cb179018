"""Safe file I/O for result files and the reports made from them, and one writer at a time.

Reading: regular files only, under a size cap, strict UTF-8 JSON (no duplicate keys); every
failure is one ResultFileError line naming the file. Writing: atomically (a temporary file
renamed into place), never over a FIFO, device or folder, and a result file only at a new path
or over one of ours (``check_result_path``). ``exclusive`` holds a lock beside a result
file for a whole run. ``now()`` is the project's one clock for timestamps.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import json
import math
import os
import re
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .text import first_line, one_line

# The largest result files a failing run writes, measured (issue 22; the shipped suite, ci
# profile, torch 2.13 on a CPU-only machine, 59 tests; a GPU machine runs about twice as many):
#   the reference class, every promise passing            39 kB   875 JSON values
#   a class breaking every promise (failures, reproducers) 228 kB 1,110 values
#   a class raising a 100 kB message in every call        1.2 MB  (messages cut to 20,000 characters)
#   the same with 4-byte UTF-8 characters                 4.6 MB  (the most bytes a kept character takes)
# So about 2.5 MB for the loudest ASCII failures on a GPU machine: 4 MiB leaves 1.6x over that
# and 8x over a GPU run that breaks every promise. A result that would not fit (wide characters,
# a team's parametrized suite) is cut to fit when written (model.fit), so every file the tools
# write, they can read; a reader's memory is bounded by the cap, not by what a file claims.
MAX_FILE_BYTES = 4 * 1024 * 1024
# JSON values (objects, arrays, strings, numbers...) in a result: about 2,300 on a GPU machine
# for a failing run. A file of many tiny values costs a reader ~100 bytes of memory per byte
# read, so they are counted, and refused over this, before anything is parsed.
MAX_VALUES = 100_000
# What a result file says it is (its "schema" key): the writers replace only a file that says so.
RESULT_SCHEMA_ID = "cpugpu-conformance/cell-result"


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


def json_of(data: bytes, source: str | os.PathLike[str], *, max_values: int = MAX_VALUES) -> Any:
    """Parse UTF-8 JSON bytes, turning every way it can fail into one ResultFileError line.

    More than ``max_values`` values is refused before parsing: the memory a parse takes is
    bounded by the size cap and this, not by how small the values a file packs are.
    """
    values = count_values(data)
    if values > max_values:
        raise ResultFileError(f"{source}: not a cell result: {values:,} JSON values, over the {max_values:,} "
                              "a result can have")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ResultFileError(f"{source}: not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})") from None
    try:
        return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float,
                          object_pairs_hook=_refuse_duplicates)
    except DuplicateKey as exc:
        raise ResultFileError(f"{source}: not strict JSON: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ResultFileError(f"{source}: not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    except RecursionError:
        raise ResultFileError(f"{source}: not a cell result: nested too deeply") from None
    except ValueError as exc:
        raise ResultFileError(f"{source}: not strict JSON: {exc}") from None


# A JSON string, escapes included (the unrolled form: linear, no backtracking).
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')


def count_values(data: bytes) -> int:
    """About how many values JSON bytes hold (each comma, array and object outside strings), counted
    without parsing: a few milliseconds a megabyte, and no more memory than the bytes."""
    bare = _JSON_STRING.sub(b"", data)
    return bare.count(b",") + bare.count(b"[") + bare.count(b"{") + 1


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    """A number too large for a float (1e400) parses as infinity, which no JSON writer can write back."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{one_line(text, 60)} is out of a float's range (it would read as {value})")
    return value


class DuplicateKey(ValueError):
    """An object with a key twice: JSON parsers disagree on which one counts (Python's, the last)."""


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        twice = next(key for key, _ in pairs if key in seen or seen.add(key))  # type: ignore[func-returns-value]
        raise DuplicateKey(f"the key {one_line(repr(twice), 80)} appears twice in one object (which one counts "
                           "depends on the reader): write it once")
    return out


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


class NotOurFile(NotRegularFile):
    """A path a result writer was given holds a file that is not one of our result files (a team's
    notes, a log, another tool's JSON): it is never replaced. The message names the path and what
    it holds."""


def check_result_path(path: str | os.PathLike[str]) -> None:
    """Refuse, before anything is written, a result path that holds anything but one of our
    result files: what ``check_writable`` refuses, and a regular file that is not a cell result
    of this tool (any schema version; an empty file holds nothing to lose). Nothing is changed.

    Every writer of result files goes through here (``exclusive``, ``CellResult.write``), so a
    mistyped ``--cell-result notes.md`` never replaces the user's notes.
    """
    check_writable(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return
    if info.st_size == 0:
        return
    why = _not_ours(path, info)
    if why:
        raise NotOurFile(f"{path}: holds no cell result ({why}): it is left as it is, since a result is written only "
                         "at a new path or over a result file; remove it or choose another path")


def _not_ours(path: str | os.PathLike[str], info: os.stat_result) -> str | None:
    """What is wrong with the regular file at ``path`` as one of our result files; None when it is one."""
    if info.st_size > MAX_FILE_BYTES:
        return f"{info.st_size:,} bytes, more than any result file"
    try:
        value = json_of(read_regular_file(path), path)
    except ResultFileError as exc:
        return str(exc).removeprefix(f"{path}: ")
    except OSError as exc:
        return f"cannot read it: {exc.strerror or exc}"
    if not isinstance(value, dict):
        return "JSON, but not an object"
    said = value.get("schema")
    if said == RESULT_SCHEMA_ID:
        return None
    return "JSON with no \"schema\" key" if said is None else f"JSON of schema {one_line(repr(said), 80)}"


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

    The lock file is made new (O_CREAT|O_EXCL|O_NOFOLLOW): never opened through a link or
    truncated, so nothing planted at its name (a hard or symbolic link to a file someone
    keeps, a FIFO, a device) is ever written. Its holder keeps an flock on it, which a killed
    run releases with its process; the lock file is removed on the way out. One left behind
    by a killed run is stale: it is removed only when it is provably ours and unheld (see
    ``_remove_if_stale``), else the run refuses in one line naming it.
    """
    path = Path(path)
    check_result_path(path)  # nothing, not even the lock, beside a path no writer may replace
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = lock_path(path)
    fd = _take_lock(path, lock)
    try:
        yield path
    finally:
        _release_lock(lock, fd)


# A lock file holds one line ("pid N, since <time>"); a regular file much larger is not one.
_LOCK_MAX_BYTES = 4096
# Attempts at making the lock while other runs race to make or clear it; each loses only to
# a run that made progress, so a few are plenty.
_LOCK_ATTEMPTS = 20


def _take_lock(path: Path, lock: Path) -> int:
    """Make the lock file and hold it: its descriptor, or ResultPathBusy / NotRegularFile."""
    import fcntl

    for _ in range(_LOCK_ATTEMPTS):
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
        except FileExistsError:  # whatever is there (a link included) is judged, never opened for writing
            _remove_if_stale(path, lock)
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # another run is judging our new file as stale: it may remove it
            os.close(fd)
            continue
        if not _names(lock, fd):  # removed (as stale) between our making it and our flock
            os.close(fd)
            continue
        try:
            os.write(fd, f"pid {os.getpid()}, since {now()}\n".encode())
        except BaseException:
            _release_lock(lock, fd)
            raise
        return fd
    raise ResultPathBusy(f"{path}: other runs keep taking and leaving this result file's lock ({lock}); try again")


def _remove_if_stale(path: Path, lock: Path) -> None:
    """Remove a lock file nobody holds; return when the name is free to try again.

    Stale means provably a lock file of ours that no process holds: a regular file with one
    link (no other name would lose its contents), no bigger than a lock line, and no flock on
    it (a holder keeps one until it exits). Anything else is refused in one line naming the
    lock path: a live holder (ResultPathBusy), or something that is not our lock
    (NotRegularFile), which is left exactly as it is.
    """
    import fcntl

    try:
        info = os.lstat(lock)
    except FileNotFoundError:
        return  # its holder just removed it
    _check_lock_file(lock, info)
    try:  # read-only, without following a link or blocking: opening changes nothing
        fd = os.open(lock, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        return
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a symbolic link put there since the look
            raise NotRegularFile(f"{lock}: the lock file is not a regular file (a symbolic link); remove it") from None
        raise
    try:
        opened = os.fstat(fd)
        if (opened.st_dev, opened.st_ino) != (info.st_dev, info.st_ino):
            return  # replaced since the look: judge the new one on the next attempt
        _check_lock_file(lock, opened)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            raise ResultPathBusy(
                f"{path}: another run is writing this result file{f' ({holder})' if holder else ''}; "
                "wait for it or choose another path"
            ) from None
        # Ours to remove: we hold its flock, so no run holds it, and none removes it meanwhile.
        if _names(lock, fd):
            lock.unlink()
    finally:
        os.close(fd)


def _check_lock_file(lock: Path, info: os.stat_result) -> None:
    """Refuse, unopened and untouched, what stands at the lock path and is no lock file of ours."""
    if not stat.S_ISREG(info.st_mode):
        raise NotRegularFile(f"{lock}: the lock file is not a regular file ({_lock_kind(info.st_mode)}); remove it")
    if info.st_nlink != 1:
        raise NotRegularFile(f"{lock}: the lock file has {info.st_nlink} names (a hard link to another file?); "
                             "it is left as it is: remove it")
    if info.st_size > _LOCK_MAX_BYTES:
        raise NotRegularFile(f"{lock}: the lock file holds {info.st_size:,} bytes, more than a lock line: "
                             "it is left as it is: remove it")


def _names(lock: Path, fd: int) -> bool:
    """Whether ``lock`` still names the file open as ``fd``."""
    try:
        named = os.lstat(lock)
    except FileNotFoundError:
        return False
    opened = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (opened.st_dev, opened.st_ino)


def _holder(fd: int) -> str:
    """The holder's line ("pid N, since ..."), read from the open file, never by its name."""
    try:
        text = os.pread(fd, _LOCK_MAX_BYTES, 0).decode("utf-8", "replace")
    except OSError:
        return ""
    return one_line(first_line(text) or "", 200)


def _release_lock(lock: Path, fd: int) -> None:
    """Remove the lock file while still holding it (only if the name is still ours), then let go."""
    try:
        if _names(lock, fd):
            with contextlib.suppress(FileNotFoundError):
                lock.unlink()
    finally:
        os.close(fd)


def _lock_kind(mode: int) -> str:
    return "a symbolic link" if stat.S_ISLNK(mode) else _kind_of(mode)
