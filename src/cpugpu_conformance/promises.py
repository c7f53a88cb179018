"""The promises of CONTRACT.md, by number: the rows of every report."""

from __future__ import annotations

from . import devices

PROMISES: dict[str, str] = {
    "1": "Shape and dtype",
    "2": "Zeroed",
    "3": "Mutable wherever they were made",
    "4": "Two storages",
    "5": "A true NumPy view",
    "6": "The bfloat16 path",
    "7": "No silent wrong views",
    "8": "Partial copies",
    "9": "In place, for life",
    "10": "Devices",
    "11": "pin_memory=True with no accelerator (implementation-defined)",
    "12": "No side effects on the caller",
    "13": "Independent buffers",
}

# Each promise by name, for the code that checks it (testing/): the number is written here only.
SHAPE_AND_DTYPE = "1"
ZEROED = "2"
MUTABLE = "3"
TWO_STORAGES = "4"
NUMPY_VIEW = "5"
BFLOAT16_PATH = "6"
NO_WRONG_VIEWS = "7"
PARTIAL_COPIES = "8"
FOR_LIFE = "9"
CUDA_SPECIFICS = "10"
PIN_WITHOUT_ACCELERATOR = "11"
NO_SIDE_EFFECTS = "12"
INDEPENDENT = "13"

# An engine object built in an ambient context (a default device or dtype) whose tensors are not
# where the plain build has them: a cause of its own beside promises 3 and 12 (MutableStateTests).
PLACEMENT = "placement"

DEVICES = devices.NAMES  # listed in the registry, devices.py

# Promise 11 is recorded, never judged: its verdict is what happened, not pass/fail.
RECORDED_ONLY = frozenset({"11"})

# Promises the contract states for some devices only; every other promise applies to every
# device. A promise that does not apply has no check to run there, which is not a skip.
# The one statement of where a promise applies: the suite deselects its tests elsewhere.
APPLIES_TO: dict[str, tuple[str, ...]] = {
    "10": ("cuda", "sim"),  # an accelerator's: pinned memory, non-blocking copies on the caller's stream
    "11": ("cpu",),  # pin_memory=True with no accelerator
}


# Promises about a machine with no accelerator: where one is present, pin_memory=True has a device
# to serve and the question does not arise, so they are not applicable on that machine (CONTRACT.md).
NO_ACCELERATOR_ONLY = frozenset({"11"})


def applies(promise: str, device: str) -> bool:
    return device in APPLIES_TO.get(promise, (device,))


def not_applicable(promise: str, device: str, accelerators: tuple[str, ...]) -> str | None:
    """Why `promise` has nothing to check on `device` on a machine with `accelerators` (the devices
    pinned memory serves that it has: devices.accelerators()); None when the promise applies."""
    if not applies(promise, device):
        return f"promise {promise} is about {' and '.join(APPLIES_TO[promise])}"
    if accelerators and promise in NO_ACCELERATOR_ONLY:
        return (f"promise {promise} is about a machine with no accelerator, and this one has {' and '.join(accelerators)}: "
                "pin_memory=True has a device to serve there, so the question does not arise")
    return None
