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

import functools
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


# --- issue 29: where real engine objects keep tensors, and what an ambient context leaks in


def scale_into(workspace, x):
    """A kernel: writes into the workspace it is bound to, in place."""
    workspace.copy_(x)
    return workspace


class PartialKernel:
    """A kernel bound to its workspace with functools.partial: the object holds only the partial.
    The broken one allocates the workspace during the warm-up, in whatever mode that runs in."""

    BAD_PATH = "state.kernel.args[0]"

    def __init__(self, device):
        self.device, self.kernel = device, None

    def warm_up(self):
        self.kernel = functools.partial(scale_into, self._allocate())

    def step(self):
        return self.kernel(torch.ones(8, dtype=torch.float32, device=self.device))

    def _allocate(self):
        return torch.zeros(8, dtype=torch.float32, device=self.device)


class FixedPartialKernel(PartialKernel):
    def _allocate(self):
        with torch.inference_mode(False):
            return torch.zeros(8, dtype=torch.float32, device=self.device)


class FixedKeywordKernel(FixedPartialKernel):
    """A partial-held kernel whose workspace is a keyword: fixed, and updated at every step."""

    PATH = "state.kernel.keywords['workspace']"

    def warm_up(self):
        workspace = self._allocate()
        self.kernel = functools.partial(lambda x, workspace: scale_into(workspace, x), workspace=workspace)


class Cache:
    def __init__(self, buf):
        self.buf = buf

    def write(self, x):
        self.buf.copy_(x)


class BoundWriter:
    """A bound method as a callback (``self.write = cache.write``): the cache is reachable only
    through the method's __self__."""

    BAD_PATH = "state.write.__self__.buf"

    def __init__(self, device):
        self.device, self.write = device, None

    def warm_up(self):
        self.write = Cache(torch.zeros(4, dtype=torch.float32, device=self.device)).write


class ClosureStep:
    """A step function that closes over its buffer (``def step(): buf.add_(1)``)."""

    BAD_PATH = "state.step.__closure__[0].cell_contents"

    def __init__(self, device):
        self.device, self.step = device, None

    def warm_up(self):
        buf = torch.zeros(4, dtype=torch.float32, device=self.device)

        def step():
            buf.add_(1)

        self.step = step


class DefaultArgument:
    """A function whose default argument is its output buffer (``lambda x, out=buf: out.copy_(x)``)."""

    BAD_PATH = "state.fill.__defaults__[0]"

    def __init__(self, device):
        self.device, self.fill = device, None

    def warm_up(self):
        buf = torch.zeros(4, dtype=torch.float32, device=self.device)
        self.fill = lambda x, out=buf: out.copy_(x)


class CachedWorkspace:
    """Lazy but fixed, with functools.cached_property: the workspace lands in the instance's
    __dict__ on first access (the warm-up), allocated under inference_mode(False)."""

    def __init__(self, device):
        self.device = device

    @functools.cached_property
    def workspace(self):
        with torch.inference_mode(False):
            return torch.zeros(16, dtype=torch.float32, device=self.device)

    def warm_up(self):
        self.workspace.add_(1)


class ParameterView(nn.Module):
    """A view of a parameter taken in the warm-up: made under inference mode it is no inference
    tensor, and an update under no_grad() takes, but torch refuses one in grad mode."""

    BAD_PATH = "state.head"

    def __init__(self, device):
        super().__init__()
        with torch.inference_mode(False):
            self.weight = nn.Parameter(torch.ones(4, 3, dtype=torch.float32, device=device))
        self.head = None

    def warm_up(self):
        self.head = self._view()

    def _view(self):
        return self.weight[:2]


class FixedParameterView(ParameterView):
    def _view(self):
        with torch.inference_mode(False):
            return self.weight[:2]


class EmbeddingRows:
    """Rows of a computed embedding (a non-leaf that requires grad) kept as a view, which the
    serving loop overwrites with grad on: refused when the view was made in inference mode."""

    BAD_PATH = "state.rows"

    def __init__(self, device):
        with torch.inference_mode(False):
            self.weight = nn.Parameter(torch.ones(4, 3, dtype=torch.float32, device=device))
            self.table = self.weight * 2
        self.rows = None

    def warm_up(self):
        self.rows = self.table[:2]

    def serve(self):
        self.rows.copy_(torch.zeros(2, 3, dtype=torch.float32, device=self.rows.device))


class FixedEmbeddingRows(EmbeddingRows):
    def warm_up(self):
        with torch.inference_mode(False):
            self.rows = self.table[:2]


class ReqToTokenPool:
    """SGLang's token pool, as it was: ``req_generation`` is made without a device, so under
    ``with torch.device("meta")`` (a model's init) it lands on meta; the rest names its device."""

    BAD_PATH = "state.req_generation"

    def __init__(self, device, size=8, context_len=16):
        with torch.inference_mode(False):
            self.req_to_token = torch.zeros(size, context_len, dtype=torch.int32, device=device)
            self.req_generation = torch.zeros(size, dtype=torch.int64)


class FixedReqToTokenPool:
    def __init__(self, device, size=8, context_len=16):
        with torch.inference_mode(False):
            self.req_to_token = torch.zeros(size, context_len, dtype=torch.int32, device=device)
            self.req_generation = torch.zeros(size, dtype=torch.int64, device="cpu")  # on the host, on purpose


class Scales:
    """A tensor made without a dtype: under set_default_dtype(float16) it is float16."""

    BAD_PATH = "state.scales"

    def __init__(self, device):
        with torch.inference_mode(False):
            self.scales = torch.ones(4, device=device)


class PositionsWarmUp:
    """A warm-up whose index tensor is made without a device: under a default device it is not on
    the workspace's device, and the warm-up raises only there."""

    def __init__(self, device):
        with torch.inference_mode(False):
            self.workspace = torch.zeros(8, dtype=torch.float32, device=device)

    def warm_up(self):
        positions = torch.arange(4)
        self.workspace.index_fill_(0, positions, 1.0)


class FixedPositionsWarmUp(PositionsWarmUp):
    def warm_up(self):
        positions = torch.arange(4, device=self.workspace.device)
        self.workspace.index_fill_(0, positions, 1.0)


class TwentyTables:
    """Twenty tensors, all made in inference mode in the warm-up: every context fails."""

    def __init__(self, device):
        self.device, self.tables = device, {}

    def warm_up(self):
        with torch.inference_mode():
            for i in range(20):
                self.tables[f"t{i}"] = torch.zeros(4, dtype=torch.float32, device=self.device)
