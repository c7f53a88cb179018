"""What the tests of cpugpu_conformance.observe share: the observations, made once a module (the
fixture `observed`), the caller's mode state, and a call in a fresh thread."""

from __future__ import annotations

import threading

import pytest
import torch

from cpugpu_conformance.observe import observe_all


@pytest.fixture(scope="module", name="observed")
def observed_fixture() -> dict:
    return observe_all()


def mode_state() -> tuple[bool, bool]:
    return torch.is_inference_mode_enabled(), torch.is_grad_enabled()


def in_fresh_thread(fn):
    box = {}
    worker = threading.Thread(target=lambda: box.setdefault("value", fn()))
    worker.start()
    worker.join()
    return box["value"]
