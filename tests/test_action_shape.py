"""The composite action at the repository root (issue 24, item 1), read as a file: its inputs, its pins
(each action by full SHA, the same releases as the project's workflow), the env-only rule, the commands
its steps call, an offline zizmor audit, GitHub's schema for actions, the lint session that checks it,
and the docs that show it. Its steps, run, are tests/test_action_steps.py.
"""

from __future__ import annotations

import re
import subprocess
import sys

import yaml
from action_helpers import ACTION, ACTION_FILE, REPO, STEPS
from workflow_file import tool

PINNED = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")


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
