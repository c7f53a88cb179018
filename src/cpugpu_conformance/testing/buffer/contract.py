"""BufferContractTests: every area's tests in one class, the whole contract."""

from __future__ import annotations

from .construction import ShapeAndDtypeTests, StorageTests, ZeroedTests
from .copies import CopyTests, StoragesForLifeTests
from .device_promises import DeviceTests
from .engine_scale import EngineScaleTests
from .independence import IndependenceTests
from .mutability import MutabilityTests
from .numpy_view import ExoticDtypeTests, NumpyViewTests
from .side_effects import SideEffectTests
from .stateful import StateMachineTests

# In the contract's order (CONTRACT.md), then the tests that cross promises.
AREAS = (
    ShapeAndDtypeTests,
    ZeroedTests,
    MutabilityTests,
    StorageTests,
    NumpyViewTests,
    ExoticDtypeTests,
    CopyTests,
    StoragesForLifeTests,
    DeviceTests,
    SideEffectTests,
    IndependenceTests,
    EngineScaleTests,
    StateMachineTests,
)


class BufferContractTests(*AREAS):  # type: ignore[misc]
    """The whole CpuGpuBuffer contract. Subclass it in your tests and set ``buffer_cls``:

        class TestOurBuffer(BufferContractTests):
            buffer_cls = OurBuffer

    with ``pytest_plugins = ["cpugpu_conformance.testing.plugin"]`` in your conftest.py.
    """
