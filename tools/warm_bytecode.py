"""Compile, once before the project's tests, the bytecode of what no test changes.

Where PYTHONDONTWRITEBYTECODE is set (it is on the machines this project is built on), nothing
caches compiled code: each of the tests' few hundred subprocesses (a suite run, a cell, a
command) compiles torch's Python anew, and its pytest rewrites the plugin's modules anew, about
3 s of CPU a process and most of what `nox -s tests` spends. This writes those caches once: the
environment's packages and the checkout's src/, conformance/ and tests/ (py_compile, as pip
would at install), then pytest's rewritten modules, by running the suite once in this process.

Every later process reads them; the variable still keeps the tests from writing any, so a test
that writes a module twice within a second never reads the bytecode of its first version.
Python checks each cached file against its source (mtime and size) and compiles anew where the
source changed, so an edit after warming costs time, never correctness.

    python tools/warm_bytecode.py          (nox -s tests and nox -s quick run it first)
"""

from __future__ import annotations

import compileall
import importlib.util
import os
import re
import struct
import sys
import sysconfig
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CHECKOUT = [REPO / "src", REPO / "conformance", REPO / "tests"]
# What torch brings that no process of the tests imports (tests/test_warm_bytecode.py checks it:
# the suite, the tools, sim's build): over a third of the environment's files, sympy alone 1,500,
# and over a third of the warm-up (26 s -> 15 s in `nox -s quick`, on 2 cores). A process that does
# import one compiles what it uses, as before: time, never correctness.
NOT_IMPORTED = ("sympy", "networkx", "mpmath", "triton", "torch/_inductor", "torch/_dynamo", "torch/onnx",
                "torch/distributed/fsdp", "torch/distributed/tensor", "torch/distributed/checkpoint",
                "torch/distributed/elastic", "torch/distributed/_shard")


def compile_sources() -> None:
    """The environment's installed packages (less NOT_IMPORTED) and the checkout's Python, into
    __pycache__/. A file that does not compile, or a folder it cannot write, is passed over: the
    tests report the one, and the other only costs time."""
    purelib = Path(sysconfig.get_paths()["purelib"])
    for folder, rx in ((purelib, not_imported(purelib)), *((folder, None) for folder in CHECKOUT)):
        # Checked here, compiled in parallel only where much is stale: handing compileall's workers
        # each of an environment's 20,000 files to check costs 4 s, reading their headers here 0.4 s
        # (nox reuses the environment, so after its first session little or nothing is stale).
        stale = stale_sources(folder, rx)
        if len(stale) > FEW:
            compileall.compile_dir(folder, quiet=2, workers=0, rx=rx)
        for source in stale if len(stale) <= FEW else ():
            compileall.compile_file(source, quiet=2)


FEW = 200  # stale files compiled one by one here; more go to compileall's workers, one per core


def stale_sources(folder: Path, rx: re.Pattern[str] | None) -> list[str]:
    """The .py files under ``folder`` (less what ``rx`` matches) without bytecode compiled from them
    as they are now, by compileall's own test: the magic number and the source's mtime in the header
    of the cached file. (One that does not compile, torch's Python 3.12 file say, is always here.)"""
    stale = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for source in (os.path.join(root, name) for name in files if name.endswith(".py")):
            if rx is not None and rx.search(source):
                continue
            try:
                mtime = int(os.stat(source).st_mtime)
                with open(importlib.util.cache_from_source(source), "rb") as cached:
                    fresh = cached.read(12) == struct.pack("<4sLL", importlib.util.MAGIC_NUMBER, 0, mtime & 0xFFFF_FFFF)
            except OSError:
                fresh = False
            if not fresh:
                stale.append(source)
    return stale


def not_imported(purelib: Path) -> re.Pattern[str]:
    """The paths under ``purelib`` of NOT_IMPORTED's folders, for compileall to pass over."""
    folders = (re.escape(str(purelib.joinpath(*name.split("/"))) + os.sep) for name in NOT_IMPORTED)
    return re.compile("^(?:" + "|".join(folders) + ")")


def rewrite_plugin() -> int:
    """Run the suite on the reference, one promise, in this process: pytest caches each module
    it rewrites for assertions (the suite's tests, the plugin's package) beside its source."""
    import pytest

    with tempfile.TemporaryDirectory(prefix="warm-bytecode-") as tmp:
        return pytest.main([
            str(REPO / "conformance"), "-q", "-p", "no:cacheprovider", "--hypothesis-profile=ci",
            "--promise", "3", "--device", "cpu", "--cell-result", str(Path(tmp) / "cell.json"),
        ])


INTERRUPTED = 130  # as a shell reports Ctrl-C: nox stops there, and runs no tests


def main() -> int:
    sys.dont_write_bytecode = False  # for pytest's rewrite cache; py_compile writes regardless
    try:
        compile_sources()
        code = rewrite_plugin()
    except KeyboardInterrupt:
        print("warm_bytecode: interrupted", file=sys.stderr)
        return INTERRUPTED
    if code == pytest_interrupted():
        print("warm_bytecode: interrupted", file=sys.stderr)
        return INTERRUPTED
    if code != 0:
        print(f"warm_bytecode: the suite on the reference exited {code}; the tests will say why", file=sys.stderr)
    return 0  # warming is an optimisation: whatever else went wrong, the tests run and report it


def pytest_interrupted() -> int:
    import pytest

    return int(pytest.ExitCode.INTERRUPTED)


if __name__ == "__main__":
    sys.exit(main())
