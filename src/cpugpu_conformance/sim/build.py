"""Building the sim backend: torch's own headers, torch.utils.cpp_extension, a cache per torch build.

The shared library is built on first use into a cache outside the checkout, one folder per torch
version, C++ ABI and Python (a different torch never loads another's build), and reused after:
cpp_extension rebuilds only when a source or flag changes. Nothing is downloaded. What is missing
for a build (a C++ compiler, ninja, torch's headers) is one line, before anything runs.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

SOURCES = ("memory.cpp", "streams.cpp", "guard.cpp", "kernels.cpp")
CSRC = Path(__file__).with_name("csrc")
LIBRARY = "cpugpu_sim"
# Where the builds go: $CPUGPU_SIM_CACHE, else $XDG_CACHE_HOME (or ~/.cache)/cpugpu-conformance/sim.
CACHE_ENV = "CPUGPU_SIM_CACHE"


class BuildError(RuntimeError):
    """The backend cannot be built here; the message is one line saying what is missing or what failed."""


def cache_root() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "cpugpu-conformance" / "sim"


def build_key() -> str:
    """One build per torch version, C++ ABI and Python: torch-2.13.0+cu130-cxx11abi1-cp311."""
    import torch

    abi = int(bool(torch._C._GLIBCXX_USE_CXX11_ABI))
    return f"torch-{torch.__version__}-cxx11abi{abi}-cp{sys.version_info.major}{sys.version_info.minor}"


def build_dir() -> Path:
    return cache_root() / build_key()


def compiler() -> str:
    return os.environ.get("CXX") or "c++"


def _cpp_extension():
    """torch.utils.cpp_extension, imported without its warning that a CPU machine has no CUDA runtime
    (sim needs none)."""
    import logging

    quiet = logging.getLogger("torch.utils.cpp_extension")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        from torch.utils import cpp_extension
    finally:
        quiet.setLevel(level)
    return cpp_extension


def _ninja_beside_python() -> None:
    """ninja installed in this environment (pip install ninja) is found even when its bin folder is not
    on PATH (a cell runs its environment's python by path): cpp_extension looks on PATH only."""
    here = Path(sys.executable).parent
    if shutil.which("ninja") is None and (here / "ninja").is_file():
        os.environ["PATH"] = f"{here}{os.pathsep}{os.environ.get('PATH', '')}"


def missing_tools() -> str | None:
    """What this machine lacks to build the backend, in one line; None when nothing is missing."""
    _ninja_beside_python()
    try:
        cpp_extension = _cpp_extension()
    except ImportError as exc:  # it imports setuptools, which uv-made environments lack
        return f"sim: torch.utils.cpp_extension cannot be imported ({exc}; pip install setuptools)"

    if shutil.which(compiler()) is None:
        return f"sim: no C++ compiler ({compiler()!r} is not on PATH; set CXX or install g++): the simulated device is built here"
    if not cpp_extension.is_ninja_available():
        return "sim: ninja is not installed (pip install ninja): torch.utils.cpp_extension builds with it"
    headers = Path(cpp_extension.include_paths()[0]) / "ATen" / "detail" / "PrivateUse1HooksInterface.h"
    if not headers.is_file():
        return f"sim: this torch has no C++ headers for a PrivateUse1 backend ({headers} is missing)"
    return None


def build(verbose: bool = False) -> Path:
    """Build (or find in the cache) the backend and load it into this process; its path."""
    why = missing_tools()
    if why:
        raise BuildError(why)
    cpp_extension = _cpp_extension()

    folder = build_dir()
    folder.mkdir(parents=True, exist_ok=True)
    try:
        cpp_extension.load(
            name=LIBRARY,
            sources=[str(CSRC / name) for name in SOURCES],
            build_directory=str(folder),
            extra_cflags=["-O2", "-Wno-unused-parameter"],
            is_python_module=False,
            verbose=verbose,
        )
    except Exception as exc:  # the compiler's output can be long: it goes to a file, one line comes back
        log = folder / "build-error.log"
        log.write_text(f"{type(exc).__name__}: {exc}\n")
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        last = next((line for line in lines if "error:" in line), lines[-1] if lines else type(exc).__name__)
        raise BuildError(f"sim: building the simulated device failed ({last[:200]}); the compiler's "
                         f"output is in {log}") from None
    (folder / "build-error.log").unlink(missing_ok=True)  # an earlier failure's output no longer applies
    return folder / f"{LIBRARY}.so"
