"""The README's commands run as written (issue 31, item 6).

Each command in the README's code blocks is read in order, as a newcomer copies them: every program
it calls was installed by a line above it (a virtual environment with nox and uv, the package
from a checkout, a wheel or git, torch beside it), every subcommand, nox session and tag exists,
and every option it names is one its program takes. The commands inside backticks in the prose
are held to the same options. The composite action's sample names only the action's inputs, gives
the required ones, and marks every other one as optional (copied without its file,
`known-failures:` is an exit 2). The Python sample imports what the library has.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
ACTION = yaml.safe_load((REPO / "action.yml").read_text(encoding="utf-8"))
PLACEHOLDERS = ("ourpkg", "mypkg", "path/to/")  # a reader's own names, not ours to import
SHELL = {".", "source", "cd", "export", "mkdir"}
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


@dataclass
class Setup:
    """What the install lines so far have put in place."""

    has: set[str] = field(default_factory=lambda: {"python", "python3", "pip", "pipx"})

    def install(self, words: list[str]) -> None:
        for word in words[2:]:
            if word.startswith("-") and word != "-e":
                continue
            name = re.split(r"[\[<>=@ ]", word.strip("\"'"), maxsplit=1)[0]
            if name in ("nox", "uv", "torch", "numpy"):
                self.has.add(name)
            elif name in (".", "") or "cpugpu_conformance" in word or "cpugpu-conformance" in word:
                self.has.add("cpugpu-conformance")
                if "[tools]" in word or "[test]" in word:
                    self.has.add("tools")


def blocks(text: str) -> list[tuple[str, str, int]]:
    """(language, body, line) of each fenced block."""
    return [(m.group(1), m.group(2), text[:m.start()].count("\n") + 1) for m in FENCE.finditer(text)]


def shell_commands(body: str) -> list[list[str]]:
    """Each command of a shell block, as words, comments dropped, `a && b` split."""
    out = []
    for line in body.splitlines():
        words = shlex.split(line, comments=True)
        while words:
            cut = next((i for i, w in enumerate(words) if w in ("&&", ";", "||")), len(words))
            out.append(words[:cut])
            words = words[cut + 1:]
    return [w for w in out if w]


# ---------------------------------------------------------------------------- what exists


@cache
def suite_options() -> frozenset[str]:
    """Every option `pytest conformance` takes: pytest's, the plugins' (xdist too) and the suite's."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "conformance", "--help", "-p", "no:cacheprovider"], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return frozenset(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", proc.stdout))


@cache
def command_parser(name: str) -> argparse.ArgumentParser:
    from cpugpu_conformance.cli import common, dispatch

    module = dispatch.load(name)
    return common.parser_for(name, module.HELP, module.add_arguments)


@cache
def nox_sessions() -> tuple[frozenset[str], frozenset[str]]:
    """The noxfile's session names and tags."""
    sys.path.insert(0, str(REPO))
    here = os.getcwd()
    os.chdir(REPO)  # the noxfile reads matrix.yaml from where nox runs it
    try:
        import nox.registry

        import noxfile  # noqa: F401  (registers its sessions)
    finally:
        os.chdir(here)
        sys.path.remove(str(REPO))
    sessions = nox.registry.get()
    tags = {tag for func in sessions.values() for param in getattr(func, "parametrize", []) for tag in param.tags}
    return frozenset(sessions), frozenset(tags)


def unknown_options(words: list[str], known: set[str] | frozenset[str]) -> list[str]:
    return [w.split("=", 1)[0] for w in words if w.startswith("-") and w != "--" and w.split("=", 1)[0] not in known]


def parser_options(name: str) -> set[str]:
    return set(command_parser(name)._option_string_actions)


def check_impl(words: list[str]) -> list[str]:
    """An --impl module:Class of ours names a class that exists."""
    problems = []
    for i, word in enumerate(words):
        value = words[i + 1] if word == "--impl" and i + 1 < len(words) else word.partition("=")[2] \
            if word.startswith("--impl=") else None
        if value is None or any(p in value for p in PLACEHOLDERS) or value.endswith(".py") or ":" not in value:
            continue
        module, _, attr = value.partition(":")
        if not hasattr(importlib.import_module(module), attr):
            problems.append(f"--impl {value}: no such class")
    return problems


def problems_of(words: list[str]) -> list[str]:
    """What is wrong with one command: an unknown subcommand, session, tag or option."""
    program, args = words[0], words[1:]
    ours, _, after = (args[:args.index("--")], None, args[args.index("--") + 1:]) if "--" in args else (args, None, [])
    if program == "cpugpu-conformance":
        from cpugpu_conformance.cli import dispatch

        sub, rest = ours[0], ours[1:]
        if sub not in dispatch.SUBCOMMANDS:
            return [f"no command {sub!r}"]
        if sub == "run":
            return unknown_options(args[1:], suite_options()) + check_impl(args)
        return unknown_options(rest, parser_options(sub)) + unknown_options(after, suite_options()) + check_impl(args)
    if program == "pytest":
        return unknown_options(args, suite_options()) + check_impl(args)
    if program == "nox":
        sessions, tags = nox_sessions()
        found = []
        for flag, value in zip(ours, ours[1:]):
            if flag == "-s" and value not in sessions:
                found.append(f"no nox session {value!r}")
            if flag == "-t" and value not in tags:
                found.append(f"no nox tag {value!r}")
        found += unknown_options([w for w in ours if w not in ("-s", "-t")], {"-l", "-r", "-R"})
        session = ours[ours.index("-s") + 1] if "-s" in ours else None
        if session in ("gate", "matrix", "bisect", "report"):
            found += unknown_options(after, parser_options(session))
        elif session in ("conformance", "installed") or "-t" in ours:
            found += unknown_options(after, suite_options())
        return found
    if program == "uv":
        return [] if args[:1] == ["build"] else [f"uv {' '.join(args)}: not a command the README's setup explains"]
    if program == "python" and args[:1] == ["tools/gpu_check.py"]:
        return [] if (REPO / args[0]).is_file() else [f"{args[0]}: no such file"]
    return []


NEEDS = {"nox": {"nox"}, "uv": {"uv"}, "cpugpu-conformance": {"cpugpu-conformance"},
         "pytest": {"cpugpu-conformance", "torch", "numpy"}}
TOOLS_COMMANDS = {"cell", "cells", "matrix", "bisect", "report", "gate", "summary", "bump-target", "record-unfinished"}


def missing_setup(words: list[str], setup: Setup) -> set[str]:
    needed = set(NEEDS.get(words[0], ()))
    if words[0] == "cpugpu-conformance" and len(words) > 1:
        needed |= {"tools"} if words[1] in TOOLS_COMMANDS else {"torch", "numpy"} if words[1] == "run" else set()
    return needed - setup.has


# ---------------------------------------------------------------------------- the README


def readme_commands() -> list[tuple[int, list[str]]]:
    """The commands of the shell blocks, and `pytest conformance ...` in the prose (the checkout's suite: the
    README's own environment is the only place it runs), in the order a reader meets them."""
    text = README.read_text(encoding="utf-8")
    found = [(m.start(), words) for m in FENCE.finditer(text) if m.group(1) in ("bash", "sh", "console")
             for words in shell_commands(m.group(2))]
    prose = FENCE.sub(lambda m: " " * len(m.group(0)), text)  # the same offsets, blocks blanked
    found += [(m.start(), shlex.split(m.group(1))) for m in re.finditer(r"`(pytest conformance[^`\n]*)`", prose)]
    return [(text[:at].count("\n") + 1, words) for at, words in sorted(found, key=lambda f: f[0])]


def test_every_command_in_a_code_block_follows_the_install_it_needs_and_exists_as_written():
    setup, problems = Setup(), []
    for line, words in readme_commands():
        shown = f"README.md:{line}: {' '.join(words)}"
        if words[0] in SHELL or words[:3] == ["python3", "-m", "venv"]:
            continue
        if words[:2] in (["pip", "install"], ["pipx", "install"]):
            setup.install(words)
            continue
        lacking = missing_setup(words, setup)
        if lacking:
            problems.append(f"{shown}: no line above installs {', '.join(sorted(lacking))}")
        problems += [f"{shown}: {p}" for p in problems_of(words)]
    assert problems == [], "\n".join(problems)


def test_every_command_in_the_prose_names_what_exists():
    text = FENCE.sub("", README.read_text(encoding="utf-8"))
    spans = re.findall(r"`((?:nox|cpugpu-conformance|pytest) [^`\n]+)`", text)
    assert spans, "the README names commands in its prose"
    problems = [f"`{span}`: {p}" for span in spans for p in problems_of(shlex.split(span))]
    assert problems == [], "\n".join(problems)


def test_the_checker_refuses_what_does_not_exist():
    """The checks above would see a wrong option, session, tag, subcommand or missing install."""
    assert problems_of(["cpugpu-conformance", "cell", "2.13.0", "--envs", "x"]) == ["--envs"]
    assert problems_of(["cpugpu-conformance", "gate", "--basline", "a"]) == ["--basline"]
    assert problems_of(["cpugpu-conformance", "publish"]) == ["no command 'publish'"]
    assert problems_of(["nox", "-s", "conformanse"]) == ["no nox session 'conformanse'"]
    assert problems_of(["nox", "-t", "torch-1.0.0"]) == ["no nox tag 'torch-1.0.0'"]
    assert problems_of(["pytest", "conformance", "--impl", "cpugpu_conformance.variants:NoSuchBuffer"]) == [
        "--impl cpugpu_conformance.variants:NoSuchBuffer: no such class"]
    assert problems_of(["pytest", "conformance", "--implementation", "x"]) == ["--implementation"]
    # The README's first virtual environment has nox and uv only: pytest conformance needs the package and torch.
    setup = Setup()
    setup.install(["pip", "install", "nox", "uv"])
    assert missing_setup(["pytest", "conformance"], setup) == {"cpugpu-conformance", "torch", "numpy"}
    setup.install(["pip", "install", "-e", ".[tools]"])
    assert missing_setup(["pytest", "conformance"], setup) == {"torch", "numpy"}
    assert missing_setup(["cpugpu-conformance", "gate"], setup) == set()
    plain = Setup()
    plain.install(["pip", "install", "dist/cpugpu_conformance-0.1.0-py3-none-any.whl"])
    assert missing_setup(["cpugpu-conformance", "cell", "2.13.0"], plain) == {"tools"}


def test_the_action_sample_marks_every_input_it_does_not_need_as_optional():
    text = README.read_text(encoding="utf-8")
    [sample] = [body for lang, body, _ in blocks(text) if lang == "yaml" and "cpugpu-conformance@" in body]
    steps = yaml.safe_load(sample)["jobs"]["torch-gate"]["steps"]
    [ours] = [s for s in steps if "cpugpu-conformance@" in s.get("uses", "")]
    inputs = ACTION["inputs"]
    assert set(ours["with"]) <= set(inputs), set(ours["with"]) - set(inputs)
    assert {n for n, spec in inputs.items() if spec.get("required")} <= set(ours["with"])
    for line in sample.splitlines():
        key = line.strip().split(":", 1)[0]
        if key in ours["with"] and not inputs[key].get("required"):
            assert re.search(r"#\s*optional\b", line), f"{line.strip()}: say that it is optional"


def test_the_python_sample_imports_what_the_library_has():
    text = README.read_text(encoding="utf-8")
    for lang, body, line in blocks(text):
        if lang != "python":
            continue
        for module, names in re.findall(r"^from ([\w.]+) import ([\w, ]+)$", body, re.M):
            if module.split(".")[0] in PLACEHOLDERS:
                continue
            imported = importlib.import_module(module)
            for name in (n.strip() for n in names.split(",")):
                assert hasattr(imported, name), f"README.md:{line}: {module} has no {name}"


@pytest.mark.parametrize("command", ["cell", "matrix", "gate", "bump-target"])
def test_the_commands_the_readme_runs_have_a_help(command):
    assert command_parser(command).format_help().strip()
