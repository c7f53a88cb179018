"""The devices the contract knows, in one registry.

For each device: whether this machine can test it (or why not), how to wait for its
queued work, whether pinning host memory applies to it, the per-thread state a buffer
must leave alone on it, and the creation contexts only it has. As in PyTorch's
device-generic tests (common_device_type.py), the suite takes the device as an argument
and asks this registry; it never tests for a device's name.

torch is imported only when a device is probed: results and the tools read the names
without it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Callable

# CUDA's own hooks: re-exported, this was their home.
from .devices_cuda import (  # noqa: F401
    _cuda_forbids_sync,
    _cuda_last_device_is_current,
    _cuda_missing,
    cuda_allow_sync,
    cuda_capture,
    cuda_device_last,
    cuda_forbid_sync,
    cuda_side_stream,
    cuda_sync,
    default_device_cuda,
    last_device_is_current,
)

# sim's, likewise.
from .devices_sim import (  # noqa: F401
    _sim_limit_of_release,
    _sim_loaded,
    _sim_missing,
    _sim_prepare,
    _sim_release_limit,
    default_device_sim,
    sim_capture,
)


def _always_here() -> str | None:
    return None


def _never() -> bool:
    return False


def _no_limit(release: str) -> str | None:
    return None


def _yes() -> bool:
    return True


def nothing_queued(device):
    """Work on this device is done when the call that queued it returns: there is nothing to wait for."""


def no_state(device):
    """This device has no per-thread state of its own."""
    return {}


@dataclass(frozen=True)
class Device:
    name: str  # torch's device type: the --device value and the key in every result file
    # What a reproducer on this device needs, for its header ("" when any machine will do).
    needs: str = ""
    # The index of the torch.device the suite passes (None: the bare type, the current device). sim
    # passes its last device, so that a buffer that puts its tensor on device 0 whatever it was asked,
    # or works on the current device's streams instead of its own, is seen (promises 1 and 10).
    index: int | None = None
    # What a reproducer on this device runs first (after the imports), e.g. loading a backend.
    setup: str = ""
    # Tested only when asked for by name (--device NAME): testing it changes the process (sim becomes
    # torch's accelerator), so neither the default nor `all` includes it. prepare() readies it for the
    # run; its answer is why it cannot be (None: ready).
    by_name_only: bool = False
    prepare: Callable[[], str | None] = _always_here
    # Why this torch release cannot host the device at all (sim before torch 2.8): a property of the
    # release, not of the machine. A device asked for by name that the machine cannot ready for any
    # other reason (no compiler, a failed build) is a usage error, never a device merely missing.
    release_limit: Callable[[], str | None] = _always_here
    # The same for a release named by a result file (its environment's torch), without importing torch:
    # a cell of such a release is not applicable on the device, with this why (results/rule.py).
    limit_of_release: Callable[[str], str | None] = _no_limit
    # Whether the device is in this process now (sim: loaded); an accelerator only then.
    loaded: Callable[[], bool] = _yes
    # A simulation of a device, not one: every report labels its column so.
    simulated: bool = False
    # pin_memory=True asks for page-locked host memory for copies to this device (promise 10);
    # where it does not apply, only pin_memory=False is drawn (promise 11 records the rest).
    pinning: bool = False
    # The functions below run in the suite and are written into reproducers as they are
    # (testing/reproducer.py): each imports torch in its body, as this module imports it lazily.
    # sync(device): wait until queued work (non-blocking copies) has landed. It waits for the
    # caller's current stream only, as the contract says (promise 10), never for the whole device:
    # a copy queued on a stream the caller does not wait for must be caught. `device` is the
    # buffer's (buf.gpu.device, with its index) or the device type the suite was asked for (no
    # index): then every device of that type already in use, and no other (a GPU untouched so far
    # stays untouched).
    sync: Callable[[Any], None] = nothing_queued
    # stall(buf): queue a long job on the current stream of buf's device; idle(buf): True once every
    # job queued there is done. Work queued behind the job must land in order (promise 10), and a
    # copy that returns while the job still runs did not wait for it: the evidence that a copy does
    # not block, whatever way of waiting it hides. None: no such thing (whether a copy blocks cannot
    # be seen there).
    stall: Callable[[Any], None] | None = None
    idle: Callable[[Any], bool] | None = None
    # capture(buf, copying) -> None, or what the device said: run copying() while the caller's current stream
    # on buf's device is recorded rather than run, and report work the copy left on another stream
    # that the caller's never waits for (promise 10, deterministic where timing is not). None: no such
    # thing.
    capture: Callable[[Any, Callable[[], Any]], str | None] | None = None
    # forbid_sync(device) -> previous: from now a synchronize hidden in a call raises an exception whose
    # message holds `sync_refusal` (promise 10, a second signal: torch refuses only some of the ways to
    # wait); allow_sync(device, previous) undoes it. `forbids_sync` says whether this torch can.
    forbid_sync: Callable[[Any], Any] | None = None
    allow_sync: Callable[[Any, Any], None] | None = None
    sync_refusal: str = ""
    forbids_sync: Callable[[], bool] = _never
    # The environment variable that makes every launch and copy synchronous, so that whether a copy
    # blocks cannot be seen ("" when the device has none).
    launch_blocking_env: str = ""
    # caller_state(device) -> {label: value}: per-thread state of this device a buffer must leave as it
    # found it (promise 12).
    caller_state: Callable[[Any], dict] = no_state
    # Creation contexts only this device has: functions context(make, *args) -> make(*args) called
    # inside the context (testing/contexts.py has the common ones).
    contexts: tuple[Callable[..., Any], ...] = ()
    # (name, why): a context of this device that is the plain one on this machine (why returns a
    # reason), so that a check that it leaves the caller's state alone cannot fire (promise 12).
    inert_contexts: tuple[tuple[str, Callable[[], str | None]], ...] = ()
    # Why this machine cannot test the device; None when it can.
    missing: Callable[[], str | None] = _always_here

    def missing_reason(self) -> str | None:
        return self.missing()

    @property
    def label(self) -> str:
        """How reports name its column: "sim (simulated)"."""
        return f"{self.name} (simulated)" if self.simulated else self.name

    def argument(self) -> Any:
        """The torch.device the suite passes to the constructor, as callers pass one."""
        import torch

        return torch.device(self.name) if self.index is None else torch.device(self.name, self.index)

    @property
    def available(self) -> bool:
        return self.missing() is None

    def inert_context(self, name: str) -> str | None:
        """Why the device's context `name` is the plain one on this machine; None when it is not."""
        return next((why() for context, why in self.inert_contexts if context == name), None)


# --- written once over torch's device-generic API (torch.Stream, torch.accelerator): sim's, and CUDA's
# stall, idle and caller state. Where torch predates torch.accelerator (before 2.6), the device's own
# module (torch.cuda) answers the same questions.


def current_stream(device):
    """The caller's current stream on `device` (its index; with none, the current device's)."""
    import torch

    if hasattr(torch, "accelerator"):
        return torch.accelerator.current_stream(device)
    return getattr(torch, device.type).current_stream(device)


def current_index(device):
    """The caller's current device index of `device`'s type."""
    import torch

    if hasattr(torch, "accelerator"):
        return torch.accelerator.current_device_index()
    return getattr(torch, device.type).current_device()


def made_current(device):
    """A context in which `device`'s index is the current device (none: no change)."""
    import torch

    if hasattr(torch, "accelerator"):
        return torch.accelerator.device_index(device.index)
    return getattr(torch, device.type).device(device)


def accelerator_stall(buf):
    """A job of 2**25 cycles on the current stream of buf's device, by the device module's _sleep: on CUDA
    GPU clock cycles (about 17 ms at 2 GHz), counted in the GPU's own cycles, so it shortens only as clocks
    rise; on sim a 1 GHz simulated clock (34 ms). Either way thousands of times what the host takes to
    queue a copy."""
    import torch

    with made_current(buf.gpu.device):
        getattr(torch, buf.gpu.device.type)._sleep(1 << 25)


def accelerator_idle(buf):
    """Whether every job queued on the current stream of buf's device is done."""
    return current_stream(buf.gpu.device).query()


def accelerator_caller_state(device):
    """The current device, its current stream, and the current stream of `device` itself where it has an
    index (a buffer on sim:1 must leave sim:1's current stream alone too)."""
    import torch

    kind = torch.device(device.type)
    state = {f"current {device.type} device": current_index(kind), f"current {device.type} stream": current_stream(kind)}
    if device.index is not None:
        state[f"current stream of {device}"] = current_stream(device)
    return state


def accelerator_sync(device):
    """The caller's current stream on the buffer's device (`device`'s own index), or, for a device with no
    index, on every device of the type. Never torch.accelerator.synchronize(), which waits for every stream
    and hides a copy on a private one. (CUDA has its own, which leaves a GPU with no context untouched.)"""
    import torch

    indices = [device.index] if device.index is not None else range(torch.accelerator.device_count())
    for index in indices:
        torch.accelerator.current_stream(index).synchronize()


def accelerator_device_last(make, *args):
    import torch

    with torch.accelerator.device_index(torch.accelerator.device_count() - 1):
        return make(*args)


def accelerator_side_stream(make, *args):
    """The zero-fill is queued on the side stream: the caller's stream waits for it once the
    context is left, before the tensors are used there (the rule for crossing streams)."""
    import torch

    side_stream = torch.Stream()
    with side_stream:
        made = make(*args)
    torch.accelerator.current_stream().wait_stream(side_stream)
    return made


CPU = Device("cpu")

CUDA = Device(
    "cuda",
    needs="a CUDA device",
    pinning=True,
    sync=cuda_sync,
    stall=accelerator_stall,
    idle=accelerator_idle,
    capture=cuda_capture,
    forbid_sync=cuda_forbid_sync,
    allow_sync=cuda_allow_sync,
    sync_refusal="called a synchronizing",  # torch: "called a synchronizing CUDA operation"
    forbids_sync=_cuda_forbids_sync,
    launch_blocking_env="CUDA_LAUNCH_BLOCKING",
    caller_state=accelerator_caller_state,
    # A default CUDA device, the last device made current, a side stream.
    contexts=(default_device_cuda, cuda_device_last, cuda_side_stream),
    inert_contexts=(("cuda_device_last", _cuda_last_device_is_current),),
    missing=_cuda_missing,
)

SIM = Device(
    "sim",
    needs="the simulated device: cpugpu_conformance.sim, built here (a C++ compiler and ninja)",
    index=1,  # the last of its two devices: not the current one
    setup="from cpugpu_conformance import sim\n\nsim.load()  # the simulated accelerator, sim:0 and sim:1\n",
    by_name_only=True,
    prepare=_sim_prepare,
    release_limit=_sim_release_limit,
    limit_of_release=_sim_limit_of_release,
    loaded=_sim_loaded,
    simulated=True,
    pinning=True,
    sync=accelerator_sync,
    stall=accelerator_stall,
    idle=accelerator_idle,
    capture=sim_capture,
    caller_state=accelerator_caller_state,
    contexts=(default_device_sim, accelerator_device_last, accelerator_side_stream),
    missing=_sim_missing,
)

# In the order every report lists them.
REGISTRY: dict[str, Device] = {d.name: d for d in (CPU, CUDA, SIM)}
NAMES: tuple[str, ...] = tuple(REGISTRY)


class UnknownDevice(ValueError):
    """A device name the contract does not know; the message is one line naming it."""


def get(name: str) -> Device:
    try:
        return REGISTRY[name]
    except KeyError:
        raise UnknownDevice(f"unknown device {name!r}; expected one of {', '.join(NAMES)}") from None


def unavailable() -> dict[str, str]:
    """Each device this machine cannot test, with the reason."""
    return _lacking(REGISTRY.values())


def unavailable_to_run(option: str | None) -> dict[str, str]:
    """unavailable(), as a run with --device ``option`` (None: the default) needs it: a device tested
    only by name (sim) that the option does not name, and that is not loaded, is left out. The run
    leaves it out whatever it lacks, and finding out what it lacks imports torch's C++ extension
    tools and runs ninja: about 45 ms of every suite run."""
    return _lacking(d for d in REGISTRY.values() if not d.by_name_only or option == d.name or d.loaded())


def _lacking(candidates: Iterable[Device]) -> dict[str, str]:
    return {d.name: reason for d in candidates if (reason := d.missing_reason()) is not None}


def accelerators(unavailable: Mapping[str, str]) -> tuple[str, ...]:
    """The devices pinned memory serves that this machine has, given what it lacks (`unavailable()`)."""
    return tuple(d.name for d in REGISTRY.values() if d.pinning and d.name not in unavailable and d.loaded())


def accelerator_present() -> bool:
    """A device that pinned memory serves is usable here (promise 11 is not applicable then)."""
    return bool(accelerators(unavailable()))


def release_limit(device: str, release: Any) -> str | None:
    """Why a cell of torch `release` (its environment's torch) cannot test `device` at all (sim before
    torch 2.8), read from the registry without importing torch; None: it can, or either is unknown."""
    if device not in REGISTRY or not isinstance(release, str):
        return None
    return REGISTRY[device].limit_of_release(release)


def accelerators_in(environment: Mapping[str, Any]) -> tuple[str, ...]:
    """The accelerators a result's `environment` (environment() below) says its machine had."""
    found = (CUDA.name,) if environment.get("cuda_available") is True else ()
    return found + ((SIM.name,) if environment.get("sim_loaded") is True else ())


@dataclass(frozen=True)
class NonBlockingCheck:
    """How to see whether a copy from pinned memory blocks the host (promise 10), or why it cannot be seen."""

    # "stall": with a long job queued ahead on the caller's stream, the copy returns while the job still
    # runs (a copy that waited, by whatever means, finds it done); None: untestable, `reason` says why.
    method: str | None
    # Also, during the copy a synchronize this torch can refuse is refused: a second signal, which names
    # the call; torch refuses only some synchronizing calls, so it is never the only evidence.
    refuse_sync: bool = False
    reason: str | None = None


def _switched_on(value: str | None) -> bool:
    return value is not None and value.strip() not in ("", "0")


def non_blocking_check(device: Device, environ: Mapping[str, str], forbids_sync: bool) -> NonBlockingCheck:
    """The method for `device` (``forbids_sync``: this torch can turn a hidden synchronize into an
    exception, device.forbids_sync()). With launches made synchronous by the environment, a copy
    waits whatever the class does: the check is untested then, never passed. Refusing synchronizes
    alone is no check: torch does not refuse a device synchronize, an event's, or a copy into
    pageable memory."""
    var = device.launch_blocking_env
    if var and _switched_on(environ.get(var)):
        return NonBlockingCheck(None, reason=f"{var}={environ[var]} makes every {device.name} launch and copy wait "
                                             "for the work queued before it: whether the copies block cannot be seen "
                                             "(run without it)")
    if device.stall is not None and device.idle is not None:
        return NonBlockingCheck("stall", refuse_sync=device.forbid_sync is not None and forbids_sync)
    return NonBlockingCheck(None, reason=f"the registry has no way to queue a long job on {device.name}: whether the "
                                         "copies block cannot be seen")


def environment() -> dict[str, Any]:
    """The device fields of a result's environment (schema keys: torch_cuda, cuda_available, gpu_name;
    sim_loaded where sim was loaded, which makes it the process's accelerator)."""
    import torch

    cuda = CUDA.available
    fields = {
        "torch_cuda": torch.version.cuda,
        "cuda_available": cuda,
        "gpu_name": torch.cuda.get_device_name(0) if cuda else None,
    }
    if SIM.loaded():
        fields["sim_loaded"] = True
    return fields
