"""The diffusion transformer: predicts the rectified-flow velocity of codec latents.

Inputs per window: the noisy latents x_t (B, T, D), the flow time t (B,), and the conditions:
observation latents of the degraded input (B, T, D), semantic features (B, T, S) from the condition
encoder, and transcript tokens (B, L) behind a learned null token. The three guidance branches are rows
of one batch that differ only in which conditions they keep:
  u   = no conditions (null cond vector, null text)      use_cond=False
  so  = semantic + observation, null text                use_cond=True, text = [null]
  sot = all conditions                                   use_cond=True, text = [null, tokens...]
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..config import CodecConfig, ModelConfig
from ..sampling.source import check_source
from .encoder import SemanticEncoder, TextEncoder, timestep_features
from .layers import Block, RMSNorm, group_mask, rotary_tables
from .precondition import ObsSkip


@dataclass
class Context:
    """Everything a forward pass needs that does not change across sampler steps of one window."""
    cond_h: torch.Tensor                 # (B, T, C) projected conditions, or the null vector for u rows
    text: torch.Tensor | None            # (B, L, Wt) text states, position 0 = null token
    text_mask: torch.Tensor | None       # (B, L) bool, keys that exist
    cos: torch.Tensor                    # (T, hd/2) rotary tables
    sin: torch.Tensor
    free: int = 0                        # leading rows without text (u, so): cross-attention is a constant
    mask: torch.Tensor | None = None     # (B, 1, T, T) additive self-attention mask (layers.group_mask) or None

    def rows(self, index: slice) -> "Context":
        start, stop, _ = index.indices(self.cond_h.shape[0])
        pick = (lambda a: None if a is None else a[index])
        return Context(self.cond_h[index], pick(self.text), pick(self.text_mask), self.cos, self.sin,
                       max(0, min(stop, self.free) - start), pick(self.mask))


class DiT(nn.Module):
    def __init__(self, config: ModelConfig, codec: CodecConfig):
        super().__init__()
        self.config, self.codec = config, codec
        c, d, s = config.width, codec.latent_dim, config.encoder.out_dim
        self.encoder = SemanticEncoder(config.encoder, codec)
        self.text_encoder = TextEncoder(config.text, config.norm_eps)
        self.x_in = nn.Linear(d, c)
        self.c_in = nn.Linear(d + s, c)
        self.null_cond = nn.Parameter(torch.zeros(c))
        self.time_mlp = nn.Sequential(nn.Linear(config.time_dim, c), nn.SiLU(), nn.Linear(c, c))
        self.mod = nn.Linear(c, 6 * c)
        self.blocks = nn.ModuleList(
            Block(c, config.heads, config.intermediate, config.text.width, config.norm_eps)
            for _ in range(config.layers)
        )
        self.final_norm = RMSNorm(c, config.norm_eps, affine=False)
        self.final_mod = nn.Linear(c, 2 * c)
        self.out = nn.Linear(c, d)
        if config.precondition not in ("none", "obs_skip"):
            raise ValueError(f"unknown precondition {config.precondition!r}: choose none or obs_skip")
        check_source(config.source, config.source_sigma)
        # velocity() returns the raw network output; with obs_skip the sampler loop and the trainer turn
        # it into a velocity (ObsSkip.velocity), so that every engine computes the network alone
        self.skip = ObsSkip(d, source=config.source, source_sigma=config.source_sigma,
                            local=config.skip_local) \
            if config.precondition == "obs_skip" else None
        self._init()

    def _init(self):
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
        for m in (self.mod, self.final_mod, self.out):
            nn.init.zeros_(m.weight)
            nn.init.zeros_(m.bias)

    # ---- per-window work (once, outside the sampler loop) ----
    def context(self, degraded: torch.Tensor, obs: torch.Tensor, use_cond: torch.Tensor,
                text_ids: torch.Tensor, text_mask: torch.Tensor, groups: torch.Tensor | None = None) -> Context:
        """degraded (B, N) audio, obs (B, T, D) its latents, use_cond (B,) bool,
        text_ids/text_mask (B, L) with position 0 the null token (text-free rows: mask only position 0);
        groups (B, T): the recordings a window holds, frame by frame (layers.group_mask), or None."""
        sem = self.encoder(degraded, groups)  # (B, T, S)
        cond_h = self.c_in(torch.cat([obs, sem.to(obs.dtype)], dim=-1))
        cond_h = torch.where(use_cond[:, None, None], cond_h, self.null_cond.to(cond_h.dtype))
        text = self.text_encoder(text_ids, text_mask)
        cos, sin = rotary_tables(obs.shape[1], self.config.head_dim, self.config.rope_theta, device=obs.device)
        return Context(cond_h, text, text_mask, cos, sin, mask=None if groups is None else group_mask(groups))

    def branch_context(self, degraded: torch.Tensor, obs: torch.Tensor, text_ids: torch.Tensor,
                       text_mask: torch.Tensor, groups: torch.Tensor | None = None) -> Context:
        """The rows of all three branches for B windows, in the order [u (B), so (B), sot (B)].
        The condition encoder runs once and the text encoder only for the sot rows. `groups` (B, T):
        the recordings each window holds (layers.group_mask), or None."""
        b = obs.shape[0]
        groups = None if groups is None else groups.to(obs.device)
        sem = self.encoder(degraded, groups)  # (B, T, S)
        cond = self.c_in(torch.cat([obs, sem.to(obs.dtype)], dim=-1))  # (B, T, C)
        cond_h = torch.cat([self.null_cond.to(cond.dtype).expand_as(cond), cond, cond])
        text_sot = self.text_encoder(text_ids, text_mask)  # (B, L, Wt)
        text_free = torch.zeros_like(text_sot)
        text_free[:, 0] = self.null_text_state().to(text_sot.dtype)
        free_mask = torch.zeros_like(text_mask)
        free_mask[:, 0] = True
        cos, sin = rotary_tables(obs.shape[1], self.config.head_dim, self.config.rope_theta, device=obs.device)
        mask = None if groups is None else group_mask(groups).repeat(3, 1, 1, 1)
        return Context(cond_h, torch.cat([text_free, text_free, text_sot]),
                       torch.cat([free_mask, free_mask, text_mask]), cos, sin, free=2 * b, mask=mask)

    def null_text_state(self) -> torch.Tensor:
        """(Wt,) the text encoder's output for the null token alone."""
        ids = torch.zeros(1, 1, dtype=torch.long, device=self.null_cond.device)
        return self.text_encoder(ids, torch.ones_like(ids, dtype=torch.bool))[0, 0]

    # ---- per-step work ----
    def modulation(self, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B,) -> block modulation (B, 6, C) and final modulation (B, 2, C)."""
        temb = F.silu(self.time_mlp(timestep_features(t, self.config.time_dim).to(self.x_in.weight.dtype)))
        b, c = temb.shape
        return self.mod(temb).view(b, 6, c), self.final_mod(temb).view(b, 2, c)

    def head(self, h: torch.Tensor, fmod: torch.Tensor) -> torch.Tensor:
        shift, scale = fmod.unbind(1)
        return self.out(self.final_norm(h) * (1 + scale[:, None]) + shift[:, None])

    def velocity(self, x: torch.Tensor, t: torch.Tensor, ctx: Context) -> torch.Tensor:
        """x (B, T, D) noisy latents at time t (B,) -> velocity (B, T, D)."""
        mod, fmod = self.modulation(t)
        h = self.x_in(x) + ctx.cond_h
        for blk in self.blocks:
            h = blk(h, mod, ctx.cos, ctx.sin, ctx.text, ctx.text_mask, ctx.free, ctx.mask)
        return self.head(h, fmod)

    def forward(self, x, t, degraded, obs, use_cond, text_ids, text_mask):
        return self.velocity(x, t, self.context(degraded, obs, use_cond, text_ids, text_mask))


def count_parameters(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())
