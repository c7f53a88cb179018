"""The CI workflow as written: GitHub's schema, an offline zizmor audit, its shape (the jobs, what
each runs and uploads, the hardening) and when it deploys to GitHub Pages.

Needs the `test` extra (check-jsonschema, zizmor, nox); no network.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from workflow_file import JOBS, ROOT, WF, WORKFLOW, runs, step_named, steps, tool, uses

PINNED = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")


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
