"""The composite action at the repository root (issue 24, item 1): its shape, its pins, the
env-only rule, an offline zizmor audit, and its steps run here as GitHub runs them (bash
-eo pipefail, each step's env:, $GITHUB_OUTPUT and $GITHUB_STEP_SUMMARY), against a team's
repository made in a temporary folder. Also `cpugpu-conformance bump-target`, which reads the
bump from a real git history, and `cell --impl` with a team's own tests.

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
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from cell_helpers import fake_torch
from markdown_text import outside_code

from cpugpu_conformance.runner import bump
from cpugpu_conformance.runner import matrix as matrices

REPO = Path(__file__).resolve().parents[1]
ACTION_FILE = REPO / "action.yml"
ACTION = yaml.safe_load(ACTION_FILE.read_text(encoding="utf-8"))
STEPS = ACTION["runs"]["steps"]
BIN = Path(sys.executable).parent
EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
PINNED = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")
INSTALLED_TORCH = "2.13.0"  # the test environment's (a cell checks it got the release it asked for)


def tool(name: str) -> str:
    found = shutil.which(name, path=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    if not found:
        pytest.fail(f"{name} is not installed: pip install -e '.[test]'")
    return found


def torch_release() -> str:
    from importlib.metadata import version

    return version("torch").split("+", 1)[0]


# ---------------------------------------------------------------------------- its shape


def test_it_is_a_composite_action_with_the_inputs_the_issue_names():
    assert ACTION["runs"]["using"] == "composite"
    for name in ("impl", "baseline", "candidate", "python", "device", "known-failures"):
        assert name in ACTION["inputs"], name
        assert ACTION["inputs"][name]["description"].strip()
    assert ACTION["inputs"]["impl"]["required"] is True
    assert all(ACTION["inputs"][n].get("required") is False for n in ACTION["inputs"] if n != "impl")


def test_every_action_it_uses_is_pinned_by_full_sha_with_its_version_beside_it():
    uses = [s["uses"] for s in STEPS if "uses" in s]
    assert uses, "the action uses setup-python, setup-uv and upload-artifact"
    for use in uses:
        assert PINNED.match(use), f"{use}: pin actions by their full commit SHA"
    text = ACTION_FILE.read_text(encoding="utf-8")
    for use in uses:
        line = next(line for line in text.splitlines() if use in line)
        assert re.search(r"# v\d", line), f"{line.strip()}: say which version the SHA is"


def test_it_pins_the_same_releases_as_the_projects_workflow():
    workflow = (REPO / ".github" / "workflows" / "conformance.yml").read_text(encoding="utf-8")
    pins = dict(re.findall(r"uses: ([\w./-]+)@([0-9a-f]{40})", workflow))
    for use in (s["uses"] for s in STEPS if "uses" in s):
        name, sha = use.split("@")
        assert pins.get(name) in (None, sha), f"{name}: {sha} here, {pins[name]} in conformance.yml"


def test_inputs_reach_scripts_only_through_env():
    for step in STEPS:
        if "run" in step:
            assert "${{" not in step["run"], f"{step.get('name')}: no ${{{{ }}}} inside run:, use env:"
            assert step.get("shell") == "bash", f"{step.get('name')}: a composite step names its shell"


def test_every_input_is_used_and_every_expression_names_a_declared_one():
    text = ACTION_FILE.read_text(encoding="utf-8")
    used = set(re.findall(r"inputs\.([\w-]+)", text))
    assert used == set(ACTION["inputs"]), (used ^ set(ACTION["inputs"]))
    ids = {s.get("id") for s in STEPS}
    for step_id in re.findall(r"steps\.([\w-]+)\.", text):
        assert step_id in ids, step_id


# The commands a step may call: the package's own, and the shell's. `uv` only installs the package.
SHELL_WORDS = {"if", "then", "else", "fi", "mkdir", "export", "echo", "exit", "[", "cpugpu-conformance"}


def test_its_steps_call_only_the_packages_own_commands():
    for step in STEPS:
        for line in step.get("run", "").splitlines():
            line = line.split("#", 1)[0].strip()
            for part in re.split(r"&&|\|\||;", line):
                words = part.split()
                if not words or re.match(r"^[A-Za-z_]\w*(\+)?=", words[0]) or words[0].startswith(("--", "$", ")")):
                    continue  # an assignment, or the continuation of a command
                if step.get("id") == "install":
                    assert words[:3] == ["uv", "pip", "install"], line
                    continue
                assert words[0] in SHELL_WORDS, f"{step.get('name')}: {words[0]!r} in {line!r}"


def test_zizmor_finds_nothing():
    proc = subprocess.run([tool("zizmor"), "--offline", "--min-severity", "low", str(ACTION_FILE)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_githubs_schema_for_actions_accepts_it():
    proc = subprocess.run([tool("check-jsonschema"), "--builtin-schema", "vendor.github-actions", str(ACTION_FILE)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_lint_checks_it():
    sys.path.insert(0, str(REPO))
    try:
        import noxfile
    finally:
        sys.path.remove(str(REPO))
    checks = noxfile.workflow_checks()
    assert ["check-jsonschema", "--builtin-schema", "vendor.github-actions", "action.yml"] in checks
    assert any(c[0] == "zizmor" and "action.yml" in c for c in checks)


def test_the_docs_show_the_lines_and_every_input():
    docs = (REPO / "docs" / "gating.md").read_text(encoding="utf-8")
    for name in ACTION["inputs"]:
        assert f"`{name}`" in docs, name
    usage = re.search(r"```yaml\n(.*?)```", docs, re.S)
    assert usage, "docs/gating.md shows the workflow lines in a yaml block"
    job = yaml.safe_load(usage.group(1))
    steps = job["jobs"]["torch-gate"]["steps"]
    ours = [s for s in steps if "cpugpu-conformance@" in s.get("uses", "")]
    assert len(ours) == 1 and "impl" in ours[0]["with"]
    assert len([line for line in usage.group(1).splitlines() if line.strip()]) <= 25


# ---------------------------------------------------------------------------- its steps, run here


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


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def team_repo(where: Path, before: str, after: str) -> tuple[Path, str]:
    """A team's repository whose pull request moves requirements.txt from torch ``before`` to ``after``;
    returns it and the base commit."""
    where.mkdir(parents=True)
    git(where, "init", "-q")
    git(where, "config", "user.email", "team@example.com")
    git(where, "config", "user.name", "team")
    (where / "requirements.txt").write_text(f"numpy\ntorch=={before}\n")
    git(where, "add", ".")
    git(where, "commit", "-qm", "base")
    base = git(where, "rev-parse", "HEAD")
    (where / "requirements.txt").write_text(f"numpy\ntorch=={after}  # bumped by the bot\n")
    git(where, "commit", "-qam", "Bump torch")
    return where, base


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


# ---------------------------------------------------------------------------- cell --impl with a team's own tests

TEAM_TESTS = """\
from cpugpu_conformance.testing import ZeroedTests
from cpugpu_conformance.variants import OnesLikeGpuBuffer


class TestOurs(ZeroedTests):
    buffer_cls = OnesLikeGpuBuffer
"""


def test_cell_runs_a_teams_own_tests_with_the_plugin_and_its_known_failures(tmp_path):
    project = tmp_path / "team"
    (project / "tests").mkdir(parents=True)
    (project / "tests" / "conftest.py").write_text('pytest_plugins = ["cpugpu_conformance.testing.plugin"]\n')
    (project / "tests" / "test_ours.py").write_text(TEAM_TESTS)
    (project / "kf.toml").write_text('[[known_failure]]\npromise = 2\nreason = "ones"\n')
    release = torch_release()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO / "src"), os.environ.get("PYTHONPATH")) if p))
    proc = subprocess.run([sys.executable, "-m", "cpugpu_conformance", "cell", release, "--matrix", str(REPO / "matrix.yaml"),
                           "--python", sys.executable, "--results", str(tmp_path / "results"), "--impl", "tests",
                           "--known-failures", "kf.toml", "--", "--cpugpu-promise", "2"],
                          cwd=project, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    result = json.loads((tmp_path / "results" / f"torch-{release}-cpu.json").read_text())
    assert result["hypothesis_profile"] == "cpugpu-ci" and result["requested"]["tests"] == "tests"
    entry = result["promises"]["2"]["devices"]["cpu"]
    assert entry["verdict"] == "known_failure" and entry["failures"][0]["test"].startswith("tests/test_ours.py::TestOurs")


@pytest.mark.parametrize("value, spec", [
    ("pkg.mod:Cls", True), ("path/to/file.py:Cls", True), ("pkg:Outer.Inner", True),
    ("tests", False), ("tests/test_ours.py", False), ("tests/test_ours.py::TestOurs", False), ("C:\\x", False),
])
def test_impl_tells_a_class_from_a_test_path(value, spec):
    from cpugpu_conformance.cli.cell import is_impl_spec

    assert is_impl_spec(value) is spec


# ---------------------------------------------------------------------------- bump-target


@pytest.mark.parametrize("name, text, pins", [
    ("requirements.txt", "numpy\ntorch==2.14.1\n", {"2.14.1"}),
    ("requirements/dev-requirements.in", "Torch === 2.14.1+cpu ; python_version >= '3.9'  # pinned\n", {"2.14.1"}),
    ("requirements.txt", "torch==2.14.1 \\\n    --hash=sha256:abc\n", {"2.14.1"}),
    ("requirements.txt", "torch[opt]==2.14.1\n", {"2.14.1"}),
    ("requirements.txt", "torch @ https://download.pytorch.org/whl/cpu/torch-2.14.1%2Bcpu-cp311-linux_x86_64.whl\n",
     {"2.14.1"}),
    ("requirements.txt", "torch>=2.14\n# torch==2.0.0\ntorchvision==0.20.0\n", set()),
    ("constraints.txt", "torch==2.14.1\n", {"2.14.1"}),
    ("pyproject.toml", '[project]\ndependencies = ["torch==2.14.1", "numpy"]\n', {"2.14.1"}),
    ("pyproject.toml", '[project.optional-dependencies]\ngpu = ["torch==2.14.1"]\n', {"2.14.1"}),
    ("pyproject.toml", '[tool.poetry.dependencies]\ntorch = "2.14.1"\n', {"2.14.1"}),
    ("pyproject.toml", '[tool.poetry.dependencies]\ntorch = {version = "^2.14"}\n', set()),
    ("uv.lock", '[[package]]\nname = "torch"\nversion = "2.14.1+cpu"\n[[package]]\nname = "numpy"\nversion = "2.1.0"\n',
     {"2.14.1"}),
    ("poetry.lock", '[[package]]\nname = "torch"\nversion = "2.14.1"\n', {"2.14.1"}),
    ("Pipfile.lock", json.dumps({"default": {"torch": {"version": "==2.14.1"}}}), {"2.14.1"}),
    ("pyproject.toml", "not = [toml", set()),
])
def test_torch_pins_are_read_from_every_kind_of_file(name, text, pins):
    assert bump.is_pin_file(name)
    assert bump.torch_pins(name, text) == pins


def bump_target(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO / "src"), os.environ.get("PYTHONPATH")) if p))
    return subprocess.run([sys.executable, "-m", "cpugpu_conformance", "bump-target", *args], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=120)


def test_bump_target_reads_a_lock_file_bump_beside_a_range(tmp_path):
    repo, base = team_repo(tmp_path / "team", "2.14.1", "2.14.1")
    (repo / "pyproject.toml").write_text('[project]\nname = "x"\ndependencies = ["torch>=2.14"]\n')
    (repo / "uv.lock").write_text('[[package]]\nname = "torch"\nversion = "2.14.1"\n')
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "lock")
    base = git(repo, "rev-parse", "HEAD")
    (repo / "uv.lock").write_text('[[package]]\nname = "torch"\nversion = "2.15.0"\n')  # uncommitted: the working tree
    proc = bump_target(repo, "--base-ref", base, "--matrix-out", str(tmp_path / "m.yaml"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["baseline=2.14.1", "candidate=2.15.0", "baseline_cell=torch-2.14.1-cpu",
                                        "candidate_cell=torch-2.15.0-cpu", f"matrix={tmp_path / 'm.yaml'}"]
    matrix = matrices.load(tmp_path / "m.yaml")
    assert [c.name for c in matrix.cells] == ["torch-2.14.1-cpu", "torch-2.15.0-cpu"]
    assert (matrix.baseline, matrix.candidates) == ("2.14.1", ("2.15.0",))


def test_given_releases_need_no_git_and_are_paired_as_bisect_pairs_them(tmp_path):
    proc = bump_target(tmp_path, "--baseline", "2.1.2", "--candidate", "2.3.1", "--device", "cuda", "--python", "3.10",
                       "--packages", "transformers==4.44\n# a comment\n", "--index-url", "https://download.pytorch.org/whl/cu121",
                       "--matrix-out", str(tmp_path / "out" / "m.yaml"))
    assert proc.returncode == 0, proc.stderr
    matrix = matrices.load(tmp_path / "out" / "m.yaml")
    old, new = matrix.releases
    assert (old.numpy, old.extra_packages) == ("<2", ("setuptools", "transformers==4.44"))
    assert (new.numpy, new.extra_packages) == (None, ("transformers==4.44",))
    assert matrix.python == "3.10" and [d.name for d in matrix.devices] == ["cuda"]
    assert matrix.index_url == "https://download.pytorch.org/whl/cu121"


@pytest.mark.parametrize("case", ["two bumps", "no bump", "no such ref", "no ref", "same release", "not a release",
                                  "bad package"])
def test_bump_target_refuses_in_one_line_exit_2(tmp_path, case):
    repo, base = team_repo(tmp_path / "team", "2.14.1", "2.15.0")
    args, expected = {
        "two bumps": (["--base-ref", base], "do not name one bump (requirements.txt: 2.14.1 -> 2.15.0; "
                                             "tools/requirements.txt: (none) -> 2.16.0)"),
        "no bump": (["--base-ref", "HEAD"], "no exact torch pin changed since HEAD (no requirements"),
        "no such ref": (["--base-ref", "0" * 40], "no such commit in . (on CI, check out with fetch-depth: 0)"),
        "no ref": (["--baseline", "2.14.1"], "no candidate release given, and no --base-ref"),
        "same release": (["--baseline", "2.15.0", "--candidate", "2.15.0"], "both torch 2.15.0: there is no bump"),
        "not a release": (["--baseline", "2.15.0", "--candidate", "two"], "--candidate 'two': not a torch release"),
        "bad package": (["--baseline", "2.14.1", "--candidate", "2.15.0", "--packages", "numpy<2",
                         "--matrix-out", "m.yaml"], "--packages 'numpy<2': torch and numpy are the cell's own"),
    }[case]
    if case == "two bumps":
        (repo / "tools").mkdir()
        (repo / "tools" / "requirements.txt").write_text("torch==2.16.0\n")
        git(repo, "add", ".")
        git(repo, "commit", "-qm", "tools")
    proc = bump_target(repo, *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cpugpu-conformance bump-target: error: "), lines
    assert expected in lines[0], lines[0]


# ---------------------------------------------------------------------------- the gate's job summary


def gate_with_summary(tmp_path: Path, baseline: dict, candidate: dict, *extra: str) -> tuple[int, str]:
    import result_factory as rf

    from cpugpu_conformance.cli.dispatch import main

    paths = [str(rf.write(tmp_path, name, data)) for name, data in (("b.json", baseline), ("c.json", candidate))]
    summary = tmp_path / "summary.md"
    summary.write_text("earlier steps' summary\n")
    code = main(["gate", "--baseline", paths[0], "--candidate", paths[1], "--job-summary", str(summary), *extra])
    text = summary.read_text()
    assert text.startswith("earlier steps' summary\n"), "the summary is appended to, never replaced"
    return code, text[len("earlier steps' summary\n"):]


def test_the_job_summary_escapes_what_a_result_holds_and_folds_each_reproducer(tmp_path, capsys):
    import result_factory as rf

    reproducer = "import torch\n# a fence inside: ````\nprint('<script>')\n"
    failing = {("2", "cpu"): [rf.failure("t::a|<b>", "AssertionError: <img src=x> | broke", reproducer)]}
    code, summary = gate_with_summary(tmp_path, rf.completed("2.14.1"), rf.completed("2.15.0", failed=failing))
    assert code == 1
    assert summary.startswith("### cpugpu-conformance gate: FAIL\n\n**FAIL: 1 regression(s) out of ")
    outside = outside_code(summary)  # inside a fence GitHub shows text as it is
    assert "<img" not in outside and "<script>" not in outside and "&lt;img src=x&gt;" in outside
    row = next(line for line in summary.splitlines() if line.startswith("| 2 Zeroed"))
    assert row.count("|") == 5, row  # a pipe in a message never adds a column
    assert "<details><summary>Reproducer: promise 2 on cpu: <code>t::a&#124;&lt;b&gt;</code></summary>" in summary
    fence = "`````"  # longer than the longest run of backticks in the reproducer
    assert f"{fence}python\n{reproducer.rstrip()}\n{fence}" in summary and "</details>" in summary


def test_the_job_summary_of_a_gate_that_cannot_compare_says_so(tmp_path, capsys):
    import result_factory as rf

    code, summary = gate_with_summary(tmp_path, rf.completed("2.14.1"),
                                      rf.incomplete("2.15.0", "not_installed", "no such torch"))
    assert code == 2
    assert summary.startswith("### cpugpu-conformance gate: NO ANSWER\n\n**Nothing to compare, refusing to pass** (exit 2)")
    assert "did not complete: not installed: no such torch" in summary


def test_a_job_summary_that_cannot_be_written_never_turns_a_failure_into_a_pass(tmp_path, capsys):
    import result_factory as rf

    from cpugpu_conformance.cli.dispatch import main

    paths = [str(rf.write(tmp_path, n, d)) for n, d in (("b.json", rf.completed("2.14.1")),
                                                        ("c.json", rf.completed("2.15.0")))]
    (tmp_path / "dir").mkdir()
    assert main(["gate", "--baseline", paths[0], "--candidate", paths[1], "--job-summary", str(tmp_path / "dir")]) == 2
    assert f"--job-summary {tmp_path / 'dir'}: cannot write" in capsys.readouterr().err
