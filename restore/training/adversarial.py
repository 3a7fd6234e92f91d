"""An adversarial term for the one-step estimate: multi-resolution spectrogram discriminators.

The flow loss makes the estimate at t = 1 a conditional mean. Where the network cannot tell speech from
noise it hedges, so the noise it is unsure of stays in at a lower level and the upper band is dull: the
background and the quality a listener (and DNSMOS) hears. A mean square cannot fix this, since the mean
is what it asks for; a discriminator that tells clean speech from estimates can, as in the neural
vocoders and the GAN-trained enhancers. The estimate keeps its flow and log-mel terms as the anchor to
the clean speech, and `TrainConfig.adv_weight` adds the discriminator's verdict and `fm_weight` the
distance of its features (feature matching, which gives the generator a graded target).

Each discriminator reads a crop of the decoded waveform as a compressed complex STFT at its own
resolution (magnitude^0.3 with the phase: real, imaginary and the magnitude itself) through 2D
convolutions over time x frequency, strided in frequency and dilated in time, and scores each patch
(least-squares GAN). The generator is the network itself: what ships is unchanged.
"""

from __future__ import annotations

import torch
from torch import nn

RESOLUTIONS = (256, 512, 1024)  # STFT sizes, hop a quarter of each
POWER = 0.3  # magnitude compression of the discriminators' input


class SpectrogramDiscriminator(nn.Module):
    """Scores (B, N) waveforms patch by patch from one STFT resolution; returns (scores, features)."""

    def __init__(self, n_fft: int, channels: int = 32):
        super().__init__()
        self.n_fft, self.hop = n_fft, n_fft // 4
        self.register_buffer("window", torch.hann_window(n_fft), persistent=False)
        c = channels
        wn = nn.utils.parametrizations.weight_norm
        self.convs = nn.ModuleList([
            wn(nn.Conv2d(3, c, (3, 9), padding=(1, 4))),
            wn(nn.Conv2d(c, c, (3, 9), stride=(1, 2), dilation=(1, 1), padding=(1, 4))),
            wn(nn.Conv2d(c, c, (3, 9), stride=(1, 2), dilation=(2, 1), padding=(2, 4))),
            wn(nn.Conv2d(c, c, (3, 9), stride=(1, 2), dilation=(4, 1), padding=(4, 4))),
            wn(nn.Conv2d(c, c, (3, 3), padding=(1, 1))),
        ])
        self.out = wn(nn.Conv2d(c, 1, (3, 3), padding=(1, 1)))

    def spectrogram(self, wave: torch.Tensor) -> torch.Tensor:
        """(B, N) -> (B, 3, frames, bins): compressed real, imaginary and magnitude."""
        spec = torch.stft(wave.float(), self.n_fft, self.hop, window=self.window, return_complex=True)
        mag = spec.abs().clamp_min(1e-7)
        scaled = spec * (mag ** (POWER - 1))
        x = torch.stack([scaled.real, scaled.imag, mag ** POWER], 1)  # (B, 3, bins, frames)
        return x.transpose(2, 3)

    def forward(self, wave: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        x = self.spectrogram(wave)
        feats = []
        for conv in self.convs:
            x = nn.functional.leaky_relu(conv(x), 0.2)
            feats.append(x)
        return self.out(x), feats


class MultiResolutionDiscriminator(nn.Module):
    def __init__(self, channels: int = 32, resolutions: tuple = RESOLUTIONS):
        super().__init__()
        self.discs = nn.ModuleList([SpectrogramDiscriminator(n, channels) for n in resolutions])

    def forward(self, wave: torch.Tensor) -> list[tuple[torch.Tensor, list[torch.Tensor]]]:
        return [d(wave) for d in self.discs]


def _row_mean(x: torch.Tensor) -> torch.Tensor:
    return x.float().flatten(1).mean(1)


def discriminator_loss(disc: MultiResolutionDiscriminator, real: torch.Tensor, fake: torch.Tensor,
                       fake_weight: torch.Tensor) -> torch.Tensor:
    """Least-squares loss of the discriminators: real crops scored 1, the estimates' crops 0; the fake
    rows weighted by `fake_weight` (B,) (the rows whose estimate is judged)."""
    loss = real.new_zeros(())
    share = fake_weight / fake_weight.sum().clamp_min(1)
    for (sr, _), (sf, _) in zip(disc(real), disc(fake)):
        loss = loss + _row_mean((sr - 1).square()).mean() + (_row_mean(sf.square()) * share).sum()
    return loss / len(disc.discs)


def generator_terms(disc: MultiResolutionDiscriminator, real: torch.Tensor, fake: torch.Tensor,
                    weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(adversarial, feature matching) terms of the estimates `fake` against the clean crops `real`,
    rows weighted by `weight` (B,): the estimates want a score of 1 and the discriminators' features of
    the clean speech (each layer's L1 distance relative to the clean features' mean magnitude)."""
    share = weight / weight.sum().clamp_min(1)
    with torch.no_grad():
        ref = [f for _, f in disc(real)]
    adv, fm = real.new_zeros(()), real.new_zeros(())
    for (sf, ff), fr in zip(disc(fake), ref):
        adv = adv + (_row_mean((sf - 1).square()) * share).sum()
        for a, b in zip(ff, fr):
            d = _row_mean((a.float() - b.float()).abs()) / b.float().abs().mean().clamp_min(1e-6)
            fm = fm + (d * share).sum() / len(ff)
    n = len(disc.discs)
    return adv / n, fm / n


def crop_frames(latents: torch.Tensor, start: torch.Tensor, frames: int) -> torch.Tensor:
    """(B, T, D) latents -> (B, frames, D), row b from frame start[b] on (static shapes)."""
    idx = start[:, None] + torch.arange(frames, device=latents.device)[None]
    return torch.gather(latents, 1, idx[:, :, None].expand(-1, -1, latents.shape[-1]))
