"""The benchmarks' bad input: a one-line error naming the file, before anything is measured."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(("content", "culprit"), [(None, "no such file"), ("torch: [\n", "not valid YAML")],
                         ids=["missing", "corrupt"])
def test_bench_matrix_refuses_a_bad_matrix_in_one_line(tmp_path: Path, content: str | None, culprit: str) -> None:
    path = tmp_path / "matrix.yaml"
    if content is not None:
        path.write_text(content)
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_matrix.py"), "--skip-warm", "--warm-matrix"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "CONFORMANCE_MATRIX": str(path)})
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(str(path)) and culprit in lines[0], proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr and not proc.stdout


def test_bench_result_cap_measures_files_at_the_caps_and_each_shape_reads_as_it_says(tmp_path: Path) -> None:
    """The shapes bench_result_cap.py measures: each as large as the caps let a file be, the valid ones
    read, the others refused in one line; so its figures are about what they claim."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import bench_result_cap as bench
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    from cpugpu_conformance import results

    refused = {"unknown key": "JSON values, over the", "unknown string": "unknown key 'padding' at the top level"}
    for shape, make in bench.SHAPES.items():
        path = tmp_path / f"{shape}.json"
        path.write_bytes(bench._dumps(make("2.13.0")))
        size, values = path.stat().st_size, results.count_values(path.read_bytes())
        assert size <= results.MAX_FILE_BYTES and values <= (results.MAX_VALUES if shape not in refused else 10**9)
        if shape in ("long texts", "wide texts", "unknown key", "unknown string"):
            assert size > 0.95 * results.MAX_FILE_BYTES, (shape, size)
        if shape == "many values":
            assert values > 0.95 * results.MAX_VALUES, values
        if shape in refused:
            with pytest.raises(results.ResultFileError, match=refused[shape]):
                results.CellResult.load(path)
        else:
            results.CellResult.load(path)


def _bench_suite():
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import bench_suite
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    return bench_suite


def test_bench_suite_judges_the_broken_classes_issue_31_names_and_a_copy_that_ignores_n(tmp_path: Path) -> None:
    """The broken rows measure the CPU-breaking variants issue 31 names, a copy that ignores n (which
    does break promise 8: it copies the whole buffer), or every variant that breaks on the CPU; an
    unknown name is one line, before anything is measured."""
    from cpugpu_conformance.variants import VARIANTS

    bench = _bench_suite()
    on_cpu = {v.name: v.spec for v in VARIANTS if "cpu" in v.fails_on}
    chosen = bench.broken_classes("default", tmp_path)
    assert list(chosen) == [*bench.BROKEN, bench.IGNORES_N]
    assert all(chosen[name] == on_cpu[name] for name in bench.BROKEN)
    assert set(bench.broken_classes("all", tmp_path)) == {*on_cpu, bench.IGNORES_N}
    with pytest.raises(SystemExit, match="no class that breaks on the CPU is named NoSuchBuffer"):
        bench.broken_classes("ZeroMeansAllBuffer,NoSuchBuffer", tmp_path)

    import torch

    from cpugpu_conformance import impl

    cls = impl.load(chosen[bench.IGNORES_N]).cls
    project = bench.write_project(tmp_path / "project", bench.BROKEN_PROJECT)  # the same class, in a project
    assert impl.load(f"{project / 'tests' / 'our_buffer.py'}:{bench.IGNORES_N}").cls.__doc__ == cls.__doc__
    assert f"buffer_cls = {bench.IGNORES_N}" in (project / "tests" / "test_our_buffer.py").read_text()
    buf = cls(4, dtype=torch.int32, device=torch.device("cpu"), pin_memory=False)
    buf.cpu.fill_(7)
    buf.copy_to_gpu(1)
    assert buf.gpu.tolist() == [7, 7, 7, 7], "the copy that ignores n copied only [:n]: it is no broken class"


def test_bench_suite_reads_the_tests_own_time_from_junit_xml(tmp_path: Path) -> None:
    """The tests' own time (setup, call and teardown of each test), not pytest's clock, which starts at
    different points in the shipped suite (after conftest.py imported torch) and in a project."""
    bench = _bench_suite()
    junit = tmp_path / "junit.xml"
    junit.write_text('<testsuites><testsuite><testcase name="a" time="1.25"/><testcase name="b" time="0.5"/>'
                     '<testcase name="c"/></testsuite></testsuites>')
    assert bench.tests_own_time(junit) == 1.75
    assert bench.tests_own_time(tmp_path / "missing.xml") is None


def test_a_failure_is_never_explained_and_an_engine_scale_failure_is_not_shrunk() -> None:
    """What bounds a failing class's time (issue 31, item 4): under a profile with every phase (as
    hypothesis's own default has), the library's tests run without explain, the engine-scale ones
    without shrink too; the others still shrink, and every one generates."""
    from hypothesis import Phase, settings

    from cpugpu_conformance.testing.buffer.copies import CopyTests
    from cpugpu_conformance.testing.buffer.engine_scale import ENGINE, EngineScaleTests
    from cpugpu_conformance.testing.buffer.stateful import StateMachineTests
    from cpugpu_conformance.testing.shared import budget

    for test in (EngineScaleTests.test_engine_scale_partial_copy, CopyTests.test_partial_copy):
        ran_under = test._hypothesis_internal_use_settings.phases  # the profile's when the module was imported
        assert Phase.explain not in ran_under and Phase.generate in ran_under, test.__name__
    assert Phase.shrink not in EngineScaleTests.test_engine_scale_partial_copy._hypothesis_internal_use_settings.phases
    before = settings.get_current_profile_name()
    settings.register_profile("test-benchmarks-every-phase", phases=list(Phase))
    settings.load_profile("test-benchmarks-every-phase")
    try:
        ordinary, engine = budget.Examples().settings().phases, ENGINE.settings().phases
        machine = StateMachineTests.state_machine_settings().phases
        assert Phase.explain not in ordinary + engine + machine
        assert Phase.shrink in ordinary and Phase.shrink in machine and Phase.shrink not in engine
        assert all(Phase.generate in phases for phases in (ordinary, engine, machine))
    finally:
        settings.load_profile(before)


def test_bench_test_processes_refuses_a_repeat_below_one_in_one_line() -> None:
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_test_processes.py"), "--repeat", "0"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and not proc.stdout
    assert proc.stderr.strip().splitlines()[-1].endswith("--repeat must be at least 1, not 0"), proc.stderr
    assert "Traceback" not in proc.stderr
