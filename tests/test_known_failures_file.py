"""Known failures the team owns (issue 24, item 2): the file itself. It reads as its entries in
order; bad input, an unreadable file or one nested 50,000 deep is one line naming the file and
the key; the torch specifier is PEP 440; it needs no torch and nothing of the tools extra.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from known_failures_files import DEEP_LINE, _env, deep_file, listing, write

from cpugpu_conformance.results import known_failures as kf

# ---------------------------------------------------------------------------- the file


def test_a_file_reads_as_its_entries_in_order(tmp_path):
    listed = listing(tmp_path, 'promise = 5\ndevice = "cuda"\ntorch = "<2.3"\nreason = "no uint16"',
                     'promise = "13"\nreason = "pooled"')
    first, second = listed.entries
    assert (first.promise, first.device, first.torch, first.reason, first.entry) == ("5", "cuda", "<2.3", "no uint16", 1)
    assert (second.promise, second.device, second.torch, second.entry) == ("13", None, None, 2)
    assert first.file == str(tmp_path / "known-failures.toml")


def test_an_empty_file_lists_nothing(tmp_path):
    assert kf.load(write(tmp_path, "# nothing known\n")).entries == ()


BAD_FILES = {
    "bad TOML": ("[[known_failure]\npromise = 5\n", "not valid TOML"),
    "a top-level key": ("promise = 5\n", "unknown key 'promise'"),
    "a table, not entries": ('[known_failure]\npromise = 5\nreason = "x"\n', "write each entry as a [[known_failure]] table"),
    "an unknown key": ('[[known_failure]]\npromise = 5\nreason = "x"\ndevices = "cpu"\n', "1: unknown key 'devices'"),
    "no promise": ('[[known_failure]]\nreason = "x"\n', "1: no promise"),
    "promise 14": ('[[known_failure]]\npromise = 14\nreason = "x"\n', "promise = 14: not a promise of the contract (1-13)"),
    "promise 0": ('[[known_failure]]\npromise = 0\nreason = "x"\n', "promise = 0: not a promise"),
    "promise true": ('[[known_failure]]\npromise = true\nreason = "x"\n', "promise = True: not a promise"),
    "promise 5.0": ('[[known_failure]]\npromise = 5.0\nreason = "x"\n', "promise = 5.0: not a promise"),
    "an unknown device": ('[[known_failure]]\npromise = 5\ndevice = "tpu"\nreason = "x"\n', "device = 'tpu': not a device"),
    "a bad specifier": ('[[known_failure]]\npromise = 5\ntorch = "lt 2.3"\nreason = "x"\n', "torch = 'lt 2.3': not a version"),
    "an empty specifier": ('[[known_failure]]\npromise = 5\ntorch = ""\nreason = "x"\n', "torch = '': not a version"),
    "a number for torch": ('[[known_failure]]\npromise = 5\ntorch = 2.3\nreason = "x"\n', "torch = 2.3: not a version"),
    "no reason": ("[[known_failure]]\npromise = 5\n", "1: no reason: say why it fails"),
    "an empty reason": ('[[known_failure]]\npromise = 5\nreason = "  "\n', "reason = '  ': say why"),
    "a duplicate": ('[[known_failure]]\npromise = 5\nreason = "x"\n[[known_failure]]\npromise = 5\nreason = "y"\n',
                    "2: the same promise, device and torch as entry 1"),
}


@pytest.mark.parametrize("case", BAD_FILES)
def test_bad_input_is_one_line_naming_the_file_and_the_key(tmp_path, case):
    text, expected = BAD_FILES[case]
    path = write(tmp_path, text)
    with pytest.raises(kf.KnownFailuresError) as caught:
        kf.load(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: "), message
    assert expected in message and "\n" not in message, message


@pytest.mark.parametrize("make, expected", [
    (lambda p: p / "missing.toml", "no such file of known failures"),
    (lambda p: p, "not a regular file (a directory)"),
    (lambda p: (os.mkfifo(p / "fifo"), p / "fifo")[1], "not a regular file (a FIFO)"),
    (lambda p: ((p / "big.toml").write_bytes(b"#" * (kf.MAX_BYTES + 1)), p / "big.toml")[1], "over the"),
    (lambda p: ((p / "bin.toml").write_bytes(b"\xff\xfe"), p / "bin.toml")[1], "not UTF-8"),
])
def test_a_file_that_cannot_be_read_is_one_line(tmp_path, make, expected):
    path = make(tmp_path)
    with pytest.raises(kf.KnownFailuresError) as caught:
        kf.load(path)
    assert expected in str(caught.value) and str(path) in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("version, specifier, expected", [
    ("2.2.2+cpu", "<2.3", True),
    ("2.3.0", "<2.3", False),
    ("2.3.0+cu121", ">=2.1,<2.4", True),
    ("2.2.1", "==2.2.*", True),
    ("2.16.0.dev20261201+cpu", ">=2.16.0.dev0", True),  # a nightly is matched, pre-releases included
    ("2.16.0.dev20261201+cpu", "<2.16", False),  # and, as PEP 440 orders it, is no release before 2.16
    ("2.16.0rc1", ">=2.15", True),
    ("not a version", "<2.3", False),
])
def test_the_torch_specifier_is_pep_440(version, specifier, expected):
    assert kf.torch_satisfies(version, specifier) is expected


# ---------------------------------------------------------------------------- where only the suite's needs are installed

BLOCKED = """\
import sys, importlib.abc
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("torch", "yaml", "jsonschema", "jinja2"):
            raise ImportError(f"{name} is not installed here")
sys.meta_path.insert(0, Block())
from cpugpu_conformance.results import known_failures as kf
listed = kf.load(sys.argv[1])
entry = {"verdict": "failed", "passed": 0, "failed": 1, "skipped": 0, "failures": []}
print(kf.mark(entry, listed, "5", "cuda", "2.2.2+cu121")["verdict"], kf.mark(entry, listed, "5", "cuda", "2.3.0")["verdict"])
"""


def test_the_file_needs_no_torch_and_nothing_of_the_tools_extra(tmp_path):
    """The suite reads it on a GPU machine with only torch, numpy, hypothesis and pytest (and what pytest
    brings: packaging, and tomli below Python 3.11); xdist's controller reads it with no torch imported."""
    path = write(tmp_path, '[[known_failure]]\npromise = 5\ndevice = "cuda"\ntorch = "<2.3"\nreason = "no uint16"\n')
    proc = subprocess.run([sys.executable, "-c", BLOCKED, str(path)], env=_env(), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["known_failure", "failed"]


# ---------------------------------------------------------------------------- a file nested 50,000 deep (issue 28, item 6)


def test_a_file_nested_50000_deep_is_one_line_not_a_recursion_error(tmp_path):
    path = deep_file(tmp_path)
    with pytest.raises(kf.KnownFailuresError) as refused:
        kf.load(path)
    assert str(refused.value).startswith(f"{path}: {DEEP_LINE}") and "\n" not in str(refused.value)
