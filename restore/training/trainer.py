"""Rectified-flow training of the DiT on codec latents, with condition dropout so that the u, so and
sot branches are all trained, bf16 autocast on the GPU, an EMA of the weights, resumable checkpoints,
a JSONL log and a validation metric; on several GPUs at once as data-parallel replicas (replicas.py)."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import math
import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from .. import text as text_mod
from .. import weights
from ..codec import build_codec
from ..config import BaseConfig, CodecConfig, ModelConfig
from ..model.dit import DiT, count_parameters
from ..sampling import source_for
from ..sampling import step as rf_step
from ..sampling import timesteps
from .batches import PRODUCERS, BatchMaker, BatchSpec, batches
from .data import load_validation
from .degrade import DegradeConfig
from .floor import suppress_floor
from .adversarial import MultiResolutionDiscriminator, crop_frames, discriminator_loss, generator_terms
from .mel import LogMelDistance
from .replicas import Replicas

CAPTURE_STEPS = 20  # steps of a process that may capture CUDA graphs (torch.compile records them in the first few)


@dataclass(frozen=True)
class TrainConfig(BaseConfig):
    batch: int = 16
    lr: float = 3e-4
    warmup: int = 1000
    weight_decay: float = 0.01
    betas: tuple = (0.9, 0.99)
    grad_clip: float = 1.0
    ema_decay: float = 0.999
    p_uncond: float = 0.1       # all conditions dropped: trains u
    p_drop_text: float = 0.5    # text dropped (when present): trains so
    t_dist: str = "uniform"     # or "logit_normal" (SD3). Logit-normal rarely draws t near 1, where a model
    t_mean: float = 0.0         # that starts from pure noise must read its conditions; the first model,
                                # trained with it, predicted clean latents at t = 1 worse than the input.
    t_std: float = 1.0
    t_one: float = 0.0          # share of each batch drawn at t = 1 exactly: the one-step sampler's only point
    target_floor_db: float = 0.0  # lower the clean targets' own steady floor by up to this (floor.py); 0: off
    mel_weight: float = 0.0     # weight of the log-mel distance of the estimate of the clean latents, added to
                                # the flow loss (mel.py); 0: off. The logged `loss` stays the flow loss alone
    mel_floor_db: float = 40.0  # the term's floor, this far under each window's mean clean band energy: band
                                # energies below it count as equal (raised, quiet frames count less)
    p_own_estimate: float = 0.0  # share of each batch whose path starts from the EMA model's own one-step
                                # estimate instead of the clean latents, at a flow time in own_t: the later
                                # steps of a sampler that refines that estimate see exactly such inputs
    own_t: tuple = (0.1, 0.7)
    own_steps: int = 0          # 0: the own rows start from the one-step estimate on a fresh path at a time in
                                # own_t. N >= 2: they are the states of the N-step sampler itself, run by the
                                # EMA model from the source with churn own_churn, after k of its steps (k cycles
                                # through 1..N-1 with the step count), at that step's flow time: the very
                                # inputs its later steps meet, the model's own re-noised estimates included
    own_churn: float = 0.3
    own_anchor: float = 0.0     # with own_steps: the sampler's steps after its first, and the own rows' training
                                # velocity, take the skip's prior from that first step's estimate, each bin's
                                # variance at most this times its power, as SamplerConfig.anchor samples; 0: the
                                # observation's prior, as the unanchored sampler
    adv_weight: float = 0.0     # weight of the discriminators' verdict on the clean estimates (adversarial.py);
                                # 0 with fm_weight 0: no discriminators. Added to the objective, not the logged loss
    adv_t_min: float = 1.0      # the rows whose clean estimate x_t - t v is judged: those at flow time t >= this.
                                # 1: the one-step sampler's estimate only; lower: every step's estimate a sampler
                                # passes through from there down, so that the late steps' are judged as well
    adv_own: bool = False       # judge the own rows' estimates as well (p_own_estimate): with own_steps, what the
                                # sampler's later steps make of its own states, whatever adv_t_min says
    fm_weight: float = 0.0      # weight of the discriminators' feature matching, likewise
    adv_warmup: int = 300       # steps over which both weights rise from 0, while the discriminators learn
    adv_seconds: float = 2.0    # the crop of each window they judge (the same crop of the clean and the estimate)
    adv_real_floor_db: float = 0.0  # the clean windows the discriminators see as real, their steady floor lowered
                                # by up to this (floor.py; the flow targets keep theirs); 0: off
    d_lr: float = 2e-4          # the discriminators' learning rate (AdamW, betas 0.8, 0.99, constant)
    d_channels: int = 32
    speeds: tuple = (1.0,)      # speech speed factors the windows are drawn from (data.TrainingData)
    window_seconds: float = 30.0
    minutes: float = 20.0       # wall-clock budget of one run
    decay: float = 0.25         # the last share of each run's minutes, where lr falls linearly to 0
                                # (warmup-stable-decay: each run ends annealed, whatever its length)
    log_every: int = 50
    val_every: int = 1000
    ckpt_minutes: float = 3.0
    seed: int = 0
    compile: bool = True
    compile_mode: str = "default"  # torch.compile mode; "reduce-overhead" replays CUDA graphs (fewer launches)
    bf16: bool = True
    producer: str = "thread"    # where batches are made beside the step: inline or thread (batches.py)
    switch_interval_ms: float = 5.0  # Python's GIL switch interval during a run (its default is 5 ms). Every
                                # torch op of the step gives the GIL up and takes it back, waiting up to
                                # this long while the producer thread runs Python (docs/training.md)


class Trainer:
    def __init__(self, cfg: TrainConfig, model_cfg: ModelConfig, codec_cfg: CodecConfig, data_dir: str | Path,
                 out_dir: str | Path, device: str = "cuda", init: str | Path | weights.ModelFiles | None = None,
                 degrade_cfg: DegradeConfig | None = None):
        self.cfg, self.model_cfg, self.codec_cfg = cfg, model_cfg, codec_cfg
        self.replicas = rep = Replicas.from_env(device)
        self.device = torch.device(rep.device(device))
        eager_beside = cfg.p_own_estimate > 0 or cfg.adv_weight > 0 or cfg.fm_weight > 0
        if eager_beside and self.device.type == "cuda":
            # cuDNN's attention failed with an illegal memory access (mha_graph.execute) twice on an H200
            # when the eager EMA pass of the own estimate ran beside the compiled step, and a run with the
            # discriminators' eager passes died the same way on an H200 (reported, asynchronously, in
            # their weight norm); the other attention kernels serve both.
            torch.backends.cuda.enable_cudnn_sdp(False)
        self.out = Path(out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        torch.manual_seed(cfg.seed)
        seed = cfg.seed + 1000 * rep.rank  # each replica its own windows, degradations, noise and t
        if cfg.producer not in PRODUCERS:
            raise ValueError(f"unknown producer {cfg.producer!r}: choose one of {', '.join(PRODUCERS)}")
        self.window = int(cfg.window_seconds * codec_cfg.sample_rate)
        self.codec = build_codec(codec_cfg).to(self.device)
        self.mel = LogMelDistance(self.codec, floor=10.0 ** (-cfg.mel_floor_db / 10.0)).to(self.device)
        self.last_mel = None  # the last step's log-mel distance, when mel_weight is on
        self.last_adv: dict[str, torch.Tensor] = {}  # the last step's adversarial terms, when they are on
        # Level normalisation undoes any gain of the degraded input, so a gain effect would only make the
        # target level arbitrary: training leaves it out.
        degrade_cfg = dataclasses.replace(degrade_cfg or DegradeConfig(), p_gain=0.0)
        self.maker = BatchMaker(BatchSpec(
            data_dir=str(data_dir), device=str(self.device), window=self.window,
            sample_rate=codec_cfg.sample_rate, hop=self.codec.hop, max_tokens=model_cfg.text.max_tokens,
            batch=cfg.batch, p_uncond=cfg.p_uncond, p_drop_text=cfg.p_drop_text, pad_text=cfg.compile,
            floor_db=cfg.target_floor_db, seed=seed, degrade=degrade_cfg, speeds=tuple(cfg.speeds)))
        self.data = self.maker.data
        self.batch_state = self.maker.state()  # the maker's state after the last batch trained on
        self.val_clean, self.val_degraded = load_validation(data_dir, self.device)
        self.model = DiT(model_cfg, codec_cfg).to(self.device)
        if init is not None:
            files = init if isinstance(init, weights.ModelFiles) else weights.load(init)  # a folder, or loaded
            missing, unexpected = self.model.load_state_dict({k: v.float() for k, v in files.state.items()},
                                                             strict=False)
            # a model without the observation skip may start one: the skip keeps its initial values and
            # the output layer, which predicted whole velocities, restarts from zero (the skip's estimate)
            if unexpected or any(not k.startswith("skip.") for k in missing):
                raise ValueError(f"{'the init' if init is files else init}: weights do not match (missing {missing[:5]}, unexpected {unexpected[:5]})")
            if missing:
                torch.nn.init.zeros_(self.model.out.weight)
                torch.nn.init.zeros_(self.model.out.bias)
        rep.broadcast_parameters(self.model)
        self.ema = copy.deepcopy(self.model).eval().requires_grad_(False)
        self.ema_params, self.model_params = list(self.ema.parameters()), list(self.model.parameters())
        decay, no_decay = [], []
        for name, p in self.model.named_parameters():
            (no_decay if p.ndim < 2 or "embed" in name else decay).append(p)
        self.opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                                      {"params": no_decay, "weight_decay": 0.0}],
                                     lr=cfg.lr, betas=cfg.betas, fused=self.device.type == "cuda")
        self.disc = self.opt_d = None
        if cfg.own_steps == 1 or cfg.own_steps < 0:
            raise ValueError(f"own_steps {cfg.own_steps}: 0 (a fresh path from the one-step estimate) or a "
                             "sampler of at least 2 steps")
        if cfg.own_steps and not cfg.p_own_estimate > 0:
            raise ValueError("own_steps sets where the own rows start: it needs p_own_estimate > 0")
        if cfg.own_anchor < 0 or (cfg.own_anchor > 0 and not cfg.own_steps):
            raise ValueError(f"own_anchor {cfg.own_anchor}: 0 (off), or a positive factor with own_steps (the "
                             "anchor is the first estimate of the sampler whose states the own rows are)")
        if cfg.own_anchor > 0 and model_cfg.precondition != "obs_skip":
            raise ValueError("own_anchor moves the observation skip's prior: the model has no skip")
        if cfg.adv_own and not (cfg.p_own_estimate > 0 and (cfg.adv_weight > 0 or cfg.fm_weight > 0)):
            raise ValueError("adv_own judges the own rows: it needs p_own_estimate > 0 and adv_weight or fm_weight")
        if cfg.adv_weight > 0 or cfg.fm_weight > 0:
            if not 0.0 <= cfg.adv_t_min <= 1.0:
                raise ValueError(f"adv_t_min {cfg.adv_t_min} is not a flow time in [0, 1]")
            if cfg.t_one <= 0 and cfg.adv_t_min >= 1.0 and not cfg.adv_own:
                raise ValueError("the adversarial terms judge the one-step estimates, at t = 1: set t_one > 0 "
                                 "(or adv_t_min < 1, or adv_own)")
            self.disc = MultiResolutionDiscriminator(cfg.d_channels).to(self.device)
            rep.broadcast_parameters(self.disc)
            self.opt_d = torch.optim.AdamW(self.disc.parameters(), lr=cfg.d_lr, betas=(0.8, 0.99),
                                           weight_decay=0.0, fused=self.device.type == "cuda")
        self.step = 0
        self.dgen = torch.Generator(device=self.device).manual_seed(seed + 2)  # noise, t (device)
        mode = None if cfg.compile_mode == "default" else cfg.compile_mode
        self.forward = torch.compile(self.model, mode=mode) if cfg.compile else self.model
        # The own estimate runs the EMA model compiled as well: an eager EMA pass beside the compiled step
        # crashed three times on an H200 (illegal memory accesses in cuDNN attention and in an inductor
        # kernel). Compiled without CUDA graphs: its inputs change every step and it runs once per step.
        self.ema_forward = torch.compile(self.ema) if cfg.compile and cfg.p_own_estimate > 0 else self.ema
        # CUDA graphs are captured in the first steps, and a capture fails if the producer thread makes
        # CUDA calls meanwhile ("operation failed due to a previous error during capture").
        # Those steps hold the producer off with this lock; later steps only replay the graphs.
        graphs = cfg.compile and "reduce-overhead" in cfg.compile_mode and self.device.type == "cuda"
        self.gpu_lock = threading.Lock() if graphs and cfg.producer == "thread" else None
        self.log_path = self.out / "log.jsonl"
        self.started = time.time()
        self.elapsed_before = 0.0

    # ---- state ----
    def save_checkpoint(self) -> None:
        """Rank 0 writes the weights and every replica's data state (all replicas call this together)."""
        streams = self.replicas.gather({"batches": self.batch_state, "dgen": self.dgen.get_state()})
        if not self.replicas.lead:
            return
        state = {"model": self.model.state_dict(), "ema": self.ema.state_dict(), "opt": self.opt.state_dict(),
                 **({"disc": self.disc.state_dict(), "opt_d": self.opt_d.state_dict()} if self.disc else {}),
                 "step": self.step, "batches": self.batch_state, "dgen": self.dgen.get_state(),
                 "replicas": streams[1:], "elapsed": self.elapsed(),
                 "config": {"train": self.cfg.to_dict(), "model": self.model_cfg.to_dict(),
                            "codec": self.codec_cfg.to_dict()}}
        tmp = self.out / "ckpt.pt.tmp"
        torch.save(state, tmp)
        os.replace(tmp, self.out / "ckpt.pt")

    def resume(self) -> bool:
        path = self.out / "ckpt.pt"
        if not path.exists():
            return False
        state = torch.load(path, map_location=self.device, weights_only=False)
        self.model.load_state_dict(state["model"])
        self.ema.load_state_dict(state["ema"])
        self.opt.load_state_dict(state["opt"])
        if self.disc is not None and "disc" in state:  # else the discriminators start afresh on a plain run
            self.disc.load_state_dict(state["disc"])
            self.opt_d.load_state_dict(state["opt_d"])
        self.step = state["step"]
        streams = [{"batches": state["batches"], "dgen": state["dgen"]}, *state.get("replicas", [])]
        if len(streams) != self.replicas.world:
            raise ValueError(f"{path}: saved by {len(streams)} replica(s), resumed by {self.replicas.world}")
        mine = streams[self.replicas.rank]
        self.batch_state = mine["batches"]
        self.maker.set_state(self.batch_state)
        self.dgen.set_state(mine["dgen"].cpu())
        self.elapsed_before = state.get("elapsed", 0.0)
        return True

    def elapsed(self) -> float:
        return self.elapsed_before + time.time() - self.started

    def export(self, folder: str | Path, info: dict | None = None) -> list[Path]:
        base = {"train_steps": self.step, "train_seconds": round(self.elapsed(), 1),
                "parameters": count_parameters(self.model), "train_config": self.cfg.to_dict(),
                "degrade_config": self.maker.spec.degrade.to_dict(),
                "train_minutes_of_speech": round(self.data.minutes(), 1)}
        return weights.save(folder, self.model_cfg, self.codec_cfg, self.ema.state_dict(), {**base, **(info or {})})

    def log(self, **record) -> None:
        if not self.replicas.lead:
            return
        with open(self.log_path, "a") as f:
            f.write(json.dumps(record) + "\n")

    # ---- one step ----
    def batch(self):
        """The next batch, made here and now (tests and tools; training uses batches())."""
        b = self.maker()
        self.batch_state = self.maker.state()
        return b

    def draw_t(self, b: int) -> torch.Tensor:
        cfg = self.cfg
        if cfg.t_dist == "uniform":
            t = torch.rand(b, device=self.device, generator=self.dgen)
        else:
            t = torch.sigmoid(cfg.t_mean + cfg.t_std * torch.randn(b, device=self.device, generator=self.dgen))
        if cfg.t_one > 0:
            at_one = torch.rand(b, device=self.device, generator=self.dgen) < cfg.t_one
            t = torch.where(at_one, torch.ones_like(t), t)
        return t

    def train_step(self, batch, lr_scale: float = 1.0) -> float:
        cfg = self.cfg
        clean, degraded, use_cond, ids, mask, frame_mask = batch
        with torch.no_grad():
            x0 = self.codec.encode(clean)
            obs = self.codec.encode(degraded)
        b = x0.shape[0]
        t = self.draw_t(b)
        eps = torch.randn(x0.shape, device=self.device, generator=self.dgen)
        z = self.source(obs).sample(eps)  # the path's other end: pure noise, or the observation and noise
        start = x0
        weight = None
        own = int(round(cfg.p_own_estimate * b))  # a fixed count keeps the step's shapes static
        state = anchor = None
        if own:
            # rows are in random order, so the first `own` rows are a random share of the batch
            cond = (degraded[:own], obs[:own], use_cond[:own], ids[:own], mask[:own])
            if cfg.own_steps:
                state, t_own, anchor = self.sampler_state(*cond)
            else:
                est = self.own_estimate(*cond)
                lo, hi = cfg.own_t
                t_own = lo + (hi - lo) * torch.rand(own, device=self.device, generator=self.dgen)
                start = torch.cat([est, x0[own:]])
            t = torch.cat([t_own, t[own:]])
            # The target velocity from an estimate is (x_t - x0) / t: at low t its error is the clean-latent
            # error magnified 1/t. Weighting those rows by t^2 scores them in clean-latent terms, so that
            # they do not drown the rest of the batch.
            weight = torch.cat([t_own.square(), torch.ones_like(t[own:])])
        xt, target = flow_path(x0, start, z, t)
        if state is not None:  # the sampler's state, aimed at the clean latents like every other row
            xt = torch.cat([state, xt[own:]])
            target = torch.cat([(state - x0[:own]) / t_own[:, None, None], target[own:]])
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=cfg.bf16 and self.device.type == "cuda"):
            v = self.forward(xt, t, degraded, obs, use_cond, ids, mask)
        if self.model.skip is not None:
            if anchor is None:
                v = self.model.skip.velocity(v, xt, t, obs, use_cond)
            else:  # the own rows on the anchored prior their sampler's later steps are sampled with
                skip = self.model.skip
                v = torch.cat([skip.velocity(v[:own], xt[:own], t[:own], obs[:own], use_cond[:own], anchor),
                               skip.velocity(v[own:], xt[own:], t[own:], obs[own:], use_cond[own:])])
        v = v.float()
        err = (v - target).square().mean(-1)  # (B, T)
        if weight is not None:
            err = err * weight[:, None]
        loss = (err * frame_mask).sum() / frame_mask.sum().clamp_min(1)
        objective = loss
        if cfg.mel_weight > 0:
            mel = self.mel(xt - t[:, None, None] * v, x0, frame_mask)  # x_t - t v: the clean-latent estimate
            objective = loss + cfg.mel_weight * mel
            self.last_mel = mel.detach()
        if self.disc is not None:
            real = x0
            if cfg.adv_real_floor_db > 0:
                with torch.no_grad():
                    real = self.codec.encode(suppress_floor(clean, cfg.adv_real_floor_db))
            judged = t >= cfg.adv_t_min
            if cfg.adv_own:
                judged[:own] = True
            objective = objective + self.adversarial(real, xt - t[:, None, None] * v, judged, frame_mask)
        self.opt.zero_grad(set_to_none=True)
        objective.backward()
        self.replicas.average_gradients(self.model_params)
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.grad_clip)
        lr = cfg.lr * min(1.0, (self.step + 1) / cfg.warmup) * lr_scale
        for g in self.opt.param_groups:
            g["lr"] = lr
        self.opt.step()
        self.step += 1
        d = min(cfg.ema_decay, (1 + self.step) / (10 + self.step))
        with torch.no_grad():
            torch._foreach_lerp_(self.ema_params, self.model_params, 1 - d)
        return loss.detach()

    def adversarial(self, x0: torch.Tensor, est: torch.Tensor, judged: torch.Tensor, frame_mask: torch.Tensor
                    ) -> torch.Tensor:
        """One discriminator step on a crop of each window (the clean latents x0 against the estimates of the rows
        `judged` (B,) bool: those at t >= adv_t_min, at 1 the one-step sampler's, and with adv_own the own rows),
        then the generator's weighted adversarial and feature-matching terms of the same crops, to be added to
        its objective."""
        cfg = self.cfg
        b, frames = x0.shape[:2]
        n = min(frames, max(1, round(cfg.adv_seconds * self.codec_cfg.sample_rate / self.codec.hop)))
        valid = frame_mask.sum(1).long()
        start = (torch.rand(b, device=self.device, generator=self.dgen) * (valid - n + 1).clamp_min(1)).long()
        start = start.clamp(max=frames - n)
        real = self.codec.decode(crop_frames(x0, start, n))
        fake = self.codec.decode(crop_frames(est, start, n))
        judged = judged.float()
        autocast = torch.autocast(self.device.type, dtype=torch.bfloat16,
                                  enabled=cfg.bf16 and self.device.type == "cuda")
        self.disc.requires_grad_(True)
        with autocast:
            d_loss = discriminator_loss(self.disc, real, fake.detach(), judged)
        self.opt_d.zero_grad(set_to_none=True)
        d_loss.backward()
        d_params = list(self.disc.parameters())
        self.replicas.average_gradients(d_params)
        self.opt_d.step()
        self.disc.requires_grad_(False)  # the generator's terms pass through them without training them
        with autocast:
            adv, fm = generator_terms(self.disc, real, fake, judged)
        self.last_adv = {"d_loss": d_loss.detach(), "adv_loss": adv.detach(), "fm_loss": fm.detach()}
        ramp = min(1.0, (self.step + 1) / max(cfg.adv_warmup, 1))
        return ramp * (cfg.adv_weight * adv + cfg.fm_weight * fm)

    def source(self, obs: torch.Tensor):
        """The model's flow source for a batch with observation latents obs (restore/sampling/source.py)."""
        return source_for(self.model_cfg.source, self.model_cfg.source_sigma, obs)

    @torch.no_grad()
    def ema_velocity(self, x, t, degraded, obs, use_cond, ids, mask, anchor=None) -> torch.Tensor:
        """The EMA model's velocity at state x (B, T, D) and flow times t (B,), fp32; anchor as ObsSkip.velocity's."""
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.cfg.bf16 and self.device.type == "cuda"):
            v = self.ema_forward(x, t, degraded, obs, use_cond, ids, mask)
        if self.ema.skip is not None:
            v = self.ema.skip.velocity(v, x, t, obs, use_cond, anchor)
        return v.float()

    def own_estimate(self, degraded, obs, use_cond, ids, mask) -> torch.Tensor:
        """The EMA model's one-step estimate of the clean latents (from the source at t = 1), (B, T, D)."""
        z = self.source(obs).sample(torch.randn(obs.shape, device=self.device, generator=self.dgen))
        return z - self.ema_velocity(z, torch.ones(obs.shape[0], device=self.device), degraded, obs, use_cond, ids, mask)

    @torch.no_grad()
    def sampler_state(self, degraded, obs, use_cond, ids, mask
                      ) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, float] | None]:
        """The EMA model's own_steps-step sampler (unguided, churn own_churn) from the source, stopped after
        k = 1 + step mod (own_steps - 1) steps: (its state x_t (B, T, D), the flow time t (B,) it is at, and
        with own_anchor the anchor its steps after the first took (the first estimate, own_anchor), else None)."""
        cfg = self.cfg
        b = obs.shape[0]
        grid = timesteps(cfg.own_steps).tolist()
        k = 1 + self.step % (cfg.own_steps - 1)
        source = self.source(obs)
        x = source.sample(torch.randn(obs.shape, device=self.device, generator=self.dgen))
        anchor = None
        for i in range(k):
            v = self.ema_velocity(x, torch.full((b,), grid[i], device=self.device), degraded, obs, use_cond, ids, mask,
                                  anchor)
            if i == 0 and cfg.own_anchor > 0:
                anchor = (x - grid[0] * v, cfg.own_anchor)  # the one-step estimate (grid[0] = 1)
            noise = torch.randn(obs.shape, device=self.device, generator=self.dgen)
            x = rf_step(x, v, grid[i], grid[i + 1], churn=cfg.own_churn, noise=noise, source=source)
        return x, torch.full((b,), grid[k], device=self.device), anchor

    # ---- validation ----
    @torch.no_grad()
    def validate(self, steps: int = 8) -> dict:
        """EMA model on the fixed dev windows: flow loss at fixed t, and an unguided `steps`-step sample
        scored by SI-SDR and log-spectral distance against the clean reference."""
        clean, deg = self.val_clean, self.val_degraded
        b = clean.shape[0]
        x0, obs = self.codec.encode(clean), self.codec.encode(deg)
        ids, mask = text_mod.batch([None] * b, self.model_cfg.text.max_tokens, self.device)
        use = torch.ones(b, dtype=torch.bool, device=self.device)
        g = torch.Generator(device=self.device).manual_seed(123)
        source = self.source(obs)
        z = source.sample(torch.randn(x0.shape, device=self.device, generator=g))  # the source sample
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.cfg.bf16 and self.device.type == "cuda"):
            ctx = self.ema.context(deg, obs, use, ids, mask)

            def vel(x: torch.Tensor, tv: float, anchor=None) -> torch.Tensor:
                t = torch.full((b,), tv, device=self.device)
                v = self.ema.velocity(x, t, ctx).float()
                return v if self.ema.skip is None else self.ema.skip.velocity(v, x, t, obs, True, anchor)

            # How well the conditions alone predict the clean latents (t = 1), against the degraded
            # input's own latents as the estimate: the crux of restoration from pure noise.
            v1 = vel(z, 1.0)
            one = z - v1  # the one-step estimate, what a one-step sampler outputs
            x0_err = ((one - x0).square().mean() / x0.square().mean()).item()
            mel_1step, mel_input = self.mel(one, x0).item(), self.mel(obs, x0).item()
            obs_err = ((obs - x0).square().mean() / x0.square().mean()).item()
            losses = []
            for tv in (0.2, 0.5, 0.8):
                v = vel((1 - tv) * x0 + tv * z, tv)
                losses.append((v - (z - x0)).square().mean().item())
            x = z
            ts = timesteps(steps, 1.0).tolist()
            for i in range(steps):
                x = rf_step(x, vel(x, ts[i]), ts[i], ts[i + 1], source=source)
            # the same steps anchored on the one-step estimate (SamplerConfig.anchor 2), where the model has a skip
            xa = None
            if self.ema.skip is not None:
                xa = z
                for i in range(steps):
                    xa = rf_step(xa, v1 if i == 0 else vel(xa, ts[i], (one, 2.0)), ts[i], ts[i + 1], source=source)
            # refining the one-step estimate: re-noised to t = 0.5, then four Euler steps to 0
            r = 0.5 * one + 0.5 * source.sample(torch.randn(x0.shape, device=self.device, generator=g))
            rs = [0.5, 0.375, 0.25, 0.125, 0.0]
            for i in range(4):
                r = rf_step(r, vel(r, rs[i]), rs[i], rs[i + 1], source=source)
        out, out1, outr = self.codec.decode(x), self.codec.decode(one), self.codec.decode(r)
        anchored = {} if xa is None else {"val_lsd_anchor": lsd(self.codec.decode(xa), clean)}
        rate = self.codec.config.sample_rate
        return {"val_loss": sum(losses) / 3, "val_x0_err_t1": x0_err, "obs_x0_err": obs_err, "val_si_sdr": si_sdr(out, clean), "val_lsd": lsd(out, clean),
                "input_si_sdr": si_sdr(deg, clean), "input_lsd": lsd(deg, clean),
                "val_lsd_1step": lsd(out1, clean), "val_high_db_1step": band_level(out1, clean, rate),
                "val_mel_1step": mel_1step, "input_mel": mel_input,
                "val_lsd_refine": lsd(outr, clean), **anchored, "val_si_sdr_refine": si_sdr(outr, clean),
                "val_si_sdr_1step": si_sdr(out1, clean), "val_high_db_refine": band_level(outr, clean, rate)}

    def batches(self):
        """Batches from the configured producer; each one moves the state a checkpoint restarts from."""
        for b, state in batches(self.maker, self.cfg.producer, gpu_lock=self.gpu_lock):
            self.batch_state = state
            yield b

    def capture_guard(self, steps_here: int):
        """The producer held off the GPU during the steps that may capture CUDA graphs, the first of this
        process whatever step a resumed run is at (else nothing)."""
        if self.gpu_lock is not None and steps_here < CAPTURE_STEPS:
            return self.gpu_lock
        return contextlib.nullcontext()

    # ---- loop ----
    def run(self) -> None:
        """Train for cfg.minutes of wall time, logging, validating and checkpointing; then validate and
        checkpoint once more."""
        cfg = self.cfg
        budget = cfg.minutes * 60
        start = time.time()
        batches = self.batches()
        self.log(event="start", step=self.step, parameters=count_parameters(self.model),
                 speech_minutes=round(self.data.minutes(), 1), device=str(self.device), producer=cfg.producer,
                 switch_interval_ms=cfg.switch_interval_ms, compile_mode=cfg.compile_mode,
                 replicas=self.replicas.world)
        switch = sys.getswitchinterval()
        sys.setswitchinterval(cfg.switch_interval_ms / 1000)
        try:
            self._loop(batches, start, budget)
        finally:
            sys.setswitchinterval(switch)
            batches.close()  # stops the producer
        self.replicas.check_identical(self.model)
        if self.replicas.lead:
            self.log(step=self.step, **self.validate())
        self.save_checkpoint()

    def _loop(self, batches, start: float, budget: float) -> None:
        """Steps until the budget is spent. The run's clock (learning rate, checkpoints, the stop) is rank 0's,
        agreed at every step by one replica and at every logged step by several (one synchronisation per
        log_every steps), so that all replicas take the same decisions at the same step."""
        cfg, rep = self.cfg, self.replicas
        clock = rep.agree(time.time() - start)
        last_ckpt = clock
        window_loss, window_mel, window_adv, window_t, data_s = [], [], [], time.time(), 0.0
        steps_here = 0
        while clock < budget:
            t0 = time.time()
            batch = next(batches)
            data_s += time.time() - t0
            with self.capture_guard(steps_here):
                window_loss.append(self.train_step(batch, lr_scale(clock, budget, cfg.decay)))
            if cfg.mel_weight > 0:
                window_mel.append(self.last_mel)
            if self.disc is not None:
                window_adv.append(self.last_adv)
            steps_here += 1
            if rep.world == 1 or self.step % cfg.log_every == 0:
                clock = rep.agree(time.time() - start)
            if self.step % cfg.log_every == 0:
                now = time.time()
                mel = {"mel_loss": torch.stack(window_mel).mean().item()} if window_mel else {}
                adv = {k: torch.stack([a[k] for a in window_adv]).mean().item() for k in window_adv[0]} if window_adv else {}
                self.log(step=self.step, loss=torch.stack(window_loss).mean().item(), **mel, **adv,
                         lr=self.opt.param_groups[0]["lr"], steps_per_s=len(window_loss) / (now - window_t),
                         data_share=round(data_s / (now - window_t), 3), elapsed=round(self.elapsed(), 1))
                window_loss, window_mel, window_adv, window_t, data_s = [], [], [], now, 0.0
            if self.step % cfg.val_every == 0 and rep.lead:
                self.log(step=self.step, **self.validate())
            if clock - last_ckpt > cfg.ckpt_minutes * 60:
                self.save_checkpoint()
                last_ckpt = clock


def flow_path(x0: torch.Tensor, start: torch.Tensor, z: torch.Tensor, t: torch.Tensor):
    """The point x_t (B, T, D) on the straight path from `start` to the source sample z at flow time t (B,),
    and the velocity target whose clean estimate x_t - t v is x0: z - x0 where the path starts from the
    clean latents, plus the share of the start's error that x_t carries where it starts from an estimate."""
    tt = t[:, None, None]
    xt = (1 - tt) * start + tt * z
    return xt, z - x0 + (1 - tt) / tt.clamp_min(1e-3) * (start - x0)


def lr_scale(elapsed: float, budget: float, decay: float) -> float:
    """Learning-rate factor at `elapsed` seconds of a run of `budget` seconds: 1 until the last `decay`
    share of the run, then falling linearly to 0 at its end."""
    if decay <= 0:
        return 1.0
    return min(1.0, max(0.0, (budget - elapsed) / (decay * budget)))


def si_sdr(est: torch.Tensor, ref: torch.Tensor) -> float:
    """Mean scale-invariant SDR in dB over a batch (B, N)."""
    est, ref = est.double(), ref.double()
    a = (est * ref).sum(-1, keepdim=True) / ref.square().sum(-1, keepdim=True).clamp_min(1e-12)
    target = a * ref
    ratio = target.square().sum(-1) / (est - target).square().sum(-1).clamp_min(1e-12)
    return (10 * torch.log10(ratio.clamp_min(1e-12))).mean().item()


def lsd(est: torch.Tensor, ref: torch.Tensor, n_fft: int = 512) -> float:
    """Mean log-spectral distance (dB) over frames with reference energy."""
    pe, pr = power_spectrogram(est, n_fft), power_spectrogram(ref, n_fft)
    d = (10 * torch.log10(pe + 1e-10) - 10 * torch.log10(pr + 1e-10)).square().mean(1).sqrt()  # (B, frames)
    active = pr.sum(1) > 1e-6 * pr.sum(1).amax(-1, keepdim=True)
    return (d * active).sum().item() / active.sum().clamp_min(1).item()


def band_level(est: torch.Tensor, ref: torch.Tensor, rate: int, low_hz: float = 3000.0, n_fft: int = 512) -> float:
    """Energy above `low_hz` of est relative to ref, in dB (negative: est is duller than ref)."""
    band = torch.fft.rfftfreq(n_fft, 1 / rate).to(est.device) >= low_hz
    pe, pr = power_spectrogram(est, n_fft)[:, band], power_spectrogram(ref, n_fft)[:, band]
    return (10 * torch.log10(pe.sum() / pr.sum().clamp_min(1e-12))).item()


def power_spectrogram(x: torch.Tensor, n_fft: int = 512) -> torch.Tensor:
    """(B, N) -> (B, n_fft // 2 + 1, frames): |STFT|^2, Hann window, hop n_fft / 4."""
    win = torch.hann_window(n_fft, device=x.device)
    return torch.stft(x.float(), n_fft, n_fft // 4, window=win, return_complex=True).abs().square()
