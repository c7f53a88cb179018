"""What the sim backend does, checked in a process of its own (tests/test_sim_backend.py runs it).

Loading sim makes it torch's accelerator for the whole process, so these checks never run in a
test process: ``python tests/sim_probe.py`` loads it, runs every ``check_*`` function and prints
one JSON object, name -> "ok" or the failure's traceback. Each check asserts what it needs; the
timing ones compare against a job many times longer than the host takes to queue a copy.
"""

from __future__ import annotations

import json
import threading
import traceback

import torch

# A job long enough that a host queuing one copy is never that slow: 2**27 cycles, about 134 ms.
LONG = 1 << 27


def _pinned(*size, value=0, dtype=torch.float32):
    t = torch.zeros(*size, dtype=dtype, pin_memory=True)
    return t.fill_(value)


def _stall(device: int, cycles: int = LONG) -> None:
    with torch.accelerator.device_index(device):
        torch.sim._sleep(cycles)


def check_two_devices_and_the_accelerator_api():
    assert torch.accelerator.is_available() and torch.accelerator.device_count() == 2
    assert torch.accelerator.current_accelerator() == torch.device("sim")
    a, b = torch.zeros(3, device="sim:0"), torch.zeros(3, device="sim:1")
    assert (a.device, b.device) == (torch.device("sim", 0), torch.device("sim", 1))
    assert torch.zeros(3, device="sim").device == torch.device("sim", 0)  # the current device
    torch.accelerator.set_device_index(1)
    try:
        assert torch.accelerator.current_device_index() == 1
        assert torch.zeros(3, device="sim").device == torch.device("sim", 1)
    finally:
        torch.accelerator.set_device_index(0)
    b.fill_(5)
    a.copy_(b)  # across devices
    assert a.cpu().tolist() == [5.0, 5.0, 5.0]
    try:
        torch.zeros(1, device="sim:2")
    except RuntimeError as exc:
        assert "invalid device index 2" in str(exc), exc
    else:
        raise AssertionError("sim:2 was accepted")


def check_pinned_memory_is_reported():
    assert torch.zeros(4, pin_memory=True).is_pinned()
    assert torch.ones(4).pin_memory().is_pinned()
    assert not torch.zeros(4).is_pinned()
    assert _pinned(8)[2:5].is_pinned()  # a view into pinned memory is pinned


def check_zeros_and_views():
    x = torch.zeros(4, 3, dtype=torch.float64, device="sim:1")
    assert x.cpu().eq(0).all()
    like = torch.zeros_like(torch.ones(2, 5, dtype=torch.int16), device=torch.device("sim", 1))
    assert like.device == torch.device("sim", 1) and like.dtype == torch.int16 and not like.cpu().any()
    x[1:3] = 2.5
    x[:, 0].fill_(-1)
    assert x.cpu().tolist() == [[-1, 0, 0], [-1, 2.5, 2.5], [-1, 2.5, 2.5], [-1, 0, 0]]
    assert x.t().contiguous().cpu().tolist()[0] == [-1, -1, -1, -1]
    raw = torch.empty(0, dtype=torch.uint8, device=x.device).set_(x.untyped_storage(), 8, (3, 8), (8, 1))
    assert raw.cpu().view(torch.float64).flatten().tolist() == [0, 0, -1]
    assert bool((x == 2.5).any()) and int((x != 0).sum()) == 8  # computed on a copy on the host


def check_a_non_blocking_copy_from_pinned_memory_returns_before_it_lands():
    src, dst = _pinned(1 << 16, value=3), torch.zeros(1 << 16, device="sim:1")
    stream = torch.accelerator.current_stream(1)
    _stall(1)
    dst.copy_(src, non_blocking=True)
    assert not stream.query(), "the copy waited for the job queued before it"
    stream.synchronize()
    assert dst.cpu().eq(3).all(), "the copy had not landed once the stream was synchronized"


def check_device_to_pinned_host_lands_only_once_the_stream_is_synchronized():
    dev = torch.zeros(64, device="sim:0").fill_(9)
    host = _pinned(64, value=1)
    _stall(0)
    host.copy_(dev, non_blocking=True)
    assert host.eq(1).all(), "the copy into pinned memory landed before the job queued ahead of it ended"
    torch.accelerator.current_stream(0).synchronize()
    assert host.eq(9).all()


def check_copies_with_pageable_memory_wait_for_the_stream():
    dev = torch.zeros(64, device="sim:0").fill_(4)
    for make_copy in (lambda: torch.zeros(64).copy_(dev, non_blocking=True),
                      lambda: dev.copy_(torch.full((64,), 4.0), non_blocking=True)):
        _stall(0, LONG // 4)
        make_copy()
        assert torch.accelerator.current_stream(0).query(), "a copy with pageable memory returned before the stream's work"
    assert torch.zeros(64).copy_(dev, non_blocking=True).eq(4).all()


def check_a_stream_runs_its_work_in_order():
    dev = torch.zeros(1000, device="sim:0")
    for value in range(1, 30):
        dev.fill_(value)
        if value == 5:
            _stall(0, LONG // 8)
    assert dev.cpu().eq(29).all()


def check_streams_and_events():
    host, dev = _pinned(16), torch.full((16,), 6.0).to("sim:0")
    side = torch.Stream(device="sim:0")
    assert side.device == torch.device("sim", 0) and side != torch.accelerator.current_stream(0)
    with side:
        assert torch.accelerator.current_stream(0) == side
        _stall(0)
    assert torch.accelerator.current_stream(0) != side
    assert not side.query() and torch.accelerator.current_stream(0).query()
    done = torch.Event(device="sim:0")
    done.record(side)
    assert not done.query()
    torch.accelerator.current_stream(0).wait_event(done)
    host.copy_(dev, non_blocking=True)  # on the current stream, which waits for the side stream's job
    assert not torch.accelerator.current_stream(0).query()
    done.synchronize()
    torch.accelerator.current_stream(0).synchronize()
    assert host.eq(6).all() and done.query() and side.query()


def check_the_current_stream_and_device_are_per_thread():
    side = torch.Stream(device="sim:1")
    seen = {}
    default = torch.accelerator.current_stream(1)
    torch.accelerator.set_stream(side)
    torch.accelerator.set_device_index(1)
    try:
        worker = threading.Thread(target=lambda: seen.update(
            device=torch.accelerator.current_device_index(), stream=torch.accelerator.current_stream(1)))
        worker.start()
        worker.join()
        assert torch.accelerator.current_stream(1) == side
    finally:
        torch.accelerator.set_stream(default)
        torch.accelerator.set_device_index(0)
    assert seen["device"] == 0 and seen["stream"].stream_id == 0  # a new thread: device 0, the default stream


def check_synchronize_waits_for_every_stream_of_the_device():
    side = torch.Stream(device="sim:1")
    with side:
        _stall(1, LONG // 4)
    torch.accelerator.synchronize(1)
    assert side.query()


def check_a_fork_left_unjoined_is_named_and_a_joined_one_is_not():
    from cpugpu_conformance import sim

    host, dev = _pinned(32, value=2), torch.zeros(32, device="sim:0")
    caller = torch.accelerator.current_stream(0)
    fork = torch.Stream(device="sim:0")

    def forked():
        fork.wait_stream(caller)
        with fork:
            dev.copy_(host, non_blocking=True)

    def joined():
        forked()
        caller.wait_stream(fork)

    unjoined = sim.unjoined_work("sim:0", forked)
    assert len(unjoined) == 1 and f"stream {fork.stream_id} " in unjoined[0] and "never waits for" in unjoined[0], unjoined
    assert sim.unjoined_work("sim:0", joined) == []
    assert sim.unjoined_work("sim:0", lambda: dev.copy_(host, non_blocking=True)) == []  # the caller's stream itself
    torch.accelerator.synchronize(0)


def check_the_stall_is_on_the_simulated_clock():
    """A host that only queries finds the job running for its span (a host that waits for it ends it
    early, when time runs ahead: see the next check)."""
    import time

    stream = torch.accelerator.current_stream(0)
    start = time.perf_counter()
    _stall(0, 1 << 25)
    while not stream.query():
        time.sleep(0.001)
    took = time.perf_counter() - start
    assert 0.03 <= took < 5, took  # 2**25 cycles at 1 GHz: 34 ms


def check_a_host_wait_runs_time_ahead_only_after_what_other_streams_hold():
    """Synchronizing a stalled stream ends its stall early (time runs ahead while the host waits),
    but only once the other streams have run what they could during the span: a copy queued on a
    private stream lands before the work queued behind the stall, as it would on a device, every time,
    also when it waits behind a shorter stall of its own."""
    host, queued = _pinned(1 << 12, value=3), torch.full((1 << 12,), 5.0, device="sim:0")
    dev = torch.zeros(1 << 12, device="sim:0")
    caller, private = torch.accelerator.current_stream(0), torch.Stream(device="sim:0")
    for private_stall in (0, LONG // 16) * 8:
        dev.zero_()
        caller.synchronize()
        _stall(0)
        dev.copy_(queued)  # the caller's work, behind the stall
        with private:
            if private_stall:
                torch.sim._sleep(private_stall)
            dev.copy_(host, non_blocking=True)  # lands during the span, before the caller's work
        assert not caller.query()
        caller.synchronize()
        private.synchronize()
        assert dev.eq(5).all(), f"a copy on another stream landed after the work behind the stall ({private_stall=})"
    event = torch.Event(device="sim:0")
    _stall(0)
    event.record(caller)
    event.synchronize()  # an event's wait runs time ahead too
    assert caller.query()


def check_an_operator_sim_lacks_is_one_clear_error():
    try:
        torch.sin(torch.zeros(2, device="sim:0"))
    except NotImplementedError as exc:
        message = str(exc).splitlines()[0]
        assert message.startswith("sim: aten::sin is not implemented on the simulated device"), message
    else:
        raise AssertionError("torch.sin ran on sim")


def check_memory_freed_while_a_copy_is_queued_stays_mapped_until_it_lands():
    host = _pinned(1 << 12, value=8)
    _stall(0, LONG // 4)
    dev = torch.zeros(1 << 12, device="sim:0")
    dev.copy_(host, non_blocking=True)
    out = _pinned(1 << 12)
    out.copy_(dev, non_blocking=True)
    del host, dev  # the queued copies hold their memory
    torch.accelerator.current_stream(0).synchronize()
    assert out.eq(8).all()


CHECKS = {name: func for name, func in sorted(globals().items()) if name.startswith("check_")}


def outcomes(checks: dict, after=lambda: None) -> dict[str, str]:
    """Each check run in turn: "ok", or its traceback (each check's failure is its own report);
    ``after`` runs after each, whatever it did."""
    outcome = {}
    for name, check in checks.items():
        try:
            check()
            outcome[name] = "ok"
        except BaseException:  # noqa: BLE001
            outcome[name] = traceback.format_exc()
        finally:
            after()
    return outcome


def main() -> None:
    from cpugpu_conformance import sim

    sim.load()
    print(json.dumps(outcomes(CHECKS)))


if __name__ == "__main__":
    main()
