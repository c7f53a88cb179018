"""Per-test state travels with the test: one test's reproducer, blame or observation never
reaches another's report, whether the tests run in threads or in xdist workers."""

from __future__ import annotations

import threading

import torch
from suite_runner import TESTS, run_suite

from cpugpu_conformance.reference import CpuGpuBuffer
from cpugpu_conformance.testing.shared import reproducer
from cpugpu_conformance.testing.shared.reproducer import Name, Record, Scenario


def test_the_reproducer_module_keeps_no_per_test_state():
    for name in ("_state", "reset", "take", "blame", "observe", "take_blame", "take_observed", "set_impl_import"):
        assert not hasattr(reproducer, name), f"cpugpu_conformance.testing.reproducer.{name} is module-wide state"


def _scenario(record: Record, size: tuple[int, ...]) -> Scenario:
    return Scenario(record, "1", "cpu", factory=CpuGpuBuffer, size=size, dtype=torch.float32,
                    pin_memory=False, with_numpy=True)


def test_two_threads_keep_their_own_reproducer_blame_and_observation():
    records = {name: Record(f"# impl for {name}\n") for name in ("a", "b")}
    sizes = {"a": (2, 3), "b": (5,)}
    steps = threading.Barrier(2)  # every step of one thread interleaves with the other's

    def one_test(name: str) -> None:
        record = records[name]
        sc = _scenario(record, sizes[name])
        steps.wait()
        record.blame(f"blame-{name}")
        steps.wait()
        sc.call(Name("make"), into="buf")
        sc.bind(mark=name)
        steps.wait()
        record.observe(f"observed-{name}")
        steps.wait()

    threads = [threading.Thread(target=one_test, args=(name,)) for name in records]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    for name, other in (("a", "b"), ("b", "a")):
        record = records[name]
        script = record.reproducer()
        assert f"size = {sizes[name]!r}" in script and f"mark = {name!r}" in script and "buf = make()" in script, script
        assert f"size = {sizes[other]!r}" not in script and f"mark = {other!r}" not in script, script
        assert f"# impl for {name}" in script and f"# impl for {other}" not in script
        assert (record.blamed, record.observed) == (f"blame-{name}", f"observed-{name}")


def test_a_new_record_starts_empty():
    record = Record()
    assert (record.reproducer(), record.blamed, record.observed) == (None, None, None)
    assert "from cpugpu_conformance.reference import CpuGpuBuffer as Buffer" in record.impl_import


def test_xdist_reports_carry_each_tests_own_reproducer_and_blame(tmp_path):
    # Two promises broken in different tests, run side by side in two workers; the state
    # machine (promises 3, 5, 8 and 9) blames 5, and 3, 8, 9 are not asked for.
    run = run_suite(tmp_path, "--impl", f"{TESTS / 'bad_impls.py'}:TwoBugsBuffer", "-n", "2", "--device", "cpu",
                    "--promise", "5,6")
    assert run.returncode == 1, run.stdout[-3000:]
    assert run.verdict("5") == "failed" and run.verdict("6") == "failed"
    expected_header = {"5": "promise 5 (A true NumPy view)", "6": "promise 6 (The bfloat16 path)"}
    for promise in ("5", "6"):
        for failure in run.failures(promise):
            script = failure["reproducer"]
            assert script, f"no reproducer for {failure['test']}"
            if "state_machine" in failure["test"]:
                assert promise == "5" and "state machine" in script, (promise, failure["test"])
            else:
                assert expected_header[promise] in script.splitlines()[0], (failure["test"], script.splitlines()[0])
    tests_of_6 = {f["test"].split("::")[-1].split("[")[0] for f in run.failures("6")}  # the test, not its class
    assert tests_of_6 == {"test_bfloat16_with_numpy_raises_value_error"}, tests_of_6
    # The blame reached the controller: no failure fell outside the promises asked for.
    assert run.result["unattributed_failures"] == [], run.result["unattributed_failures"]
