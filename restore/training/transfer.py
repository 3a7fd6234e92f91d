"""Host-made values onto the device without waiting for it."""

from __future__ import annotations

import torch


def to_device(values, device, dtype: torch.dtype | None = None) -> torch.Tensor:
    """`values` (a list, an array or a CPU tensor) as a tensor on `device`, copied without a host sync.

    A blocking copy to a GPU (`torch.tensor(..., device=...)`, `.to(device)`, indexing a GPU tensor with
    a list) waits until every kernel queued before it on the stream has run. The batch producer makes
    dozens of these per batch, and beside the training step each one waited behind the step's kernels.
    CUDA stages pageable host memory before an asynchronous copy returns, so the host values may be
    dropped at once."""
    return torch.as_tensor(values, dtype=dtype).to(device, non_blocking=True)
