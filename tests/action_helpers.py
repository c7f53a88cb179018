"""What the tests of the composite action (action.yml, issue 24) share: the action as GitHub reads
it, the torch installed here, and a team's repository whose pull request bumps
torch, made with git in a temporary folder.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
ACTION_FILE = REPO / "action.yml"
ACTION = yaml.safe_load(ACTION_FILE.read_text(encoding="utf-8"))
STEPS = ACTION["runs"]["steps"]
INSTALLED_TORCH = "2.13.0"  # the test environment's (a cell checks it got the release it asked for)


def torch_release() -> str:
    from importlib.metadata import version

    return version("torch").split("+", 1)[0]


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
