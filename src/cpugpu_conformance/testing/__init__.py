"""The CpuGpuBuffer contract as a library of pytest test classes, for a team's own test suite.

    # conftest.py
    pytest_plugins = ["cpugpu_conformance.testing.plugin"]

    # tests/test_our_buffer.py
    from cpugpu_conformance.testing import BufferContractTests

    class TestOurBuffer(BufferContractTests):
        buffer_cls = OurBuffer

Each area of the contract is a class of its own (ShapeAndDtypeTests, ZeroedTests, ...;
`AREAS`), composed into BufferContractTests; `BufferStateMachine` runs the state machine
against a class; `strategies` draws what the tests draw. `MutableStateTests` and
`assert_mutable_state` check the seed's bug (promises 3 and 12) in any object an engine
builds: every tensor reachable from it, by attribute path. The names are imported on first
use, so that enabling the plugin (which imports this package) does not fix the hypothesis
settings of the tests before the project's conftest.py has loaded its own profile.

pytest loads the package as a plugin, so it would rewrite the asserts of every module here. The
modules whose asserts say what broke themselves, or whose functions go into reproducers as they
are written, say PYTEST_DONT_REWRITE in their docstrings instead, each pointing here for why.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "BufferContractTests": "buffer.contract",
    "AREAS": "buffer.contract",
    "ShapeAndDtypeTests": "buffer.construction",
    "ZeroedTests": "buffer.construction",
    "StorageTests": "buffer.construction",
    "MutabilityTests": "buffer.mutability",
    "NumpyViewTests": "buffer.numpy_view",
    "ExoticDtypeTests": "buffer.numpy_view",
    "CopyTests": "buffer.copies",
    "StoragesForLifeTests": "buffer.copies",
    "DeviceTests": "buffer.device_promises",
    "SideEffectTests": "buffer.side_effects",
    "IndependenceTests": "buffer.independence",
    "EngineScaleTests": "buffer.engine_scale",
    "StateMachineTests": "buffer.stateful",
    "BufferStateMachine": "buffer.stateful",
    "BufferTests": "buffer.base",
    "MutableStateTests": "engine.mutable_state",
    "assert_mutable_state": "engine.mutable_state",
}

__all__ = [*_WHERE, "strategies"]


def __getattr__(name: str) -> Any:
    if name == "strategies":
        return importlib.import_module(f"{__name__}.strategies")
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)


def __dir__() -> list[str]:
    return sorted(__all__)
