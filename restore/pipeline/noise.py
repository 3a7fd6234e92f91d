"""Per-window Gaussian noise for the sampler loop.

Every window draws from its own CPU generator, seeded by (seed, window index), so that a seed gives
the same audio on every plan and whatever the batching. Where short files share a window, each file's
frames (restore/pipeline/windows.py `spans`) draw from the generator it would have alone. Drawing is CPU work: 16 windows of 30 s are
15.4 M normals, 125 ms on one core of the 2-core machine, where a whole guided step of the default
model on an H200 takes ~35 ms. The stochastic `pro` sampler draws once per step, so on a GPU drawing
inline would bound the loop. With a thread pool, each draw is made one call ahead, its windows spread
over the pool's threads (torch releases the GIL), into pinned memory that is copied to the GPU without
blocking; torch's caching host allocator keeps a pinned block until its copy has finished.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

import torch


class WindowNoise:
    """Callable: each call returns the next draw, (sum(rows), *shape) fp32 on `device`.

    `pieces`: per window, (seed, frames) for each run of its frames, in order, adding up to shape[0]:
    one piece for a window of one file. `draws` is how many calls the loop will make
    (`loop.noise_draws`); nothing is drawn ahead past it. Without a pool every draw is made inline, on
    the calling thread."""

    def __init__(self, pieces: list[list[tuple[int, int]]], rows: list[int], shape: tuple[int, ...], draws: int,
                 device: torch.device | str = "cpu", pool: ThreadPoolExecutor | None = None):
        self.pieces = [[(torch.Generator().manual_seed(seed), frames) for seed, frames in window] for window in pieces]
        self.rows, self.shape, self.left = rows, tuple(shape), draws
        self.device = torch.device(device)
        self.pool = pool
        self.pin = pool is not None and self.device.type == "cuda"
        self.pending: tuple[torch.Tensor, list[Future]] | None = None

    def _start(self) -> tuple[torch.Tensor, list[Future]]:
        """Begin the next draw: each piece's rows and frames filled from its generator, on the pool if
        there is one."""
        buf = torch.empty((sum(self.rows), *self.shape), pin_memory=self.pin)
        futures, r = [], 0
        for window, n in zip(self.pieces, self.rows):
            t = 0
            for g, frames in window:
                target = buf[r : r + n, t : t + frames]
                if self.pool is None:
                    _fill(target, g)
                else:
                    futures.append(self.pool.submit(_fill, target, g))
                t += frames
            r += n
        return buf, futures

    def __call__(self) -> torch.Tensor:
        if self.left <= 0:
            raise RuntimeError("more noise drawn than announced")
        self.left -= 1
        buf, futures = self.pending if self.pending is not None else self._start()
        for f in futures:
            f.result()
        self.pending = self._start() if self.pool is not None and self.left > 0 else None
        return buf.to(self.device, non_blocking=self.pin)


def _fill(rows: torch.Tensor, gen: torch.Generator) -> None:
    """The same values as torch.randn(rows.shape, generator=gen), also where `rows` is a view of some of
    a buffer's frames (filled through a contiguous copy). Inference mode is per thread: in a pool thread
    the buffer may have been made under the caller's."""
    with torch.inference_mode():
        if rows.is_contiguous():
            rows.normal_(generator=gen)
        else:
            rows.copy_(torch.empty(rows.shape).normal_(generator=gen))
