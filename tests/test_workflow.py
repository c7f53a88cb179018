"""The CI workflow: GitHub's schema, an offline zizmor audit, its shape, and its inline scripts run for real.

Needs the `test` extra (check-jsonschema, zizmor, nox); no network.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from cell_helpers import fake_python, is_gone, wait_for
from test_runner_processes import HELD_SUITE, held_suite_pids

from cpugpu_conformance import results
from cpugpu_conformance.runner import matrix as matrices

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "conformance.yml"
BIN = Path(sys.executable).parent
PINNED = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")


def tool(name: str) -> str:
    found = shutil.which(name, path=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    if not found:
        pytest.fail(f"{name} is not installed: pip install -e '.[test]'")
    return found


def load_workflow(text: str | None = None) -> dict:
    data = yaml.safe_load(text if text is not None else WORKFLOW.read_text(encoding="utf-8"))
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as true
    return data


WF = load_workflow()
JOBS = WF["jobs"]


def steps(job: str) -> list[dict]:
    return JOBS[job]["steps"]


def step_named(job: str, fragment: str) -> dict:
    matches = [s for s in steps(job) if fragment in s.get("name", "")]
    assert len(matches) == 1, f"{job}: expected one step named like {fragment!r}"
    return matches[0]


def runs(job: str) -> str:
    return "\n".join(s.get("run", "") for s in steps(job))


def uses(job: str, action: str) -> list[dict]:
    return [s for s in steps(job) if s.get("uses", "").startswith(action + "@")]


# ----------------------------------------------------------------------------- validators


def check_schema(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(path)],
        capture_output=True, text=True, timeout=120, check=False,
    )


def audit(path: Path) -> tuple[int, list[dict]]:
    run = subprocess.run(
        [tool("zizmor"), "--offline", "--min-severity", "medium", "--format", "json", str(path)],
        capture_output=True, text=True, timeout=120, check=False, env={**os.environ, "NO_COLOR": "1"},
    )
    return run.returncode, json.loads(run.stdout or "[]")


def test_workflow_matches_githubs_schema():
    run = check_schema(WORKFLOW)
    assert run.returncode == 0, run.stdout + run.stderr


def test_schema_check_rejects_a_broken_workflow(tmp_path):
    broken = tmp_path / "broken.yml"
    broken.write_text(WORKFLOW.read_text(encoding="utf-8").replace("runs-on: ubuntu-latest", "runs_on: ubuntu-latest", 1))
    assert check_schema(broken).returncode != 0


def test_workflow_passes_zizmor_offline_with_no_medium_or_higher_finding():
    code, findings = audit(WORKFLOW)
    summary = [(f["ident"], f["determinations"]["severity"]) for f in findings]
    assert (code, summary) == (0, [])


@pytest.mark.parametrize(
    "old, new, audit_id",
    [
        # an unpinned action
        ("actions/checkout@08c6903cd8c0fde910a37f88322edcfb5dd907a8 # v5.0.0", "actions/checkout@v5", "unpinned-uses"),
        # a matrix value expanded into a script
        ('nox --non-interactive -s "$SESSION"', "nox --non-interactive -s '${{ matrix.session }}'", "template-injection"),
    ],
)
def test_zizmor_catches_what_the_workflow_avoids(tmp_path, old, new, audit_id):
    text = WORKFLOW.read_text(encoding="utf-8")
    assert old in text
    risky = tmp_path / ".github" / "workflows" / "risky.yml"
    risky.parent.mkdir(parents=True)
    risky.write_text(text.replace(old, new))
    code, findings = audit(risky)
    assert code != 0 and audit_id in {f["ident"] for f in findings}


# ----------------------------------------------------------------------------- shape


def test_triggers_pull_request_on_the_matrix_and_suite_weekly_and_by_hand():
    on = WF["on"]
    assert {"matrix.yaml", "conformance/**", "src/**", "noxfile.py"} <= set(on["pull_request"]["paths"])
    _minute, _hour, dom, month, dow = on["schedule"][0]["cron"].split()
    assert (dom, month) == ("*", "*") and dow.isdigit(), "weekly: one day of the week"
    assert "workflow_dispatch" in on


def test_four_jobs_list_run_report_and_deploy():
    assert list(JOBS) == ["cells", "cell", "report", "deploy"]
    assert JOBS["cell"]["needs"] == "cells"
    assert "cell" in JOBS["report"]["needs"]
    assert JOBS["deploy"]["needs"] == "report"


def test_no_inline_python_every_step_calls_a_command():
    for name, job in JOBS.items():
        for step in job["steps"]:
            assert step.get("shell", "bash") == "bash", f"{name}: {step.get('name')} is an inline script"


def test_cells_job_lists_the_cells_into_the_matrix_output():
    listing = step_named("cells", "job matrix")
    assert "cpugpu-conformance cells --json" in listing["run"]
    assert JOBS["cells"]["outputs"]["matrix"] == f"${{{{ steps.{listing['id']}.outputs.matrix }}}}"


def test_cell_job_runs_one_session_on_the_runner_its_matrix_entry_names():
    cell = JOBS["cell"]
    assert cell["runs-on"] == "${{ matrix.runner }}"
    assert cell["strategy"]["matrix"] == "${{ fromJSON(needs.cells.outputs.matrix) }}"
    assert cell["strategy"]["fail-fast"] is False
    assert cell["timeout-minutes"] == "${{ matrix.timeout_minutes }}"
    assert cell["env"]["SESSION"] == "${{ matrix.session }}"
    assert 'nox --non-interactive -s "$SESSION"' in runs("cell")


def test_cell_job_uploads_its_result_under_a_unique_name_even_when_it_failed():
    upload = uses("cell", "actions/upload-artifact")
    assert len(upload) == 1
    assert upload[0]["if"] == "${{ always() }}"
    assert upload[0]["with"]["name"] == "result-${{ matrix.cell }}"
    assert upload[0]["with"]["path"].splitlines() == ["results/${{ matrix.cell }}.json", "results/${{ matrix.cell }}.log"]
    assert step_named("cell", "left no result")["if"] == "${{ always() }}"


def test_report_job_runs_after_failed_cells_and_publishes_compat():
    report = JOBS["report"]
    assert "!cancelled()" in report["if"] or "always()" in report["if"]
    download = uses("report", "actions/download-artifact")
    assert download[0]["with"] == {"pattern": "result-*", "path": "results", "merge-multiple": True}
    commands = runs("report")
    assert "nox --non-interactive -s report" in commands and "nox --non-interactive -s gate" in commands
    upload = uses("report", "actions/upload-artifact")
    assert upload[0]["with"]["name"] == "compat" and upload[0]["with"]["path"] == "compat/"
    assert upload[0]["if"] == "${{ always() }}"
    names = [s.get("name", s.get("uses")) for s in steps("report")]
    assert names.index(upload[0]["name"]) < names.index(step_named("report", "Gate")["name"]), (
        "compat/ is published before the gate can fail the job"
    )


def test_hardening_pins_permissions_credentials_and_no_expressions_in_scripts():
    assert WF["permissions"] == {}
    for name, job in JOBS.items():
        wanted = {"pages": "write", "id-token": "write"} if name == "deploy" else {"contents": "read"}
        assert job["permissions"] == wanted, name
        assert isinstance(job.get("timeout-minutes"), (int, str)), name
        for step in job["steps"]:
            if "uses" in step:
                assert PINNED.match(step["uses"]), f"{name}: {step['uses']} is not pinned to a commit"
            if step.get("uses", "").startswith("actions/checkout@"):
                assert step["with"]["persist-credentials"] is False
            assert "${{" not in step.get("run", ""), f"{name}: expression inside a script"
    text = WORKFLOW.read_text(encoding="utf-8")
    for line in text.splitlines():
        if "uses:" in line:
            assert re.search(r"@[0-9a-f]{40} # v\d+\.\d+\.\d+$", line), f"no version comment: {line.strip()}"


def test_the_tools_ci_installs_cover_the_noxfile_script_dependencies():
    """CI installs `nox .`; the noxfile's own dependencies must come with that."""
    import tomllib  # Python 3.11+, like the dev environment

    header = re.search(r"^# /// script\n(.*?)^# ///$", (ROOT / "noxfile.py").read_text(), re.DOTALL | re.MULTILINE)
    assert header, "noxfile.py declares its dependencies in a `# /// script` block"
    needed = tomllib.loads("\n".join(line[2:] for line in header.group(1).splitlines()))["dependencies"]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]

    def name(requirement: str) -> str:
        return re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower()

    tools = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["tools"]
    assert {name(r) for r in needed} <= {name(r) for r in project + tools} | {"nox"}
    for job in ("cells", "cell", "report"):
        assert '"nox>=2025.2.9" ".[tools]"' in runs(job), job


# ----------------------------------------------------------------------------- GitHub Pages


def github_if(expression: str, *, event: str, branch: str = "main", default_branch: str = "main",
              pages_artifact: str = "", cancelled: bool = False) -> bool:
    """Evaluate a job's or step's `if:` the way GitHub would, for the contexts it uses here."""
    from types import SimpleNamespace as NS

    body = expression.strip()
    assert body.startswith("${{") and body.endswith("}}"), body
    body = body[3:-2].replace("!=", " NE ").replace("!", " not ").replace(" NE ", " != ")
    body = body.replace("&&", " and ").replace("||", " or ")
    contexts = {
        "github": NS(event_name=event, ref_name=branch, event=NS(repository=NS(default_branch=default_branch))),
        "needs": NS(report=NS(outputs=NS(pages_artifact=pages_artifact))),
        "cancelled": lambda: cancelled,
    }
    return bool(eval(" ".join(body.split()), {"__builtins__": {}}, contexts))  # our own workflow's expressions


DEPLOY_CASES = [
    # (event, branch, report uploaded the page, cancelled) -> deploys
    (("schedule", "main", "123", False), True),
    (("schedule", "main", "", False), False),  # report failed before it published
    (("schedule", "main", "123", True), False),
    (("schedule", "release-1", "123", False), False),
    (("pull_request", "main", "123", False), False),
    (("workflow_dispatch", "main", "123", False), False),
    (("push", "main", "123", False), False),
]


@pytest.mark.parametrize(("case", "deploys"), DEPLOY_CASES)
def test_deploy_runs_only_on_the_scheduled_run_of_the_default_branch_after_report(case, deploys):
    event, branch, artifact, cancelled = case
    deploy = JOBS["deploy"]
    assert deploy["needs"] == "report"
    assert github_if(deploy["if"], event=event, branch=branch, pages_artifact=artifact, cancelled=cancelled) is deploys
    upload = step_named("report", "GitHub Pages")
    assert github_if(upload["if"], event=event, branch=branch) is (event == "schedule" and branch == "main")


def test_report_uploads_compat_for_pages_after_the_report_and_before_the_gate():
    names = [s.get("name") for s in steps("report")]
    upload = step_named("report", "GitHub Pages")
    assert upload["uses"].startswith("actions/upload-pages-artifact@") and upload["with"] == {"path": "compat/"}
    assert names.index(step_named("report", "Publish")["name"]) < names.index(upload["name"]) < names.index(
        step_named("report", "Gate")["name"]), "the page is the report's, uploaded before the gate can fail the job"
    assert JOBS["report"]["outputs"]["pages_artifact"] == f"${{{{ steps.{upload['id']}.outputs.artifact_id }}}}"


def test_deploy_job_deploys_to_the_github_pages_environment_with_only_the_pages_permissions():
    deploy = JOBS["deploy"]
    assert deploy["permissions"] == {"pages": "write", "id-token": "write"}
    assert deploy["environment"] == {"name": "github-pages", "url": "${{ steps.deployment.outputs.page_url }}"}
    [step] = deploy["steps"]
    assert step["uses"].startswith("actions/deploy-pages@") and step["id"] == "deployment"
    for name, job in JOBS.items():
        if name != "deploy":
            assert "pages" not in job["permissions"] and "id-token" not in job["permissions"], name


# ----------------------------------------------------------------------------- inline scripts, run


def run_step_script(job: str, fragment: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """Run a `shell: bash` step as the runner does (bash -eo pipefail SCRIPT) in ``cwd``, the venv's
    tools (its python and cpugpu-conformance among them) first on PATH."""
    step = step_named(job, fragment)
    assert step["shell"] == "bash"
    script = Path(env["RUNNER_TEMP"]) / "step.sh"
    script.write_text(step["run"], encoding="utf-8")
    full_env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", **env}
    full_env.pop("CONFORMANCE_MATRIX", None)
    full_env.update(env)
    shell = ["bash", "--noprofile", "--norc", "-eo", "pipefail"]
    return subprocess.run([*shell, str(script)], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=120, check=False)


def run_listing(tmp_path: Path, matrix_file: Path | None = None) -> tuple[subprocess.CompletedProcess, Path]:
    """The cells job's listing step, at the repository root (matrix.yaml) as on CI."""
    tool("cpugpu-conformance")
    output = tmp_path / "github_output"
    env = {"GITHUB_OUTPUT": str(output), "RUNNER_TEMP": str(tmp_path)}
    if matrix_file:
        env["CONFORMANCE_MATRIX"] = str(matrix_file)
    return run_step_script("cells", "job matrix", ROOT, env), output


def listed_matrix(tmp_path: Path, matrix_file: Path | None = None) -> list[dict]:
    run, output = run_listing(tmp_path, matrix_file)
    assert run.returncode == 0, run.stdout + run.stderr
    key, _, value = output.read_text().strip().partition("=")
    assert key == "matrix"
    return json.loads(value)["include"]


def test_listing_gives_one_job_per_matrix_cell_with_its_runner(tmp_path):
    include = listed_matrix(tmp_path)
    m = matrices.load(ROOT / "matrix.yaml")
    assert [e["cell"] for e in include] == [c.name for c in m.cells]
    assert [e["session"] for e in include] == [c.session for c in m.cells]
    for entry, cell in zip(include, m.cells):
        assert entry["runner"] == cell.device.runner
        assert entry["python"] == m.python
        assert entry["timeout_minutes"] >= cell.time_limit_s / 60
    # what the cell job passes to `nox -s` selects exactly that one session
    one = subprocess.run(
        [tool("nox"), "-l", "--json", "-s", include[-1]["session"]], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert [e["session"] for e in json.loads(one.stdout)] == [include[-1]["session"]], one.stderr


def test_listing_sends_cuda_cells_to_the_gpu_runner_from_matrix_yaml(tmp_path):
    custom = tmp_path / "matrix.yaml"
    custom.write_text(
        """
python: "3.11"
devices:
  cpu: {runner: ubuntu-latest}
  cuda: {runner: [self-hosted, linux, gpu]}
time_limit_s: 1500
baseline: "2.14.1"
candidates: ["2.15.0"]
torch:
  - {version: "2.14.1"}
  - {version: "2.15.0", time_limit_s: 3000}
"""
    )
    include = listed_matrix(tmp_path, custom)
    assert {e["cell"]: e["runner"] for e in include} == {
        "torch-2.14.1-cpu": "ubuntu-latest",
        "torch-2.14.1-cuda": ["self-hosted", "linux", "gpu"],
        "torch-2.15.0-cpu": "ubuntu-latest",
        "torch-2.15.0-cuda": ["self-hosted", "linux", "gpu"],
    }
    assert {e["cell"]: e["timeout_minutes"] for e in include}["torch-2.15.0-cuda"] == 50 + 30
    assert {e["session"] for e in include} == {
        "conformance(torch='2.14.1', device='cpu')",
        "conformance(torch='2.14.1', device='cuda')",
        "conformance(torch='2.15.0', device='cpu')",
        "conformance(torch='2.15.0', device='cuda')",
    }


def test_listing_fails_on_a_broken_matrix(tmp_path):
    custom = tmp_path / "matrix.yaml"
    custom.write_text('python: "3.11"\nbaseline: "2.14.1"\ncandidates: ["2.15.0"]\ntorch: [{version: "2.x"}]\n')
    run, output = run_listing(tmp_path, custom)
    assert run.returncode != 0
    assert "torch[0].version" in run.stderr
    assert not output.exists()


CELL_ENV = {"CELL": "torch-2.15.0-cpu", "SESSION": "conformance(torch='2.15.0', device='cpu')"}


def fallback(tmp_path: Path, nox_output: str | None = None) -> tuple[subprocess.CompletedProcess, Path]:
    """The cell job's fallback step, after a `Run the cell` step that wrote ``nox_output``."""
    if nox_output is not None:
        (tmp_path / "nox.log").write_text(nox_output)
    run = run_step_script("cell", "left no result", tmp_path, {**CELL_ENV, "RUNNER_TEMP": str(tmp_path)})
    assert run.returncode == 0, run.stdout + run.stderr
    return run, tmp_path / "results" / "torch-2.15.0-cpu.json"


def test_a_cell_that_left_no_result_is_recorded_as_error_with_the_nox_tail(tmp_path):
    run, path = fallback(tmp_path, "nox > Running session conformance\nnox > Python interpreter 3.11 not found\n")
    assert run.stdout.strip() == "results/torch-2.15.0-cpu.json: recorded as error"
    result = results.CellResult.load(path)
    assert result["status"] == "error" and result["cell"] == "torch-2.15.0-cpu"
    assert "ended without a result file" in result["detail"]
    assert result["detail"].endswith("Python interpreter 3.11 not found")


def test_a_cell_killed_before_its_answer_stays_interrupted_with_the_nox_tail(tmp_path):
    """A cancel or the job's time limit killed nox: its result path still holds the run's placeholder."""
    results.placeholder("torch-2.15.0-cpu", requested={"torch": "2.15.0", "device": "cpu"}).write(
        tmp_path / "results" / "torch-2.15.0-cpu.json")
    run, path = fallback(tmp_path, "nox > Running session conformance(torch='2.15.0', device='cpu')\nkilled\n")
    assert run.stdout.strip() == "results/torch-2.15.0-cpu.json: recorded as interrupted"
    result = results.CellResult.load(path)
    assert result["status"] == "interrupted" and not result.answer().clean
    assert "did not finish" in result["detail"] and result["detail"].endswith("killed")


def test_a_cell_with_an_unreadable_result_is_recorded_as_error(tmp_path):
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "torch-2.15.0-cpu.json").write_text('{"status": "completed"')
    run, path = fallback(tmp_path)
    assert run.stdout.strip() == "results/torch-2.15.0-cpu.json: recorded as error"
    result = results.CellResult.load(path)
    assert result["status"] == "error"
    assert "left a result file that cannot be read (results/torch-2.15.0-cpu.json: not JSON" in result["detail"]


def test_a_cell_with_a_result_keeps_it(tmp_path):
    kept = results.CellResult.new("torch-2.15.0-cpu", "crashed", detail="SIGABRT").write(tmp_path / "results" / "torch-2.15.0-cpu.json")
    before = kept.read_bytes()
    run, _ = fallback(tmp_path, "nox > ...\n")
    assert run.stdout.strip() == "results/torch-2.15.0-cpu.json: the cell's answer stands"
    assert kept.read_bytes() == before


def _ended(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        pytest.fail(f"the step ended before its suite started (exit {proc.returncode}):\n{proc.communicate()[0]}")


def test_cancelling_the_cell_job_reaches_nox_and_the_cell_is_uploaded_as_interrupted(tmp_path):
    """The runner signals only the step's entry process (SIGINT; SIGTERM 7.5 s later): it must be nox.

    The `installed` session stands in for a cell (nothing to install); its suite is held mid-run.
    """
    tool("nox")
    pids_file = tmp_path / "suite.pids"
    python = fake_python(tmp_path / "held", HELD_SUITE.format(pids=str(pids_file)))
    for name in ("noxfile.py", "matrix.yaml"):  # the step runs `nox` at the repository root
        (tmp_path / name).symlink_to(ROOT / name)
    script = tmp_path / "run-the-cell.sh"
    script.write_text(step_named("cell", "Run the cell")["run"], encoding="utf-8")
    out = tmp_path / "results"
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "SESSION": "installed", "CELL": "cell",
           "RUNNER_TEMP": str(tmp_path), "NOX_SCRIPT_MODE": "none", "CONFORMANCE_RESULTS": str(out),
           "CONFORMANCE_PYTHON": str(python)}
    env.pop("CONFORMANCE_MATRIX", None)
    step = subprocess.Popen(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    pids: list[int] = []
    try:
        pids = wait_for(lambda: held_suite_pids(pids_file) or _ended(step), "the suite to start", timeout=120)
        step.send_signal(signal.SIGINT)  # to the entry process, as the runner does
        output, _ = step.communicate(timeout=60)
        assert step.returncode == 130, output
        for pid in pids:
            wait_for(lambda pid=pid: is_gone(pid), f"process {pid} of the test group to end", timeout=15)
        path = out / "installed-torch-2.15.0-default.json"
        result = results.CellResult.load(path)
        assert result.status == "interrupted" and result["detail"].startswith("interrupted by SIGINT")
        assert "Session installed interrupted" in (tmp_path / "nox.log").read_text()
        assert not [p.name for p in out.glob(".*")]
    finally:
        if step.poll() is None:
            step.kill()
            step.communicate(timeout=30)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
