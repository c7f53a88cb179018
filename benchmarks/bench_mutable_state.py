"""Speed of the walk and checks of MutableStateTests / assert_mutable_state (issue 25), as ratios.

Builds an engine-shaped object holding --tensors tensors (layers with weights and a KV
cache each, a dict of per-request tables, a pool of free blocks in a set, a linked list of
block records with no tensors, back references making cycles), then measures, one after
another, the median of --repeat runs of:

  create      making those tensors (torch.zeros, the small sizes an engine's bookkeeping has):
              the baseline, measured in this same run
  walk        state_walk.walk(): every tensor reachable, by path
  check       mutable_state.check_state(): the walk and each tensor's checks (is_inference,
              an in-place update outside and inside inference mode)
  one large   the checks of one --big-mib tensor (1 GiB): the update is a copy onto itself,
              which torch skips, so a tensor's size costs nothing (against creating it)

and prints seconds and each as a ratio to `create`. No target is asserted: the numbers are
for reading (tests/ check that the walk ends, never how fast).

    python benchmarks/bench_mutable_state.py [--tensors 10000] [--repeat 5] [--big-mib 1024]
"""

from __future__ import annotations

import argparse
import sys
import types
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

import torch  # noqa: E402
from timing import median_seconds  # noqa: E402  (beside this script)

from cpugpu_conformance.testing.engine.mutable_state import check_state  # noqa: E402
from cpugpu_conformance.testing.engine.walk import walk  # noqa: E402


def make_tensors(n: int) -> list[torch.Tensor]:
    return [torch.zeros(8) for _ in range(n)]


def engine_state(tensors: list[torch.Tensor]) -> Any:
    """An engine-shaped object over the given tensors: a quarter each as layer weights, KV caches,
    per-request tables and free blocks, with cycles and a long tensor-free linked list."""
    q = len(tensors) // 4
    layers = [types.SimpleNamespace(w=tensors[i], kv={"k": tensors[q + i]}) for i in range(q)]
    state = types.SimpleNamespace(
        layers=layers,
        tables={f"request-{i}": [tensors[2 * q + i]] for i in range(q)},
        free=set(tensors[3 * q:]),
    )
    head = None
    for _ in range(len(tensors)):  # block records: bookkeeping with no tensors, to be walked through
        head = types.SimpleNamespace(next=head, ref_count=0)
    state.blocks = head
    for layer in layers:
        layer.engine = state  # back references: cycles the walk must end
    return state


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tensors", type=int, default=10_000, help="tensors in the object (default 10000)")
    parser.add_argument("--repeat", type=int, default=5, help="runs of each measurement; the median is printed")
    parser.add_argument("--big-mib", type=int, default=1024, help="size of the one large tensor checked (default 1024)")
    args = parser.parse_args()
    for flag, value, least in (("--tensors", args.tensors, 4), ("--repeat", args.repeat, 1), ("--big-mib", args.big_mib, 1)):
        if value < least:
            print(f"{flag} {value}: must be at least {least}", file=sys.stderr)
            return 2

    tensors = make_tensors(args.tensors)
    state = engine_state(tensors)
    found = walk(state, max_depth=2 * args.tensors + 10)
    assert len(found.tensors) == args.tensors, f"the walk found {len(found.tensors)} of {args.tensors} tensors"
    checked = check_state(state, max_depth=2 * args.tensors + 10)
    assert checked.ok and checked.checked == args.tensors, checked.lines()

    create = median_seconds(lambda: make_tensors(args.tensors), args.repeat)
    rows = [("create", create)]
    rows.append(("walk", median_seconds(lambda: walk(state, max_depth=2 * args.tensors + 10), args.repeat)))
    rows.append(("check", median_seconds(lambda: check_state(state, max_depth=2 * args.tensors + 10), args.repeat)))
    elements = args.big_mib * (1 << 18)  # float32: 2**18 elements a MiB
    big = types.SimpleNamespace(kv=torch.zeros(elements))
    create_big = median_seconds(lambda: torch.zeros(elements), args.repeat)
    check_big = median_seconds(lambda: check_state(big), args.repeat)

    print(f"torch {torch.__version__}, {args.tensors} tensors (plus {args.tensors} tensor-free records), "
          f"median of {args.repeat}")
    for name, seconds in rows:
        print(f"  {name:<12}{seconds * 1000:10.1f} ms  {seconds / create:6.2f}x create")
    per_tensor = rows[2][1] / args.tensors * 1e6
    print(f"  check, per tensor (the walk included): {per_tensor:.1f} us")
    print(f"  check of one {args.big_mib} MiB tensor: {check_big * 1000:.2f} ms, {check_big / create_big:.4f}x "
          f"creating it ({create_big * 1000:.1f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
