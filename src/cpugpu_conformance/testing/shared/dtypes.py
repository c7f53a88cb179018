"""What the *installed* torch can do with each of its dtypes, probed once per process.

The suite draws dtypes from here rather than from a fixed list, so a dtype that a new
torch release adds is covered the day that release is tested.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass

import torch

from .helpers import sync

# Above every engine size the suite draws (strategies.ENGINE_SIZES), in elements.
LARGE = (1 << 20) + 8


@dataclass(frozen=True)
class DtypeInfo:
    dtype: torch.dtype
    name: str  # "float32", without the "torch." prefix
    numpy: str | None  # NumPy dtype name of .numpy(), None when torch refuses
    byte_addressable: bool  # element is whole bytes, so a uint8 view can read and write it
    copyable: bool  # copy_ into another tensor of the dtype works
    fillable: bool  # fill_ / index assignment work
    zeros_empty: bool  # torch.zeros can make a zero-size tensor (it cannot for bits and sub-byte kinds)
    zeros_large: bool  # torch.zeros can make an engine-scale tensor (bits kinds fall back to an unimplemented fill)

    def __repr__(self) -> str:  # hypothesis prints draws: "torch.float32" reads better than the fields
        return str(self.dtype)


def _settled(device: str) -> None:
    """Wait for what the probe queued on ``device``. An accelerator may run a kernel after the call
    returns (sim runs each on its stream's worker, and a dtype's missing kernel fails there): its
    failure would surface at the next wait, in the next dtype's probe, and the dtype that failed
    would read as fillable (torch 2.14's bcomplex32 on sim: fill_ has no CPU kernel for it)."""
    sync(torch.device(device))


def _probe(dtype: torch.dtype, device: str) -> DtypeInfo | None:
    name = str(dtype).removeprefix("torch.")
    try:
        t = torch.zeros(2, dtype=dtype, device=device)
        _settled(device)
    except Exception:  # quantized dtypes cannot even be made with zeros
        return None
    try:
        numpy_name: str | None = t.cpu().numpy().dtype.name
    except Exception:
        numpy_name = None
    try:
        t.view(torch.uint8)
        byte_addressable = True
    except Exception:
        byte_addressable = False
    try:
        torch.zeros(2, dtype=dtype, device=device).copy_(t)
        torch.zeros(2, dtype=dtype).copy_(t)  # and across devices
        _settled(device)
        copyable = True
    except Exception:
        copyable = False
    try:
        t.fill_(1)
        t[0] = 0
        _settled(device)
        fillable = True
    except Exception:
        fillable = False
    try:
        torch.zeros(0, dtype=dtype, device=device)
        _settled(device)
        zeros_empty = True
    except Exception:
        zeros_empty = False
    try:
        torch.zeros(LARGE, dtype=dtype, device=device)
        _settled(device)
        zeros_large = True
    except Exception:
        zeros_large = False
    return DtypeInfo(dtype, name, numpy_name, byte_addressable, copyable, fillable, zeros_empty, zeros_large)


@functools.cache
def all_dtypes(device: str = "cpu") -> tuple[DtypeInfo, ...]:
    """Every dtype the running torch exposes and can allocate with torch.zeros on `device`, by name."""
    found = {v for v in vars(torch).values() if isinstance(v, torch.dtype)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # experimental/deprecated dtypes warn on creation
        infos = [_probe(d, device) for d in sorted(found, key=str)]
    return tuple(i for i in infos if i is not None)


def by_name(name: str, device: str = "cpu") -> DtypeInfo:
    for info in all_dtypes(device):
        if info.name == name:
            return info
    raise KeyError(name)


def numpy_dtypes(device: str = "cpu") -> tuple[DtypeInfo, ...]:
    """Dtypes NumPy can represent: promise 5 applies."""
    return tuple(i for i in all_dtypes(device) if i.numpy is not None)


def non_numpy_dtypes(device: str = "cpu") -> tuple[DtypeInfo, ...]:
    """Dtypes NumPy cannot represent, bfloat16 included: promises 6 and 7 apply."""
    return tuple(i for i in all_dtypes(device) if i.numpy is None)


def byte_dtypes(device: str = "cpu") -> tuple[DtypeInfo, ...]:
    """Dtypes whose contents can be written and compared through a uint8 view, and copied."""
    return tuple(i for i in all_dtypes(device) if i.byte_addressable and i.copyable)


def fillable_dtypes(device: str = "cpu") -> tuple[DtypeInfo, ...]:
    """Dtypes that take fill_ and index assignment: the in-place ops promise 3 exercises."""
    return tuple(i for i in all_dtypes(device) if i.fillable)


# The dtypes torch.set_default_dtype can make the default, first: the ones a caller uses most.
DEFAULT_STAND_INS = ("float32", "float64", "float16")


def simplest_first(infos: tuple[DtypeInfo, ...]) -> list[DtypeInfo]:
    """The default's stand-ins, then the dtypes NumPy has, then the rest: hypothesis shrinks a
    draw towards the first, so a failure's reproducer names the most ordinary dtype that fails
    (float32 before bcomplex32)."""

    def rank(info: DtypeInfo) -> tuple[int, bool, str]:
        stand_in = DEFAULT_STAND_INS.index(info.name) if info.name in DEFAULT_STAND_INS else len(DEFAULT_STAND_INS)
        return stand_in, info.numpy is None, info.name

    return sorted(infos, key=rank)
