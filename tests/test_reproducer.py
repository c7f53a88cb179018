"""The reproducer builder (testing/reproducer.py): a script made of the source of the functions a
scenario called, and of every library function those call, with the drawn values as literals.

The script must run on its own (torch, numpy and the class only): each function once and before
its use, a device's own helpers written out as that device's functions, the modules they read
imported at the top, `make()` as the test built the buffer (the constructor, or an adapter).
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import types

import numpy as np
import pytest
import torch
from reproducer_parts import definitions, script_for, suite_functions, top_level_defs
from suite_runner import run_script

from cpugpu_conformance import devices, promises
from cpugpu_conformance.reference import CpuGpuBuffer
from cpugpu_conformance.testing.buffer import mutability, stateful
from cpugpu_conformance.testing.buffer.base import BufferTests
from cpugpu_conformance.testing.buffer.device_promises import (
    copy_joins_the_caller_stream,
    copy_lands_in_order,
    copy_returns_before_queued_work,
)
from cpugpu_conformance.testing.shared import checks, contexts, helpers
from cpugpu_conformance.testing.shared.reproducer import Name, Record, Scenario, import_line, literal

OK = "ok: the promise held"
REFERENCE = import_line(CpuGpuBuffer)
# Promise 10 (the functions that stall a stream or refuse a synchronize) applies only where the
# registry has a way to do so: CUDA (promises.APPLIES_TO).
PROMISE_10 = {copy_lands_in_order, copy_returns_before_queued_work, copy_joins_the_caller_stream}


def scenario(device: str = "cpu", impl_import: str = REFERENCE, **values) -> tuple[Record, Scenario]:
    record = Record(impl_import)
    values = {"size": (4, 3), "dtype": torch.float32, "pin_memory": False, "with_numpy": True, **values}
    return record, Scenario(record, "2", device, factory=CpuGpuBuffer, **values)


def function_bodies(script: str) -> dict[str, str]:
    tree = ast.parse(script)
    return {node.name: ast.get_source_segment(script, node) for node in tree.body if isinstance(node, ast.FunctionDef)}


def assert_well_formed(script: str) -> None:
    """Python; each function defined once, before the steps, and after every
    function of the script it calls; the imports at the top, none inside a function but the
    standard library's (cuda_forbid_sync's warnings)."""
    tree = ast.parse(compile(script, "<reproducer>", "exec", ast.PyCF_ONLY_AST))
    names = top_level_defs(script)
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    kinds = [type(node) for node in tree.body]
    # The steps start where the scenario binds its first value, the device (ADAPTER = Adapter() is above).
    first_run = next(i for i, node in enumerate(tree.body) if isinstance(node, ast.Assign)
                     and getattr(node.targets[0], "id", None) == "device")
    assert all(k not in (ast.FunctionDef, ast.ClassDef) for k in kinds[first_run:]), "a definition after the steps"
    last_import = max(i for i, k in enumerate(kinds) if k in (ast.Import, ast.ImportFrom))
    assert all(k in (ast.Import, ast.ImportFrom) for k in kinds[:last_import + 1]), "an import below a definition"
    defined: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            called = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and n.id in names and n.id != node.name}
            assert called <= defined, f"{node.name} uses {sorted(called - defined)} before they are defined"
            defined.add(node.name)
            inner = [n for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom))]
            assert all(alias.name in ("warnings",) for n in inner for alias in n.names), ast.dump(node)[:200]


# --- every library function a check calls, transitively, once and before use


def test_a_check_comes_with_the_library_functions_it_calls_transitively():
    record, sc = scenario()
    sc.call(Name("make"), into="buf")
    sc.call(checks.zeroed)
    script = record.reproducer()
    assert top_level_defs(script) == ["make", "byte_view", "raw", "sync", "zeroed"]  # raw -> byte_view; zeroed -> raw, sync
    assert_well_formed(script)
    assert script.rstrip().splitlines()[-3:] == ["buf = make()", "zeroed(buf, device)", f'print("{OK}")']


def test_a_function_called_by_two_checks_is_written_once():
    record, sc = scenario()
    sc.call(Name("make"), into="buf")
    sc.call(checks.zeroed)
    sc.call(checks.two_storages)
    script = record.reproducer()
    assert top_level_defs(script) == ["make", "byte_view", "raw", "sync", "zeroed", "fill_bytes", "separate_storages",
                                      "two_storages"]
    assert_well_formed(script)


def test_the_functions_are_their_source_as_the_suite_runs_them():
    record, sc = scenario()
    sc.call(Name("make"), into="buf")
    sc.call(checks.partial_copy, Name("buf"), "copy_to_gpu", 2, torch.float32, Name("device"))
    bodies = function_bodies(record.reproducer())
    for func in (checks.partial_copy, helpers.fill_bytes, helpers.raw, helpers.byte_view):
        assert bodies[func.__name__] == textwrap.dedent(inspect.getsource(func)).strip(), func.__name__
    assert "partial_copy(buf, 'copy_to_gpu', 2, torch.float32, device)" in record.reproducer()


# --- a device's own helpers


def test_on_the_cpu_sync_is_the_registry_s_no_op_under_the_helper_s_name():
    script = script_for("cpu", checks.zeroed)
    expected = inspect.getsource(devices.nothing_queued).replace("def nothing_queued(", "def sync(").strip()
    assert function_bodies(script)["sync"] == expected
    assert "nothing_queued" not in script and "devices" not in script and "torch.cuda" not in script


def test_on_cuda_sync_is_cuda_sync_s_body_renamed_with_no_import_inside():
    script = script_for("cuda", checks.zeroed)
    body = function_bodies(script)["sync"]
    assert body.startswith("def sync(device):\n") and "torch.cuda.current_stream(index).synchronize()" in body
    assert "import torch" not in body and "cuda_sync" not in script and "nothing_queued" not in script
    assert inspect.getsource(devices.cuda_sync).split('"""')[1] in body  # its own docstring: the why goes along
    assert_well_formed(script)


# sim's scripts load sim first, and nothing else of this package: tests/test_sim_suite.py.
@pytest.mark.parametrize("device", [d for d in devices.NAMES if not devices.get(d).by_name_only])
def test_no_script_of_the_suite_imports_this_package(device):
    """Every function the library's tests pass to a scenario, on every device it applies to."""
    functions = [f for f in suite_functions() if device == "cuda" or f not in PROMISE_10]
    assert len(functions) >= 50  # the scan found the checks (55 when this was written)
    assert helpers.sync in functions and checks.zeroed in functions and contexts.thread in functions
    for func in functions:
        script = script_for(device, func)
        assert "cpugpu_conformance" not in script, f"{func.__qualname__}:\n{script}"
        assert_well_formed(script)
    assert_well_formed(script_for(device, *functions))  # all of them at once: still each once


def test_a_per_device_helper_is_marked_with_the_registry_attribute_it_stands_for():
    assert helpers.sync.__per_device__ == "sync"
    for device in devices.REGISTRY.values():
        assert callable(device.sync) and callable(device.caller_state)


# --- modules besides torch and numpy


def test_a_module_a_function_reads_is_imported_at_the_top_once():
    script = script_for("cpu", contexts.thread, contexts.thread_in_inference_mode)
    lines = script.splitlines()
    assert lines.count("import threading") == 1
    assert lines.index("import threading") < lines.index("def thread(make, *args):")
    assert_well_formed(script)
    assert "threading" not in script_for("cpu", contexts.inference_mode)


def test_a_thread_context_reproducer_runs_on_its_own(tmp_path):
    record, sc = scenario()
    sc.call(contexts.thread_in_inference_mode, Name("make"), into="buf")
    sc.call(mutability.not_inference)
    run = run_script(tmp_path, record.reproducer())
    assert run.returncode == 0 and OK in run.stdout, record.reproducer() + run.stderr


# --- Scenario.check: in the reproducer only while it is the last thing run


def test_a_check_step_is_kept_only_while_it_is_the_last_thing_run():
    record, sc = scenario()
    sc.call(Name("make"), into="buf")
    sc.check(stateful.not_inference_tensors, Name("buf"))
    assert record.reproducer().rstrip().splitlines()[-2] == "not_inference_tensors(buf)"
    sc.call(checks.zeroed)
    script = record.reproducer()
    assert "not_inference_tensors" not in script and "zeroed(buf, device)" in script
    sc.check(mutability.not_inference)
    script = record.reproducer()
    assert script.rstrip().splitlines()[-2] == "not_inference(buf)" and "not_inference_tensors" not in script
    assert_well_formed(script)


def failing_check(buf):
    assert buf.cpu.shape == (99,), "the check that failed"


def test_a_check_that_fails_is_the_last_step_of_the_reproducer():
    record, sc = scenario()
    sc.call(Name("make"), into="buf")
    with pytest.raises(AssertionError, match="the check that failed"):
        sc.check(failing_check, Name("buf"))
    script = record.reproducer()
    assert script.rstrip().splitlines()[-2] == "failing_check(buf)" and "def failing_check(buf):" in script


# --- make(): the constructor's keywords bound, or the adapter


def test_make_passes_the_constructor_keywords_bound():
    record, sc = scenario()
    buf = sc.call(Name("make"), into="buf")
    assert function_bodies(record.reproducer())["make"] == (
        "def make():\n    return Buffer(*size, dtype=dtype, device=device, pin_memory=pin_memory, with_numpy=with_numpy)")
    assert buf.np is not None


def test_make_leaves_with_numpy_out_when_it_is_unbound():
    seen = {}

    def factory(*size, **options):
        seen.update(options)
        return CpuGpuBuffer(*size, **options)

    record = Record(REFERENCE)
    sc = Scenario(record, "5", "cpu", factory=factory, size=(2,), dtype=torch.float32, pin_memory=False)
    sc.call(Name("make"), into="buf")
    assert set(seen) == {"dtype", "device", "pin_memory"}
    assert function_bodies(record.reproducer())["make"] == (
        "def make():\n    return Buffer(*size, dtype=dtype, device=device, pin_memory=pin_memory)")


def test_make_is_written_only_where_a_step_uses_it():
    record, sc = scenario()
    sc.call(helpers.sync)
    assert "def make" not in record.reproducer()


# A class whose constructor differs from the contract's: the shape as one tuple, `numpy=` for with_numpy.
TUPLE_BUFFER = '''
from cpugpu_conformance.reference import CpuGpuBuffer


class TupleBuffer(CpuGpuBuffer):
    def __init__(self, shape, *, dtype, device, pin_memory=False, numpy=True):
        super().__init__(*shape, dtype=dtype, device=device, pin_memory=pin_memory, with_numpy=numpy)
'''


class TupleBufferTests(BufferTests):
    """A user's adapter: make_buffer overridden (buffer_cls is set by the test that loads the class)."""

    def make_buffer(self, *size, **options):
        options["numpy"] = options.pop("with_numpy", True)
        return self.buffer_cls(size, **options)


def test_an_adapter_goes_into_the_reproducer_and_it_runs_on_its_own(tmp_path, monkeypatch):
    (tmp_path / "tuple_buffer.py").write_text(TUPLE_BUFFER)
    monkeypatch.syspath_prepend(str(tmp_path))
    from tuple_buffer import TupleBuffer

    monkeypatch.setattr(TupleBufferTests, "buffer_cls", TupleBuffer)
    suite = TupleBufferTests()
    record = Record(suite._import_line(), promise="2")
    sc = suite.scenario(record, "cpu", size=(3, 2), dtype=torch.float32, pin_memory=False, with_numpy=True)
    buf = sc.call(Name("make"), into="buf")
    assert type(buf) is TupleBuffer
    sc.call(checks.zeroed)
    script = record.reproducer()
    assert "from tuple_buffer import TupleBuffer as Buffer" in script
    assert "class Adapter" in script and "    buffer_cls = Buffer\n" in script
    assert textwrap.indent(textwrap.dedent(inspect.getsource(TupleBufferTests.make_buffer)), "    ").rstrip() in script
    assert ("return ADAPTER.make_buffer(*size, dtype=dtype, device=device, pin_memory=pin_memory, "
            "with_numpy=with_numpy)") in script
    assert_well_formed(script)
    run = run_script(tmp_path, script)
    assert run.returncode == 0 and OK in run.stdout, script + run.stderr


def test_no_adapter_for_the_contract_s_own_constructor():
    assert type("Plain", (BufferTests,), {"buffer_cls": CpuGpuBuffer})()._adapter() is None


# --- the script runs on its own


@pytest.mark.parametrize("check", [checks.zeroed, checks.two_storages, checks.numpy_view, checks.shape_dtype_device])
def test_the_reference_s_reproducer_runs_standalone_and_says_ok(tmp_path, check):
    record, sc = scenario()
    sc.call(Name("make"), into="buf")
    sc.call(check)
    script = record.reproducer()
    assert_well_formed(script)
    run = run_script(tmp_path, script)
    assert run.returncode == 0 and run.stdout.strip().endswith(OK), script + run.stdout + run.stderr


def test_a_reproducer_of_a_broken_class_fails_on_its_own(tmp_path):
    """Not zeroed: the same script, against a class that leaves garbage, is the bug on its own."""
    (tmp_path / "dirty.py").write_text(
        "from cpugpu_conformance.reference import CpuGpuBuffer\n\n\nclass Dirty(CpuGpuBuffer):\n"
        "    def __init__(self, *size, **options):\n        super().__init__(*size, **options)\n"
        "        self.gpu.fill_(1)\n")
    record, sc = scenario()
    sc.call(Name("make"), into="buf")
    sc.call(checks.zeroed)
    script = record.reproducer().replace(REFERENCE, "from dirty import Dirty as Buffer\n")
    run = run_script(tmp_path, script)
    assert run.returncode != 0 and OK not in run.stdout
    assert "buf.gpu has 12 non-zero elements at construction" in run.stderr


def test_the_definitions_read_nothing_but_what_the_script_gives_them():
    ns = definitions(script_for("cpu", checks.zeroed))
    assert {"torch", "np", "zeroed", "raw", "byte_view", "sync"} <= ns.keys()
    assert ns["zeroed"].__globals__ is ns and "devices" not in ns
    buf = CpuGpuBuffer(2, dtype=torch.float32, device=torch.device("cpu"), pin_memory=False)
    ns["zeroed"](buf, torch.device("cpu"))


@pytest.mark.parametrize("dtype", [np.bool_, np.float32, np.int8, np.uint8, np.float16, np.complex64, np.int64])
def test_an_array_literal_needs_nothing_of_numpy_but_array(dtype):
    """The state machine binds its model as arrays; np.bool (NumPy 2's name) is missing from the NumPy 1
    that torch 2.2 and older run with (matrix.yaml): a reproducer spelling it failed against the reference."""
    value = np.array([[0, 1], [1, 0]], dtype=dtype)
    back = eval(literal(value), {"np": types.SimpleNamespace(array=np.array)})
    assert back.dtype == value.dtype and (back == value).all()


def test_the_header_names_the_promise_blamed_and_what_the_device_needs():
    record, sc = scenario("cuda")
    assert sc.script().startswith(f"# Reproducer: CpuGpuBuffer promise 2 ({promises.PROMISES['2']}), device cuda.\n")
    assert "# Needs a CUDA device.\n" in sc.script()
    record.blame("1")
    assert f"promise 1 ({promises.PROMISES['1']})" in sc.script() and "# Found by: " in sc.script()
