"""The fixed CpuGpuBuffer (vLLM ``vllm/v1/utils.py``): the implementation the contract is read from."""

from __future__ import annotations

import torch


class CpuGpuBuffer:
    """A host tensor, a device tensor of the same shape and dtype, and a NumPy view of the host one."""

    def __init__(
        self,
        *size: int | torch.SymInt,
        dtype: torch.dtype,
        device: torch.device | str,
        pin_memory: bool,
        with_numpy: bool = True,
    ) -> None:
        # The fix: a buffer made while the caller is in inference mode must still be
        # mutable after the caller leaves it, so never allocate inference tensors.
        with torch.inference_mode(False):
            self.cpu = torch.zeros(*size, dtype=dtype, device="cpu", pin_memory=pin_memory)
            self.gpu = torch.zeros_like(self.cpu, device=device)
        if with_numpy:
            if dtype == torch.bfloat16:
                raise ValueError(
                    "Bfloat16 torch tensors cannot be directly cast to a numpy array, so "
                    "call CpuGpuBuffer with with_numpy=False"
                )
            self.np = self.cpu.numpy()

    def copy_to_gpu(self, n: int | None = None) -> torch.Tensor:
        if n is None:
            return self.gpu.copy_(self.cpu, non_blocking=True)
        return self.gpu[:n].copy_(self.cpu[:n], non_blocking=True)

    def copy_to_cpu(self, n: int | None = None) -> torch.Tensor:
        """NOTE: Because this method is non-blocking, explicit synchronization is needed."""
        if n is None:
            return self.cpu.copy_(self.gpu, non_blocking=True)
        return self.cpu[:n].copy_(self.gpu[:n], non_blocking=True)
