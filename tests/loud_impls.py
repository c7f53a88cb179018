"""Classes that fail every promise at once, as loudly as they can: the reproducers of the size
measurements behind results.MAX_FILE_BYTES (benchmarks/bench_result_cap.py prints them again).

    BreaksEverything  every promise broken the way a real bug breaks it: the suite's own messages
    RaisesLoudly      every call raises with a 100 kB message (cut to results.TEXT_LIMIT characters)
    RaisesWide        the same in 4-byte UTF-8 characters and escaped quotes: the most bytes a kept
                      character can take

torch is imported only when one is built.
"""

from __future__ import annotations

import math


class BreaksEverything:
    """Flat, ones, made in the caller's mode, one storage, a NumPy copy, bfloat16 and float8 accepted,
    copies that ignore n and rebind, grad mode switched off, and one pooled storage per size."""

    _pool: dict = {}

    def __init__(self, *size, dtype, device, pin_memory, with_numpy=True):
        import torch

        torch.set_grad_enabled(False)  # 12
        n = math.prod(int(s) for s in size)
        if (n, dtype) not in self._pool:  # 13: handed out again, never zeroed again
            self._pool[(n, dtype)] = torch.ones(n, dtype=dtype)
        self.cpu = self._pool[(n, dtype)]  # 1 flat, 2 ones, 3 the caller's mode
        self.gpu = self.cpu  # 4
        if with_numpy:  # 5 a copy, 6 bfloat16 accepted, 7 bytes for float8
            try:
                self.np = self.cpu.numpy().copy()
            except TypeError:
                self.np = self.cpu.view(torch.uint8).numpy().copy() if self.cpu.element_size() == 1 else None
        else:
            self.np = None

    def copy_to_gpu(self, n=None):  # 8, 9
        self.gpu = self.cpu.clone()
        return self.gpu

    def copy_to_cpu(self, n=None):
        self.cpu = self.gpu.clone()
        return self.cpu


class RaisesLoudly:
    """Every call raises with a 100 kB message."""

    TEXT = "broken " + "x" * 100_000 + "\nthe last line"

    def __init__(self, *size, dtype, device, pin_memory, with_numpy=True):
        raise RuntimeError(self.TEXT)

    def copy_to_gpu(self, n=None):
        raise RuntimeError(self.TEXT)

    def copy_to_cpu(self, n=None):
        raise RuntimeError(self.TEXT)


class RaisesWide(RaisesLoudly):
    """Every call raises with 60,000 four-byte characters and 20,000 escaped quotes."""

    TEXT = "\U0001f4a5" * 60_000 + '"\\' * 20_000 + "\nthe last line"
