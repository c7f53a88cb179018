"""Result files that are not cell results, for every command that reads them (gate, report,
summary, the model): each must be one line naming the file and, where there is one, the key.

MALFORMED maps a case name to (the file's text, the key its message must name, or None).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import result_factory as rf


def _edited(edit: Callable[[dict[str, Any]], None]) -> str:
    data = rf.completed("2.14.1", failed={("3", "cpu"): [rf.failure("test_mutable", "refused", "import torch\n")]})
    edit(data)
    return json.dumps(data)


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """Set the entry at a slash-separated path ("promises/3/devices/cpu") to ``value``."""
    *parents, last = path.split("/")

    def edit(data: dict[str, Any]) -> None:
        node: Any = data
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return edit


MALFORMED: dict[str, tuple[str, str | None]] = {
    "a string": ('"x"', None),
    "an array": ("[]", None),
    "a number": ("3", None),
    "null": ("null", None),
    "true": ("true", None),
    "promises an array": (_edited(_set("promises", [])), "promises"),
    "a promise an array": (_edited(_set("promises/3", [])), "promises/3"),
    "a promise's devices a string": (_edited(_set("promises/3/devices", "cpu")), "promises/3/devices"),
    "a verdict an array": (_edited(_set("promises/3/devices/cpu", [])), "promises/3/devices/cpu"),
    "a verdict unknown": (_edited(_set("promises/3/devices/cpu/verdict", "great")), "promises/3/devices/cpu/verdict"),
    "a count of checks a string": (_edited(_set("promises/3/devices/cpu/passed", "2")), "promises/3/devices/cpu/passed"),
    "failures not a list": (_edited(_set("promises/3/devices/cpu/failures", {"test": "x"})),
                            "promises/3/devices/cpu/failures"),
    "a failure a string": (_edited(_set("promises/3/devices/cpu/failures", ["boom"])),
                           "promises/3/devices/cpu/failures/0"),
    "a failure's message a number": (_edited(_set("promises/3/devices/cpu/failures/0/message", 7)),
                                     "promises/3/devices/cpu/failures/0/message"),
    "a device entry an array": (_edited(_set("devices/cpu", [])), "devices/cpu"),
    "a device status unknown": (_edited(_set("devices/cpu/status", "fine")), "devices/cpu/status"),
    "counts a string": (_edited(_set("counts", "3")), "counts"),
    "a count a boolean": (_edited(_set("counts/errors", True)), "counts/errors"),
    "unattributed failures an object": (_edited(_set("unattributed_failures", {"test": "x"})), "unattributed_failures"),
    "requested an array": (_edited(_set("requested", ["cpu"])), "requested"),
    "environment a string": (_edited(_set("environment", "linux")), "environment"),
    "observations an array": (_edited(_set("observations", [])), "observations"),
    "warnings a string": (_edited(_set("warnings", "careful")), "warnings"),
    "the status a number": (_edited(_set("status", 0)), "status"),
    "the cell name an object": (_edited(_set("cell", {})), "cell"),
    "an unknown top-level key": (_edited(_set("padding", [0] * 1000)), "'padding'"),
    "an unknown key in a verdict": (_edited(_set("promises/3/devices/cpu/padding", "x")), "promises/3/devices/cpu"),
    "an unknown key in a failure": (_edited(_set("promises/3/devices/cpu/failures/0/padding", "x")),
                                    "promises/3/devices/cpu/failures/0"),
    "promise 10 failed on cpu": (_edited(_set("promises/10/devices/cpu", {
        "verdict": "failed", "passed": 0, "failed": 1, "skipped": 0,
        "failures": [{"test": "test_nonblocking", "message": "stale", "reproducer": None}]})), "promises/10/devices/cpu"),
    "too many values": (_edited(_set("warnings", [""] * 120_000)), None),
}
