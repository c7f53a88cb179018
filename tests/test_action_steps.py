"""The composite action's steps (issue 24, item 1), run here as GitHub runs them (bash -eo pipefail,
each step's env:, $GITHUB_OUTPUT and $GITHUB_STEP_SUMMARY), against a team's repository made in a
temporary folder.

What the runs here exercise, and what they do not: every `run:` step is run as written
(bump-target, both cells, the gate, the report, the final exit). The install step runs once per
module, as written but into a fresh virtual environment in place of the runner's Python (`--system`
becomes `--python VENV`, setup-python's stand-in): a plain install, no checkout on any path, so the
cells run the suite the package ships, in the team's repository. The `uses:` steps
(setup-python, setup-uv, upload-artifact) are GitHub's: they are not run; the files the upload
would take are checked to be there. No torch is installed: each cell runs with an interpreter
that already has its torch (the baseline-python / candidate-python inputs). The torch here is
real for one cell (the shipped suite, run for real); the other cell's torch is a fake whose
suite run writes a result file with the failures a test chooses (tests/cell_helpers.fake_torch).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from action_helpers import ACTION, REPO, STEPS, team_repo, torch_release
from cell_helpers import fake_torch

BIN = Path(sys.executable).parent
EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


@dataclass
class ActionRun:
    outcomes: dict[str, str] = field(default_factory=dict)  # step name -> success, failure, skipped
    outputs: dict[str, dict[str, str]] = field(default_factory=dict)  # step id -> its $GITHUB_OUTPUT
    logs: dict[str, str] = field(default_factory=dict)
    codes: dict[str, int] = field(default_factory=dict)
    summary: str = ""
    not_run: list[str] = field(default_factory=list)  # uses: steps, and the install
    uploaded: list[Path] = field(default_factory=list)  # what the upload would take

    @property
    def failed(self) -> bool:
        return "failure" in self.outcomes.values()

    @property
    def exit_code(self) -> int:
        """The action's: the code of the step that failed it, else 0."""
        return next((self.codes[name] for name, o in self.outcomes.items() if o == "failure"), 0)


def evaluate(text: str, context: dict) -> str:
    """${{ inputs.x }}, ${{ steps.id.outputs.k }}, ${{ github.x }}, ${{ runner.temp }}: what the runner substitutes."""
    def value(match: re.Match[str]) -> str:
        node: object = context
        for part in match.group(1).split("."):
            node = node.get(part, "") if isinstance(node, dict) else ""
        return str(node)

    return EXPRESSION.sub(value, text)


def condition(text: str | None, context: dict, failed: bool) -> bool:
    """A step's if: with the functions and comparisons action.yml uses."""
    if text is None:
        return not failed  # success(), GitHub's default
    expr = EXPRESSION.sub(lambda m: m.group(1), text).strip()
    expr = expr.replace("!cancelled()", "True").replace("always()", "True").replace("success()", str(not failed))
    expr = re.sub(r"steps\.([\w-]+)\.outcome", lambda m: repr(context["steps"].get(m.group(1), {}).get("outcome", "")),
                  expr)
    expr = expr.replace("&&", " and ").replace("||", " or ")
    assert re.fullmatch(r"[\w\s'=!()]+", expr), f"an if: this harness cannot read: {text}"
    return bool(eval(expr, {"__builtins__": {}}, {}))  # noqa: S307 - our own action's conditions, checked above


INSTALL_STEP = next(s for s in STEPS if s.get("id") == "install")


@pytest.fixture(scope="module")
def installed_action(tmp_path_factory) -> Path:
    """bin/ of the environment the install step made: the package from this checkout, not editable."""
    from suite_runner import find_uv, suite_env

    venv = tmp_path_factory.mktemp("runner-python") / "venv"
    subprocess.run([find_uv(), "venv", "--quiet", "--python", sys.executable, str(venv)], check=True)
    script = INSTALL_STEP["run"]
    assert script.count("--system") == 1, script
    script = script.replace("--system", f"--python {venv / 'bin' / 'python'}")
    env = dict(suite_env(), GITHUB_ACTION_PATH=str(REPO), PATH=f"{Path(find_uv()).parent}{os.pathsep}{os.environ['PATH']}")
    env.pop("PYTHONPATH", None)
    env.pop("VIRTUAL_ENV", None)
    # uv's cache first (no network), then the index (UV_OFFLINE unset: uv refuses an empty one)
    for tries in ({"UV_OFFLINE": "1"}, {}):
        proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
                              env=dict(env, **tries), capture_output=True, text=True, timeout=600)
        if proc.returncode == 0:
            break
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return venv / "bin"


def test_the_install_step_installs_the_package_as_a_wheel_would(installed_action):
    """Not editable: the package and the suite it ships in the environment's site-packages, no path
    back to this checkout (the cells then need none)."""
    code = ("import json, cpugpu_conformance as p, importlib.metadata as m; "
            "d = m.distribution('cpugpu-conformance'); print(json.dumps([p.__file__, d.read_text('direct_url.json')]))")
    out = subprocess.run([str(installed_action / "python"), "-c", code], capture_output=True, text=True, check=True,
                         env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, cwd="/")
    where, direct_url = json.loads(out.stdout)
    package = Path(where).parent
    assert package.is_relative_to(installed_action.parent) and (package / "suite" / "conftest.py").is_file(), where
    assert not json.loads(direct_url or "{}").get("dir_info", {}).get("editable"), direct_url


def run_action(tmp_path: Path, workspace: Path, inputs: dict[str, str], github: dict | None = None, *,
               runner_bin: Path, env: dict[str, str] | None = None) -> ActionRun:
    """The action's steps, run here as GitHub runs them; ``env``: the job's own environment variables."""
    temp = tmp_path / "runner-temp"
    temp.mkdir(exist_ok=True)  # a test may leave what an earlier use of the action in the job left there
    summary = tmp_path / "step-summary.md"
    given = {name: inputs.get(name, spec.get("default", "")) for name, spec in ACTION["inputs"].items()}
    unknown = set(inputs) - set(given)
    assert not unknown, unknown
    context: dict = {"github": {"workspace": str(workspace), "action_path": str(REPO), **(github or {})},
                     "runner": {"temp": str(temp)}, "steps": {}}
    context["inputs"] = {name: evaluate(str(value), context) for name, value in given.items()}
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("GITHUB_", "RUNNER_", "PYTEST_")) and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    # The runner's Python, where the install step put the package (installed_action); uv beside it.
    base.update(PATH=f"{runner_bin}{os.pathsep}{BIN}{os.pathsep}{os.environ.get('PATH', '')}", GITHUB_WORKSPACE=str(workspace),
                GITHUB_ACTION_PATH=str(REPO), RUNNER_TEMP=str(temp), GITHUB_STEP_SUMMARY=str(summary), **(env or {}))
    run = ActionRun()
    for number, step in enumerate(STEPS):
        name = step.get("name") or step.get("uses", f"step {number}")
        if not condition(step.get("if"), context, run.failed):
            run.outcomes[name] = "skipped"
            continue
        if "uses" in step or step.get("id") == "install":
            run.not_run.append(name)
            if "upload-artifact" in step.get("uses", ""):
                for pattern in evaluate(step["with"]["path"], context).split():
                    run.uploaded += [Path(p) for p in sorted(map(str, Path("/").glob(pattern.lstrip("/"))))]
            continue
        output = tmp_path / f"output-{number}"
        output.write_text("")
        env = dict(base, GITHUB_OUTPUT=str(output))
        env.update({key: evaluate(str(value), context) for key, value in (step.get("env") or {}).items()})
        script = tmp_path / f"step-{number}.sh"
        script.write_text(step["run"])
        proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)], cwd=workspace,
                              env=env, capture_output=True, text=True, timeout=900)
        run.logs[name] = proc.stdout + proc.stderr
        run.codes[name] = proc.returncode
        run.outcomes[name] = "success" if proc.returncode == 0 else "failure"
        values = dict(line.split("=", 1) for line in output.read_text().splitlines() if "=" in line)
        if step.get("id"):
            run.outputs[step["id"]] = values
            context["steps"][step["id"]] = {"outputs": values, "outcome": run.outcomes[name]}
    run.summary = summary.read_text() if summary.exists() else ""
    return run


# The suite run of a cell whose torch is fake: a result file with the failures the test chose, the
# team's known failures applied as the suite applies them, exit 1 when a promise failed.
FAKE_SUITE = """\
import json, sys
sys.path[:0] = {paths!r}
import result_factory as rf
from cpugpu_conformance import results
from cpugpu_conformance.results import known_failures

args = sys.argv[1:]
def value(flag):  # --flag VALUE (a checkout's suite) or --flag=VALUE (an installed one)
    joined = [a.split("=", 1)[1] for a in args if a.startswith(flag + "=")]
    return joined[-1] if joined else args[args.index(flag) + 1]
fails = {fails!r}
failures = {{(p, "cpu"): [rf.failure(f"conformance/test_contract.py::TestContract::test_{{p}}[cpu]",
                                     f"AssertionError: promise {{p}} broke", f"# reproducer of promise {{p}}\\nraise SystemExit(1)\\n")]
            for p in fails}}
data = rf.completed({torch!r}, cell=value("--cell-name"), failed=failures, profile=value("--hypothesis-profile"))
given = [a.split("=", 1)[1] for a in args if a.startswith("--known-failures=")]
if given:
    data = known_failures.apply(data, known_failures.load(given[0]))
with open({seen!r}, "a") as log:
    log.write(json.dumps(args) + "\\n")
cell = results.CellResult(data, "fake")
cell.write(value("--cell-result"))
sys.exit(0 if cell.answer().clean else 1)
"""


def fake_cell_python(where: Path, torch: str, fails: tuple[str, ...] = ()) -> Path:
    """An interpreter whose torch is ``torch`` (a fake: only its version is real) and whose suite run
    writes a result failing ``fails``; the arguments it was given are kept in ``where/args.jsonl``."""
    site = fake_torch(where / "site", torch, None)
    script = where / "suite.py"
    script.write_text(FAKE_SUITE.format(paths=[str(REPO / "src"), str(REPO / "tests")], fails=fails, torch=torch,
                                        seen=str(where / "args.jsonl")))
    exe = where / "python"
    exe.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        # The suite's run is `-c LAUNCHER conformance ...` (a checkout) or `-c LAUNCHER -c suite.ini ...` (installed).
        if [ "$1" = "-c" ] && [ "$3" != "conformance" ] && [ "$3" != "-c" ]; then PYTHONPATH={site} exec {sys.executable} "$@"; fi
        shift 2
        exec {sys.executable} {script} "$@"
    """))
    exe.chmod(0o755)
    return exe


def known_failures_file(workspace: Path) -> str:
    (workspace / "known-failures.toml").write_text(textwrap.dedent("""\
        [[known_failure]]
        promise = 4
        torch = ">=2.15"
        reason = "our pooled storage is shared on 2.15 (issue 7)"
    """))
    return "known-failures.toml"


def test_a_bots_pull_request_with_a_regression_fails_as_the_gate_does(tmp_path, installed_action):
    """The baseline is the torch installed here, run for real; the candidate (read from the change) is a
    fake 2.15.0 that breaks promise 2 (a regression) and promise 4 (a listed known failure)."""
    baseline = torch_release()
    workspace, base = team_repo(tmp_path / "team", baseline, "2.15.0")
    candidate_python = fake_cell_python(tmp_path / "candidate", "2.15.0", fails=("2", "4"))
    run = run_action(tmp_path, workspace, {
        "impl": "cpugpu_conformance.reference:CpuGpuBuffer",
        "known-failures": known_failures_file(workspace),
        "baseline-python": sys.executable, "candidate-python": str(candidate_python),
    }, github={"event": {"pull_request": {"base": {"sha": base}}}}, runner_bin=installed_action)

    assert run.outputs["target"]["baseline"] == baseline and run.outputs["target"]["candidate"] == "2.15.0"
    for step in ("The torch bump and its two cells", "Baseline cell", "Candidate cell", "Gate",
                 "Report (the matrix page of the two cells)"):
        assert run.outcomes[step] == "success", f"{step}: {run.logs.get(step, '')[-3000:]}"
    assert run.outputs["gate"]["exit"] == "1"
    assert run.outcomes["Exit as the gate did"] == "failure" and run.exit_code == 1
    assert run.not_run == ["actions/setup-python@e797f83bcb11b83ae66e0230d6156d7c80228e7c",
                           "astral-sh/setup-uv@681c641aba71e4a1c380be3ab5e12ad51f415867",
                           "Install cpugpu-conformance", "Upload the result files, logs, matrix and page"]

    results_dir = tmp_path / "runner-temp" / "cpugpu-conformance" / "results"
    real = json.loads((results_dir / f"torch-{baseline}-cpu.json").read_text())
    assert real["status"] == "completed" and real["environment"]["torch"].startswith(baseline)
    assert any(a.startswith("--known-failures=") and a.endswith("/team/known-failures.toml") for a in real["argv"])
    # The suite the installed package ships (a copy of it), run in the team's repository: no checkout.
    cell_log = (results_dir / f"torch-{baseline}-cpu.log").read_text()
    assert "cpugpu_conformance/suite/suite.ini" in cell_log and f"{REPO}/conformance" not in cell_log, cell_log[:3000]
    assert not (workspace / ".hypothesis").exists() and not (workspace / "results").exists()
    seen = json.loads((tmp_path / "candidate" / "args.jsonl").read_text().splitlines()[0])
    assert f"--known-failures={workspace / 'known-failures.toml'}" in seen
    assert "--impl=cpugpu_conformance.reference:CpuGpuBuffer" in seen

    log = run.logs["Gate"]
    assert "REGRESSION 1: promise 2 (Zeroed) on cpu" in log
    assert "KNOWN FAILURE: promise 4 (Two storages) on cpu: passed -> known failure (our pooled storage" in log
    summary = run.summary
    assert summary.startswith("### cpugpu-conformance gate: FAIL")
    assert "#### Regressions" in summary and "#### Known failures" in summary
    assert "<details><summary>Reproducer: promise 2 on cpu" in summary and "# reproducer of promise 2" in summary
    uploaded = {p.name for p in run.uploaded}
    assert {f"torch-{baseline}-cpu.json", "torch-2.15.0-cpu.json", f"torch-{baseline}-cpu.log",
            "torch-2.15.0-cpu.log", "matrix.yaml", "compat"} <= uploaded


def test_a_candidate_that_fails_only_as_listed_passes(tmp_path, installed_action):
    workspace = tmp_path / "team"
    workspace.mkdir()
    run = run_action(tmp_path, workspace, {
        "impl": "ours/buffer.py:OurBuffer", "baseline": "2.14.1", "candidate": "2.15.0",
        "known-failures": known_failures_file(workspace),
        "baseline-python": str(fake_cell_python(tmp_path / "baseline", "2.14.1")),
        "candidate-python": str(fake_cell_python(tmp_path / "candidate", "2.15.0", fails=("4",))),
    }, runner_bin=installed_action)
    assert run.outputs["gate"]["exit"] == "0", run.logs["Gate"]
    assert not run.failed and run.exit_code == 0
    assert run.summary.startswith("### cpugpu-conformance gate: PASS") and "#### Known failures" in run.summary
    seen = json.loads((tmp_path / "baseline" / "args.jsonl").read_text().splitlines()[0])
    assert f"--impl={workspace / 'ours' / 'buffer.py'}:OurBuffer" in seen  # a file spec made absolute


def test_a_bad_known_failures_file_stops_at_the_first_cell_and_never_passes(tmp_path, installed_action):
    workspace = tmp_path / "team"
    workspace.mkdir()
    (workspace / "kf.toml").write_text("[[known_failure]]\npromise = 5\n")
    run = run_action(tmp_path, workspace, {
        "impl": "x.py:X", "baseline": "2.14.1", "candidate": "2.15.0", "known-failures": "kf.toml",
        "baseline-python": str(fake_cell_python(tmp_path / "baseline", "2.14.1")),
        "candidate-python": str(fake_cell_python(tmp_path / "candidate", "2.15.0")),
    }, runner_bin=installed_action)
    assert run.outcomes["Baseline cell"] == "failure" and run.codes["Baseline cell"] == 2
    assert "--known-failures kf.toml: [[known_failure]] 1: no reason" in run.logs["Baseline cell"]
    assert run.outcomes["Candidate cell"] == run.outcomes["Gate"] == "skipped"
    assert run.exit_code == 2 and run.summary == ""


def test_a_job_whose_pytest_never_loads_the_plugin_leaves_no_earlier_pass_for_the_gate(tmp_path, installed_action):
    """Issue 28, item 6: the job sets PYTEST_ADDOPTS="-p no:<the plugin>", and an earlier use of the action in
    the job left passing results where the cells write. Each cell marks its path before pytest starts, so
    the gate reads this run's answers (the baseline's: error), never the earlier passes."""
    import result_factory as rf

    baseline = torch_release()
    workspace = tmp_path / "team"
    workspace.mkdir()
    results_dir = tmp_path / "runner-temp" / "cpugpu-conformance" / "results"
    for release in (baseline, "2.15.0"):
        results_dir.mkdir(parents=True, exist_ok=True)
        rf.write(results_dir, f"torch-{release}-cpu.json", rf.completed(release, cell=f"torch-{release}-cpu"))
    run = run_action(tmp_path, workspace, {
        "impl": "cpugpu_conformance.reference:CpuGpuBuffer", "baseline": baseline, "candidate": "2.15.0",
        "baseline-python": sys.executable, "candidate-python": str(fake_cell_python(tmp_path / "candidate", "2.15.0")),
    }, runner_bin=installed_action, env={"PYTEST_ADDOPTS": "-p no:cpugpu_conformance.testing.plugin"})
    assert run.outcomes["Baseline cell"] == "success", run.logs["Baseline cell"][-3000:]  # exit 1: not clean
    real = json.loads((results_dir / f"torch-{baseline}-cpu.json").read_text())
    assert real["status"] == "error", real
    assert run.outputs["gate"]["exit"] == "2" and run.exit_code == 2, run.logs["Gate"]
    assert "did not complete: error" in run.logs["Gate"] and "NO ANSWER" in run.summary


def test_no_candidate_and_no_bump_in_the_change_stops_before_any_cell(tmp_path, installed_action):
    workspace, base = team_repo(tmp_path / "team", "2.14.1", "2.14.1")
    run = run_action(tmp_path, workspace, {"impl": "x.py:X"},
                     github={"event": {"pull_request": {"base": {"sha": base}}}}, runner_bin=installed_action)
    assert run.outcomes["The torch bump and its two cells"] == "failure"
    assert "no exact torch pin changed since" in run.logs["The torch bump and its two cells"]
    assert all(run.outcomes.get(s) == "skipped" for s in ("Baseline cell", "Candidate cell", "Gate",
                                                         "Exit as the gate did"))
