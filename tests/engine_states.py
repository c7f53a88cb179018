"""Engine-shaped runtime state with the seed's bug, each beside its fix (issue 25).

Each broken class allocates a tensor the way a public engine did before its fix, so that the
tensor is an inference tensor and the serving loop's in-place update outside inference mode
raises "Inplace update to inference tensor outside InferenceMode is not allowed"; each fixed
class allocates under ``torch.inference_mode(False)``, the engines' fix. ``BAD_PATH`` of each
broken class is where the walk must find it when the object is built and warmed up plainly.
Every class takes the device it allocates on, and passes it and the dtype explicitly (the
default device and dtype contexts must not move a tensor: placement).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn


class LazyWorkspace:
    """SGLang (issues 33470, 30759, 35116): a workspace allocated on the first forward, which the
    warm-up runs under ``torch.inference_mode()``; the serving loop then updates it outside."""

    BAD_PATH = "state.workspace"  # only where warm_up ran under inference mode

    def __init__(self, device, size=16):
        self.device, self.size = device, size
        self.workspace = None
        self.steps = 0

    def forward(self):
        if self.workspace is None:
            self.workspace = self._allocate()
        self.workspace.add_(1)
        self.steps += 1

    def warm_up(self):
        self.forward()

    def serve(self):
        self.workspace.zero_()  # outside inference mode: the seed's RuntimeError for an inference tensor

    def _allocate(self):
        return torch.zeros(self.size, dtype=torch.float32, device=self.device)


class FixedLazyWorkspace(LazyWorkspace):
    def _allocate(self):
        with torch.inference_mode(False):
            return torch.zeros(self.size, dtype=torch.float32, device=self.device)


class RequestTables:
    """TensorRT-LLM (2635): per-request prompt tables filled by a setter that runs in inference mode."""

    BAD_PATH = "state.tables['default'][0]"

    def __init__(self, device):
        self.device = device
        self.tables = {}

    @torch.inference_mode()
    def set_prompt_table(self, name, rows):
        self.tables[name] = [torch.zeros(rows, 4, dtype=torch.float32, device=self.device),
                             torch.zeros(rows, dtype=torch.int64, device=self.device)]

    def warm_up(self):
        self.set_prompt_table("default", 8)


class FixedRequestTables(RequestTables):
    @torch.inference_mode()
    def set_prompt_table(self, name, rows):
        with torch.inference_mode(False):
            self.tables[name] = [torch.zeros(rows, 4, dtype=torch.float32, device=self.device),
                                 torch.zeros(rows, dtype=torch.int64, device=self.device)]


class Rotary(nn.Module):
    """A rotary embedding whose cos/sin cache grows lazily; the broken one registers it in inference mode."""

    def __init__(self, dim, device):
        super().__init__()
        self.dim, self.device = dim, device
        self.register_buffer("inv_freq", torch.ones(dim, dtype=torch.float32, device=device), persistent=False)

    def extend(self, n):
        with torch.inference_mode():
            cache = torch.zeros(n, self.dim, dtype=torch.float32, device=self.device)
            self.register_buffer("cos_sin_cache", cache, persistent=False)


class RotaryModel(nn.Module):
    """An ``nn.Module`` whose ``register_buffer`` runs under inference mode (during the warm-up)."""

    BAD_PATH = "state.rotary.cos_sin_cache"

    def __init__(self, device):
        super().__init__()
        self.proj = nn.Linear(4, 4, dtype=torch.float32, device=device)
        self.rotary = Rotary(4, device)

    def warm_up(self):
        self.rotary.extend(32)


class FixedRotary(Rotary):
    def extend(self, n):
        with torch.inference_mode(False):
            cache = torch.zeros(n, self.dim, dtype=torch.float32, device=self.device)
            self.register_buffer("cos_sin_cache", cache, persistent=False)


class FixedRotaryModel(RotaryModel):
    """Built under ``inference_mode(False)`` too: a model built in inference mode has inference parameters."""

    def __init__(self, device):
        with torch.inference_mode(False):
            super().__init__(device)
            self.rotary = FixedRotary(4, device)


@dataclass
class Batch:
    ids: list = field(default_factory=list)


class Scheduler:
    """A tensor in a list inside a dataclass: the warm-up's batch appended under inference mode."""

    BAD_PATH = "state.batch.ids[1]"

    def __init__(self, device):
        self.device = device
        with torch.inference_mode(False):
            self.batch = Batch([torch.zeros(4, dtype=torch.int64, device=device)])
        self.runner = None

    def warm_up(self):
        with torch.inference_mode():
            self.batch.ids.append(torch.zeros(4, dtype=torch.int64, device=self.device))


class FixedScheduler(Scheduler):
    def warm_up(self):
        with torch.inference_mode():
            with torch.inference_mode(False):
                self.batch.ids.append(torch.zeros(4, dtype=torch.int64, device=self.device))


class Engine:
    """Runner and scheduler pointing at each other (a cycle), built plainly with fixed parts."""

    def __init__(self, device):
        with torch.inference_mode(False):
            self.scheduler = FixedScheduler(device)
            self.workspace = FixedLazyWorkspace(device)
        self.scheduler.runner = self

    def warm_up(self):
        self.scheduler.warm_up()
        self.workspace.warm_up()


class Weights:
    def __init__(self, w):
        self.w = w


class WeightsAndCache:
    """Read-only weights loaded in inference mode on purpose, beside a cache that must be mutable."""

    def __init__(self, device):
        with torch.inference_mode():
            self.weights = Weights(torch.ones(4, dtype=torch.float32, device=device))
        with torch.inference_mode(False):
            self.cache = torch.zeros(8, dtype=torch.float32, device=device)


class GradSwitchingRunner:
    """Promise 12 broken: its warm-up switches grad off for the caller and leaves it off."""

    def __init__(self, device):
        with torch.inference_mode(False):
            self.x = torch.zeros(2, dtype=torch.float32, device=device)

    def warm_up(self):
        torch.set_grad_enabled(False)


BROKEN_AND_FIXED = [
    (LazyWorkspace, FixedLazyWorkspace),
    (RequestTables, FixedRequestTables),
    (RotaryModel, FixedRotaryModel),
    (Scheduler, FixedScheduler),
]
