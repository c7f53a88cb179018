"""Publishing the report: all or nothing.

Every output is rendered before anything is written, each is staged beside its target,
and the targets are replaced only when all staged files are complete; a failure on the
way puts the previous outputs back. A target that is a folder, a FIFO or a device is
refused before anything is written.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import stat
import tempfile
from pathlib import Path

from ..results import one_line


class ReportError(Exception):
    """The report cannot be made at all (no results, unwritable output): exit 2.

    ``skipped``: the result files left out on the way ({"file", "reason"} each), so that a
    folder whose every file is malformed still names each culprit, one line each.
    """

    def __init__(self, message: str, skipped: list[dict[str, str]] | None = None) -> None:
        super().__init__(message)
        self.skipped = list(skipped or ())


class _Blocked(OSError):
    """An output path that is in the way: found before anything is written."""


def publish(out_dir: Path, files: dict[str, bytes]) -> None:
    """Put ``files`` into out_dir so that a failure anywhere leaves the previous report intact.

    Why file by file and not a swapped directory: ``--out`` may be the results folder
    itself, or a folder where a user keeps other files, or one a web server or a shell is
    sitting in. Swapping the folder would mean copying everything else in it (slow, and
    lossy: ownership, links, open handles) and leaves an instant with no folder at all. So
    only the three outputs are touched, in three steps:

    1. check: every output that exists is a writable regular file (a directory named
       COMPAT.md, or a read-only index.html, stops the report before anything is written);
    2. stage: each file is written in full, fsynced and set to 0644, under a hidden
       temporary name in out_dir (same file system, so the rename below is atomic);
    3. commit: each previous output is kept under a hidden backup name (a hard link, so
       the old file never leaves its path), then each staged file is renamed over its
       output. If any rename fails, the ones done are rolled back from the backups.

    A reader sees each file either whole-old or whole-new; only a process killed in the
    middle of step 3 (three renames) can leave a mix, with the backups beside it.
    """
    created = not out_dir.exists()
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        _check_writable(out_dir, files)
        staged = _stage(out_dir, files)
        try:
            _commit(out_dir, staged)
        finally:
            for tmp in staged.values():
                tmp.unlink(missing_ok=True)
    except OSError as exc:
        if created:
            with contextlib.suppress(OSError):
                out_dir.rmdir()  # only if empty: it was ours
        path = exc.filename2 or exc.filename  # for a rename, the destination says more
        where = f" ({one_line(path)})" if path else ""
        raise ReportError(f"cannot write the report to {one_line(out_dir)}: {exc.strerror or exc}{where}; "
                          "the previous report is left as it was") from None
    _fsync_dir(out_dir)


def _check_writable(out_dir: Path, files: dict[str, bytes]) -> None:
    if not out_dir.is_dir():
        raise _Blocked(f"{one_line(out_dir)} is not a directory")
    for name in files:
        target = out_dir / name
        try:
            info = target.stat()
        except FileNotFoundError:
            continue
        if stat.S_ISDIR(info.st_mode):
            raise _Blocked(f"{one_line(target)} is a directory")
        if not stat.S_ISREG(info.st_mode):
            raise _Blocked(f"{one_line(target)} is not a regular file")
        # Mode bits as well as access(): root may write anything, but a file someone made
        # read-only is one they meant to keep.
        if not os.access(target, os.W_OK) or not info.st_mode & 0o222:
            raise _Blocked(f"{one_line(target)} is read-only")


def _stage(out_dir: Path, files: dict[str, bytes]) -> dict[str, Path]:
    staged: dict[str, Path] = {}
    try:
        for name, content in files.items():
            fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".new", dir=out_dir)
            staged[name] = Path(tmp)
            with os.fdopen(fd, "wb") as fh:
                os.fchmod(fh.fileno(), 0o644)  # mkstemp makes 0600: a published file must be readable
                fh.write(content)
                fh.flush()
                os.fsync(fh.fileno())
    except BaseException:
        for staged_path in staged.values():
            staged_path.unlink(missing_ok=True)
        raise
    return staged


def _keep_previous(target: Path) -> Path | None:
    """A hidden second name for the current output, or None when there is none."""
    if not target.exists():
        return None
    backup = target.with_name(f".{target.name}.previous-{secrets.token_hex(4)}")
    try:
        os.link(target, backup)
    except OSError:  # a file system without hard links
        shutil.copy2(target, backup)
    return backup


def _commit(out_dir: Path, staged: dict[str, Path]) -> None:
    backups: dict[str, Path | None] = {}
    done: list[str] = []
    try:
        for name in staged:
            backups[name] = _keep_previous(out_dir / name)
        for name, tmp in staged.items():
            os.replace(tmp, out_dir / name)
            done.append(name)
    except BaseException:
        for name in reversed(done):
            with contextlib.suppress(OSError):
                backup = backups.get(name)
                if backup is None:
                    (out_dir / name).unlink()
                else:
                    os.replace(backup, out_dir / name)
        raise
    finally:
        for backup in backups.values():
            if backup is not None:
                backup.unlink(missing_ok=True)


def _fsync_dir(path: Path) -> None:
    """Make the renames durable; not every platform or file system can, which is fine."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

