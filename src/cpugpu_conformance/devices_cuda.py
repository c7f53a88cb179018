"""CUDA's own hooks for the device registry (devices.py, which re-exports them): whether the machine
has a CUDA device, how to wait for its work, graph capture, sync debug mode, and the creation
contexts only CUDA has. What is written once over torch's device-generic API for every
accelerator stays in devices.py. torch is imported only inside each hook."""

from __future__ import annotations


def _cuda_missing() -> str | None:
    import torch

    if torch.cuda.is_available():
        return None
    build = f"built with CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
    return f"no CUDA device: torch.cuda.is_available() is False (torch {torch.__version__}, {build})"


def last_device_is_current(count: int) -> str | None:
    """Why making the last of `count` CUDA devices current changes nothing (None: it does, count >= 2)."""
    if count >= 2:
        return None
    return (f"with {count} CUDA device{'' if count == 1 else 's'}, torch.cuda.device(torch.cuda.device_count() - 1) "
            "makes current the device that is current already: the context is the plain one, so the check that "
            "it leaves the current CUDA device as it was cannot fire (it needs two CUDA devices)")


def _cuda_last_device_is_current() -> str | None:
    import torch

    return last_device_is_current(torch.cuda.device_count())


def _cuda_forbids_sync() -> bool:
    import torch

    return hasattr(torch.cuda, "set_sync_debug_mode") and hasattr(torch.cuda, "get_sync_debug_mode")


def cuda_sync(device):
    """The caller's current stream on the buffer's device (`device`'s own index), or, for a device with
    no index, on every CUDA device that already has a context (the buffer's has one: its memory is
    there). Never torch.cuda.synchronize(), which waits for every stream and hides a copy on a private
    one; never a device with no context, which synchronizing would create, on each GPU of a node, in
    every process."""
    import torch

    if device.index is not None:
        indices = [device.index]
    else:  # asks the driver, creating nothing
        indices = [i for i in range(torch.cuda.device_count()) if torch._C._cuda_hasPrimaryContext(i)]
    for index in indices:
        torch.cuda.current_stream(index).synchronize()


def cuda_capture(buf, copying):
    """Run copying() while the current stream of buf's device is captured into a CUDA graph (recorded, never
    replayed); return CUDA's refusal of a fork the copy left unjoined, or None.

    A stream made to wait for the capturing one (wait_stream, wait_event) joins the capture, and CUDA
    refuses to end a capture whose forks are not joined back to it (cudaErrorStreamCaptureUnjoined):
    every time, where the in-order check's timing lets such a copy land in time. Capturing runs nothing,
    and a copy between pinned memory and the device is capturable (the reference's: one cudaMemcpyAsync);
    a copy from pageable memory is not (torch refuses it), so the caller captures pinned buffers only.
    The capture is on a stream of its own, in relaxed mode where torch has it (2.1 on): other calls of
    the process are not refused. A copy that raises is ended out of capture, and its error is the one."""
    import warnings

    import torch

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.device(buf.gpu.device), torch.cuda.stream(torch.cuda.Stream(buf.gpu.device)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a copy of nothing makes an empty graph, and torch warns of it
            try:
                graph.capture_begin(capture_error_mode="relaxed")
            except TypeError:  # torch 2.0: global mode only
                graph.capture_begin()
            try:
                copying()
            except BaseException:
                try:
                    graph.capture_end()  # leaves capture mode: the stream stays usable
                except RuntimeError:
                    pass
                raise
            try:
                graph.capture_end()
            except RuntimeError as exc:
                if "not joined" not in str(exc) and "unjoined" not in str(exc).lower():
                    raise
                return str(exc).strip().splitlines()[0]
    return None


def cuda_forbid_sync(device):
    """torch >= 1.10: in "error" mode a synchronizing CUDA call raises (a blocking copy included).
    The mode is process-wide, so allow_sync puts the previous one back at once. Setting it warns
    that the mode is a prototype: no part of the check, and an error under `-W error`."""
    import warnings

    import torch

    previous = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.cuda.set_sync_debug_mode("error")
    return previous


def cuda_allow_sync(device, previous):
    import torch

    torch.cuda.set_sync_debug_mode(previous)


def default_device_cuda(make, *args):
    import torch

    with torch.device("cuda"):
        return make(*args)


def cuda_device_last(make, *args):
    import torch

    with torch.cuda.device(torch.cuda.device_count() - 1):
        return make(*args)


def cuda_side_stream(make, *args):
    """The zero-fill is queued on the side stream: the caller's stream waits for it once the
    context is left, before the tensors are used there (CUDA's rule for crossing streams)."""
    import torch

    side_stream = torch.cuda.Stream()
    with torch.cuda.stream(side_stream):
        made = make(*args)
    torch.cuda.current_stream().wait_stream(side_stream)
    return made
