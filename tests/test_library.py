"""The suite as a library (issue 16, item 5): the contract's checks inside a third-party
project's own pytest run, from the installed wheel, as a new user writes it (third_party.py):
its own strict ini (`filterwarnings = error`, `--strict-markers`, `xfail_strict`), its own
conftest (the plugin enabled explicitly, an autouse fixture, its own hypothesis profile loaded)
and test modules subclassing `cpugpu_conformance.testing.BufferContractTests`."""

from __future__ import annotations

import json
import re

import pytest
from alt_impls import ALTERNATIVES
from suite_runner import TORCH_FOR_ENVS, build_wheel, make_env
from third_party import (
    ADAPTER,
    FIXED_BUFFERS,
    MAX_EXAMPLES,
    PROFILE,
    QUICK_PROFILE,
    areas_checking,
    contract_module,
    make_project,
    many_classes_module,
    promises_of_tests,
    run_project,
    run_python,
    run_tool,
)

from cpugpu_conformance import devices
from cpugpu_conformance.promises import PROMISES, RECORDED_ONLY, not_applicable
from cpugpu_conformance.variants import VARIANTS

INFERENCE_ERROR = "Inplace update to inference tensor outside InferenceMode"

# Every test of the contract that runs on the CPU, by the names the shipped suite gave them
# (LIBRARY_API.md: "test names stay as today"); the CUDA ones are deselected here.
TESTS_ON_CPU = {
    "test_shape_dtype_and_device", "test_every_dtype_in_every_context", "test_starts_zeroed", "test_two_storages",
    "test_mutable_wherever_made", "test_original_bug_buffer_made_in_inference_mode",
    "test_numpy_view_shares_memory", "test_numpy_view_by_default",
    "test_bfloat16_with_numpy_raises_value_error", "test_without_numpy_every_dtype_works",
    "test_no_silent_wrong_views", "test_partial_copy", "test_copies_keep_the_storages",
    "test_pin_memory_on_cpu_is_recorded", "test_no_side_effects_on_the_caller",
    "test_buffers_are_independent", "test_engine_scale_shape_and_zeroed",
    "test_engine_scale_two_storages", "test_engine_scale_numpy_view", "test_engine_scale_partial_copy",
    "test_engine_scale_copies_keep_the_storages", "test_buffer_state_machine",
}

# The one test of promise 7 (no silent wrong views): opting out of it leaves the promise untested.
OPTED_OUT_TEST, OPTED_OUT_PROMISE = "test_no_silent_wrong_views", "7"
OPT_OUT_REASON = "ours is only ever made with float32 and int64"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    return build_wheel(tmp_path_factory.mktemp("dist"))


@pytest.fixture(scope="module")
def env(tmp_path_factory, wheel):
    """bin/ of a fresh environment: torch, numpy, and the wheel (with pytest, hypothesis and, for
    the gate, its [tools] extra); no checkout."""
    return make_env(tmp_path_factory.mktemp("env") / "venv", TORCH_FOR_ENVS, "numpy",
                    f"cpugpu-conformance[tools] @ {wheel.as_uri()}")


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory, env):
    project = make_project(tmp_path_factory.mktemp("ours"), {
        "test_our_buffer.py": contract_module("TestOurBuffer", "CpuGpuBuffer"),
    })
    return run_project(env, project, "-v", result="ref.json")  # -v: hypothesis names the profile in the header


@pytest.fixture(scope="module")
def pre_fix_run(tmp_path_factory, env):
    project = make_project(tmp_path_factory.mktemp("ours-pre-fix"), {
        "test_our_buffer.py": contract_module("TestOurBuffer", "PreFixCpuGpuBuffer"),
    })
    return run_project(env, project, result="prefix.json")


def test_the_library_comes_from_the_wheel(env, tmp_path):
    probe = run_python(env, tmp_path, "import cpugpu_conformance.testing as t\nprint(t.__file__)\n", "where.py")
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip().startswith(str(env.parent)), probe.stdout


def test_the_reference_passes_with_every_promise_tested(reference_run):
    run = reference_run
    assert run.returncode == 0, run.tail()
    # The project's own configuration and profile are the ones in force.
    assert f"rootdir: {run.project}" in run.stdout and "configfile: pytest.ini" in run.stdout, run.stdout[:1500]
    header = next((line for line in run.stdout.splitlines() if line.startswith("hypothesis profile")), "")
    assert header.startswith(f"hypothesis profile {PROFILE!r}") and f"max_examples={MAX_EXAMPLES}," in header, run.stdout[:1500]
    assert run.outcomes() == {"passed": len(run.cases)}, run.outcomes()
    ran = {c.function for c in run.cases}
    assert ran >= TESTS_ON_CPU, f"tests of the contract that did not run: {sorted(TESTS_ON_CPU - ran)}"
    # The project's autouse fixture ran for every test, once.
    assert sorted(run.autouse_log()) == sorted(f"{c.cls}::{c.name}" for c in run.cases)

    cell = run.cell
    assert cell.status == "completed" and cell.answer().clean, cell.answer().lines
    assert cell.tested_devices() == ["cpu"]
    accelerators = devices.accelerators_in(cell.environment)
    for promise in PROMISES:
        entry, outcome = cell.entry(promise, "cpu"), cell.outcome(promise, "cpu")
        why = not_applicable(promise, "cpu", accelerators)
        if why:  # promise 10 is about CUDA
            assert outcome.kind == "not_applicable" and entry["passed"] == 0, (promise, entry)
            continue
        assert entry["passed"] >= 1 and entry["failed"] == entry["skipped"] == 0, (promise, entry)
        assert outcome.kind == ("recorded" if promise in RECORDED_ONLY else "passed"), (promise, outcome)
    assert "10" in [p for p in PROMISES if not_applicable(p, "cpu", accelerators)]


def test_the_pre_fix_class_fails_with_the_inference_tensor_error_and_a_reproducer(pre_fix_run):
    run = pre_fix_run
    assert run.returncode == 1, run.tail()
    assert INFERENCE_ERROR in run.stdout and "Reproducer" in run.stdout, run.tail()
    cell = run.cell
    assert cell.answer().kind == "failed" and cell.outcome("3", "cpu").kind == "failed"
    failures = cell.entry("3", "cpu")["failures"]
    assert failures and all(f["reproducer"] for f in failures), failures
    assert any(INFERENCE_ERROR in f["message"] for f in failures), [f["message"][-300:] for f in failures]


def test_the_pre_fix_reproducer_stands_alone(pre_fix_run, env, tmp_path):
    failures = pre_fix_run.cell.entry("3", "cpu")["failures"]
    failure = next((f for f in failures if "test_original_bug" in f["test"]), failures[0])
    reproducer = failure["reproducer"]
    assert "PreFixCpuGpuBuffer" in reproducer, reproducer
    # Beside the project's buffers it fails on its own...
    alone = run_python(env, pre_fix_run.project, reproducer, "reproducer.py")
    assert alone.returncode != 0 and "ok: the promise held" not in alone.stdout, alone.stdout + alone.stderr
    assert INFERENCE_ERROR in alone.stderr or "test_original_bug" not in failure["test"], alone.stderr[-3000:]
    # ...and where that name is the reference, it holds.
    (tmp_path / "ourbuffers.py").write_text(FIXED_BUFFERS)
    held = run_python(env, tmp_path, reproducer, "reproducer.py")
    assert held.returncode == 0 and "ok: the promise held" in held.stdout, held.stdout + held.stderr


def test_k_selects_one_test_under_the_projects_profile(env, tmp_path):
    project = make_project(tmp_path / "ours", {"test_our_buffer.py": contract_module("TestOurBuffer", "CpuGpuBuffer")})
    run = run_project(env, project, "-k", "test_starts_zeroed", "--hypothesis-show-statistics")
    assert run.returncode == 0, run.tail()
    assert run.cases and {c.function for c in run.cases} == {"test_starts_zeroed"}, run.cases
    assert run.outcomes() == {"passed": len(run.cases)}
    assert sorted(run.autouse_log()) == sorted(f"{c.cls}::{c.name}" for c in run.cases)
    assert not list(project.glob("*.json")), "a result file was written that nobody asked for"
    # The project's profile governs the number of examples (hypothesis's default is 100).
    examples = [int(n) for n in re.findall(r"(\d+) passing", run.stdout)]
    assert examples and max(examples) <= MAX_EXAMPLES, run.stdout[-3000:]
    assert f"Stopped because settings.max_examples={MAX_EXAMPLES}" in run.stdout
    # Without --cpugpu-cell-result the exit status is pytest's own; no line may claim another.
    claimed = re.findall(r"\(exit (\d+)\)", run.output)
    assert all(int(n) == run.returncode for n in claimed), f"exit {run.returncode}, but the output says {claimed}:\n{run.stdout[-3000:]}"


def test_the_gate_reads_the_users_result_files(reference_run, pre_fix_run, env, tmp_path):
    ref, prefix = reference_run.result_path, pre_fix_run.result_path
    assert ref.exists() and prefix.exists()
    unlike = run_tool(env, tmp_path, "gate", "--baseline", str(ref), "--candidate", str(prefix))
    assert unlike.returncode == 2 and "the cells tested different implementations" in unlike.stderr, unlike.stderr
    # The pre-fix run's file as if the team's class had regressed under the candidate torch: its
    # verdicts and failures as that run wrote them, under the reference run's class name.
    data = json.loads(prefix.read_text())
    data["impl"] = json.loads(ref.read_text())["impl"]
    prefix = tmp_path / "regressed.json"
    prefix.write_text(json.dumps(data))
    regressed = run_tool(env, tmp_path, "gate", "--baseline", str(ref), "--candidate", str(prefix))
    assert regressed.returncode == 1, regressed.stdout + regressed.stderr
    assert "REGRESSION" in regressed.stdout and "promise 3 (Mutable wherever they were made) on cpu: passed -> failed" in regressed.stdout
    assert INFERENCE_ERROR in regressed.stdout, regressed.stdout[-3000:]
    itself = run_tool(env, tmp_path, "gate", "--baseline", str(ref), "--candidate", str(ref))
    assert itself.returncode == 0, itself.stdout + itself.stderr


def test_opting_out_of_a_test_is_waived_never_passed(env, tmp_path):
    body = f'''
    @pytest.mark.skip(reason={OPT_OUT_REASON!r})
    def {OPTED_OUT_TEST}(self):
        pass
'''
    project = make_project(tmp_path / "ours", {"test_our_buffer.py": contract_module("TestOurBuffer", "CpuGpuBuffer", body)})
    run = run_project(env, project, "--cpugpu-promise", f"2,{OPTED_OUT_PROMISE}", result="cell.json")
    assert run.returncode == 6, run.tail()
    assert run.outcomes()["failed"] == run.outcomes()["error"] == 0
    cell = run.cell
    entry, outcome = cell.entry(OPTED_OUT_PROMISE, "cpu"), cell.outcome(OPTED_OUT_PROMISE, "cpu")
    assert entry["passed"] == 0, entry  # never a pass
    assert cell.outcome("2", "cpu").kind == "passed" and cell.answer().kind == "untested"
    # Waived (the team's decision), with the project's reason: in the result file and in the terminal summary.
    assert outcome.kind == "waived" and OPT_OUT_REASON in (outcome.note or ""), (outcome, entry)
    assert entry["skipped"] >= 1 and [w["reason"] for w in entry["waived_tests"]] == [OPT_OUT_REASON], entry
    assert OPT_OUT_REASON in run.stdout, run.tail()
    skipped = [c for c in run.cases if c.outcome == "skipped"]
    assert [c.function for c in skipped] == [OPTED_OUT_TEST], run.cases


def test_every_variant_is_rejected_on_the_promise_it_breaks(env, tmp_path):
    # One run for them all, each class built of the areas that check its promise (what --promise
    # does for the shipped suite); a result file is about one class, so JUnit XML says per class.
    broken = [v for v in VARIANTS if "cpu" in v.fails_on]
    classes = {f"TestBroken{v.name}": f"variants.{v.name}" for v in broken}
    bases = {f"TestBroken{v.name}": areas_checking(v.promise) for v in broken}
    project = make_project(tmp_path / "ours", {"test_broken.py": many_classes_module(classes, bases=bases)})
    run = run_project(env, project, f"--hypothesis-profile={QUICK_PROFILE}")
    assert run.returncode == 1, run.tail()
    promises_of = promises_of_tests()
    missed = {}
    for v in broken:
        cls = f"TestBroken{v.name}"
        failed = sorted({c.function for c in run.cases if c.cls == cls and c.outcome == "failed"})
        if not [t for t in failed if v.promise in promises_of[t]]:
            missed[v.name] = (f"breaks promise {v.promise} ({PROMISES[v.promise]}): {v.description}; no test of it failed "
                              f"(areas {bases[cls]}; failed: {failed}; outcomes {dict(run.outcomes(cls))})")
    assert not missed, "variants the library let through:\n" + "\n".join(f"{k}: {w}" for k, w in missed.items())
    assert "Reproducer" in run.stdout


def test_every_correct_class_is_accepted(env, tmp_path):
    classes = {"TestOurBuffer": "ourbuffers.CpuGpuBuffer", "TestShapedBufferThroughTheAdapter": "ourbuffers.ShapedBuffer"}
    classes |= {f"TestAlternative{a.name}": f"alt_impls.{a.name}" for a in ALTERNATIVES if "cpu" in a.passes_on}
    classes |= {f"TestHarmlessHere{v.name}": f"variants.{v.name}" for v in VARIANTS if "cpu" in v.passes_on}
    assert "TestHarmlessHerePrivateStreamBuffer" in classes  # its bug needs CUDA streams
    project = make_project(tmp_path / "ours", {
        "test_correct.py": many_classes_module(classes, {"TestShapedBufferThroughTheAdapter": ADAPTER}),
    })
    run = run_project(env, project)
    rejected = {cls: sorted({c.name for c in run.cases if c.cls == cls and c.outcome in ("failed", "error")}) for cls in classes}
    assert not {cls: tests for cls, tests in rejected.items() if tests}, f"correct classes rejected:\n{run.tail()}"
    for cls in classes:
        ran = {c.function for c in run.cases if c.cls == cls and c.outcome == "passed"}
        assert ran >= TESTS_ON_CPU, f"{cls}: tests that did not pass: {sorted(TESTS_ON_CPU - ran)}"
    assert run.returncode == 0, run.tail()
