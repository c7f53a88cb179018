"""Classes the suite must refuse before testing, or survive while testing.

The first three cannot take the contract's arguments: a usage error, not a test failure.
"""


class PositionalFlags:
    def __init__(self, size, dtype, device):
        pass


class NoDevice:
    def __init__(self, *size, dtype, pin_memory, with_numpy=True):
        pass


NOT_A_CLASS = 42


class _CorrectBuffer:
    """The reference's allocation, for the classes below that are correct but for one fault. The
    reference (and with it torch) is imported only when one is built: importing this module loads
    no torch (xdist's controller)."""

    def _allocate(self, size, dtype, device, pin_memory, with_numpy):
        from cpugpu_conformance.reference import CpuGpuBuffer

        CpuGpuBuffer.__init__(self, *size, dtype=dtype, device=device, pin_memory=pin_memory, with_numpy=with_numpy)

    def copy_to_gpu(self, n=None):
        return self.gpu[:n].copy_(self.cpu[:n], non_blocking=True)

    def copy_to_cpu(self, n=None):
        return self.cpu[:n].copy_(self.gpu[:n], non_blocking=True)


class SegfaultsOnFifth(_CorrectBuffer):
    """A correct buffer whose fifth construction in a process kills it with SIGSEGV,
    as a native extension with a memory bug would."""

    constructions = 0

    def __init__(self, *size, dtype, device, pin_memory, with_numpy=True):
        import os
        import signal


        type(self).constructions += 1
        if type(self).constructions == 5:
            os.kill(os.getpid(), signal.SIGSEGV)
        self._allocate(size, dtype, device, pin_memory, with_numpy)


class TwoBugsBuffer(_CorrectBuffer):
    """Breaks two promises in two different tests: np is a copy (5), and bfloat16 with
    with_numpy=True raises TypeError instead of ValueError (6)."""

    def __init__(self, *size, dtype, device, pin_memory, with_numpy=True):
        import torch

        if with_numpy and dtype == torch.bfloat16:
            raise TypeError("no bfloat16 in NumPy")
        with torch.inference_mode(False):
            self.cpu = torch.zeros(*size, dtype=dtype, device="cpu", pin_memory=pin_memory)
            self.gpu = torch.zeros_like(self.cpu, device=device)
        if with_numpy:
            self.np = self.cpu.numpy().copy()


class RefusesZeroLength(_CorrectBuffer):
    """Correct, except that its constructor refuses zero-length dimensions, which promise 1 allows."""

    def __init__(self, *size, dtype, device, pin_memory, with_numpy=True):

        if 0 in size:
            raise ValueError("zero-length dimensions are not supported")
        self._allocate(size, dtype, device, pin_memory, with_numpy)
