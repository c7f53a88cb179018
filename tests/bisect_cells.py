"""What the tests of bisect share: the releases searched, and fake cells whose answer changes at a
chosen release (an observation of pin_memory without an accelerator), counting the calls."""

from __future__ import annotations

import result_factory as rf

from cpugpu_conformance import results

RELEASES = ["2.5.1", "2.6.0", "2.7.0", "2.7.1", "2.8.0", "2.9.1", "2.10.0", "2.11.0", "2.12.0"]

# observations as observe.observe_all() records them
PIN_DOC = "torch.zeros(4, pin_memory=True) with no accelerator"
OLD_PIN_ERROR = {
    "doc": PIN_DOC,
    "error": {"type": "RuntimeError", "message": "Cannot access accelerator device when none is available."},
}
NEW_PIN_ERROR = {
    "doc": PIN_DOC,
    "error": {"type": "RuntimeError", "message": "Need to provide pin_memory allocator to use pin memory."},
}


def cell_result(
    release: str,
    *,
    pin_error=OLD_PIN_ERROR,
    verdict3="passed",
    observed11="raises RuntimeError",
    numpy_dtypes=("bool", "float32"),
):
    """A completed cell result as the suite writes it, with the parts the answer is made of."""
    failed = {("3", "cpu"): [rf.failure("test_mutable", "refused", None)]} if verdict3 == "failed" else None
    observations = {
        "pin_memory_without_accelerator": pin_error,
        "numpy_dtypes": {"doc": "which dtypes .numpy() accepts", "value": list(numpy_dtypes)},
    }
    return results.CellResult(rf.completed(release, observed_11=observed11, observations=observations, failed=failed))


class FakeCells:
    """probe(): the answer of each release, counting the (expensive) calls."""

    def __init__(self, change_at: int | None, releases=RELEASES, untestable=()):
        self.releases, self.change_at, self.untestable = releases, change_at, set(untestable)
        self.calls: list[str] = []

    def __call__(self, release: str) -> dict:
        self.calls.append(release)
        if release in self.untestable:
            return results.CellResult.new(f"torch-{release}", "not_installed", detail="no matching distribution")
        changed = self.change_at is not None and self.releases.index(release) >= self.change_at
        return cell_result(release, pin_error=NEW_PIN_ERROR if changed else OLD_PIN_ERROR)
