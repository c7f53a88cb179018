"""sim's own hooks for the device registry (devices.py, which re-exports them): whether sim can be
built and loaded here, which torch releases can host it, its creation context, and its join check
(promise 10). sim is cpugpu_conformance.sim, the project's simulated accelerator; what is written once
over torch's device-generic API stays in devices.py. torch and sim are imported only inside each hook."""

from __future__ import annotations


def _sim_missing() -> str | None:
    from . import sim

    return sim.missing()


def _sim_loaded() -> bool:
    from . import sim

    return sim.loaded()


def _sim_release_limit() -> str | None:
    from . import sim

    return sim.torch_too_old()


def _sim_limit_of_release(release: str) -> str | None:
    from . import sim

    return sim.too_old(release)


def _sim_prepare() -> str | None:
    from . import sim

    try:
        sim.load()
    except sim.SimUnavailable as exc:
        return str(exc)
    return None


def sim_capture(buf, copying):
    """Run copying() and report work it queued on a stream that the caller's current stream on buf's device
    never waits for (sim's own bookkeeping of which stream waited for which, cpugpu_conformance.sim's
    unjoined_work: what CUDA's graph capture refuses as an unjoined fork, seen every time). Unlike a
    capture, the copy runs."""
    import torch

    device = buf.gpu.device
    torch.ops.sim.join_check_begin(device.index, torch.accelerator.current_stream(device).stream_id)
    try:
        copying()
    finally:
        unjoined = list(torch.ops.sim.join_check_end())
    return "; ".join(unjoined) if unjoined else None


def default_device_sim(make, *args):
    import torch

    with torch.device("sim"):
        return make(*args)
