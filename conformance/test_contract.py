"""The whole contract, against the class --impl names (the reference by default)."""

from __future__ import annotations

from cpugpu_conformance.testing import BufferContractTests


class TestContract(BufferContractTests):
    # conftest.py sets buffer_cls and buffer_import from --impl before the tests run.
    against_impl = True
