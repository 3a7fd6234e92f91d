"""Lower the steady background floor of the clean training speech.

The clean recordings (LibriSpeech above all) carry their own room tone and hiss. A model trained to
reproduce them reproduces that floor too: its DNSMOS BAK stops at the clean references' level, while a
suppressor such as RNNoise goes beyond it (`TrainConfig.target_floor_db`; tried, not used by the
shipped model: it bought background with words and PESQ, docs/training.md). This
lowers the floor of each clean utterance before it becomes a training target: a power spectral
subtraction against the utterance's own steady floor (a low percentile of each frequency bin over
time), with the gain bounded below, so the floor drops by at most `depth_db` and loud speech bins
keep a gain of ~1. The adversarial term can show its discriminators clean speech with the floor lowered
(`TrainConfig.adv_real_floor_db`) while the flow targets keep theirs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def suppress_floor(x: torch.Tensor, depth_db: float, n_fft: int = 512, hop: int = 128,
                   percentile: float = 0.1, over: float = 3.0) -> torch.Tensor:
    """x: (..., N) float waveforms -> same shape, each one's steady floor lowered by up to `depth_db`.

    The power is smoothed over 9 frames and 3 bins (a noise-only bin's smoothed power then stays within
    a factor of ~3 of its mean, which `over` covers); the floor of each bin is the `percentile` of that
    over the utterance; the gain is sqrt(max(1 - over * floor / smoothed, 10^(-depth_db/10))).
    Deterministic; depth 0 returns x."""
    if depth_db <= 0 or x.shape[-1] < n_fft:
        return x
    lead = x.shape[:-1]
    win = torch.hann_window(n_fft, device=x.device)
    spec = torch.stft(x.float().reshape(-1, x.shape[-1]), n_fft, hop, window=win, return_complex=True)  # (B, F, T)
    power = spec.abs().square()
    smooth = F.avg_pool2d(power[:, None], (3, 9), 1, (1, 4), count_include_pad=False)[:, 0]
    floor = torch.quantile(smooth, percentile, dim=-1, keepdim=True)
    gmin = 10 ** (-depth_db / 10)  # power gain
    gain = (1 - over * floor / smooth.clamp_min(1e-20)).clamp_min(gmin).sqrt()
    y = torch.istft(spec * gain, n_fft, hop, window=win, length=x.shape[-1])
    return y.reshape(*lead, x.shape[-1]).to(x.dtype)
