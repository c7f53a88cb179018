"""What the benchmarks share: the median wall time of a call, over repeated runs. Each bench_*.py
imports it from beside itself (a script's own folder comes first on sys.path)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any


def median_seconds(fn: Callable[[], Any], repeat: int) -> float:
    """The median, over ``repeat`` calls of ``fn()``, of the seconds each took."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)
