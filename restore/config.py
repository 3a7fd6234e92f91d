"""Configuration dataclasses: one per component, with defaults, built from dicts that may carry
unknown keys (so older code can read newer config files and the reverse)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T", bound="BaseConfig")


class BaseConfig:
    @classmethod
    def from_dict(cls: type[T], d: dict[str, Any] | None) -> T:
        d = d or {}
        names = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        kwargs = {}
        for k, v in d.items():
            if k not in names:
                continue
            if isinstance(v, list):
                v = tuple(v)
            kwargs[k] = v
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]


@dataclass(frozen=True)
class CodecConfig(BaseConfig):
    kind: str = "stft"
    sample_rate: int = 16000
    n_fft: int = 512
    hop: int = 256          # 62.5 latent frames/s at 16 kHz
    power: float = 0.5      # amplitude compression |X|^power * e^{i angle X}
    scale: float = 0.5      # global scale so that speech latents have roughly unit variance

    @property
    def bins(self) -> int:
        return self.n_fft // 2 + 1

    @property
    def latent_dim(self) -> int:
        return 2 * self.bins  # real and imaginary parts of each compressed bin


@dataclass(frozen=True)
class EncoderConfig(BaseConfig):
    """Condition encoder: degraded audio -> semantic features at the latent frame rate."""
    n_mels: int = 80
    width: int = 256
    layers: int = 4         # residual conv blocks
    kernel: int = 5
    out_dim: int = 256


@dataclass(frozen=True)
class TextConfig(BaseConfig):
    vocab_size: int = 96    # byte-level tokens, see restore.text
    width: int = 256
    layers: int = 2
    heads: int = 4
    max_tokens: int = 512   # per window; longer transcripts are cut to the window's share


@dataclass(frozen=True)
class ModelConfig(BaseConfig):
    width: int = 384
    layers: int = 8
    heads: int = 6
    intermediate: int = 1024  # SwiGLU hidden size
    rope_theta: float = 10000.0
    norm_eps: float = 1e-6
    time_dim: int = 256       # sinusoidal timestep features
    precondition: str = "none"  # "obs_skip": the network predicts what the best linear estimator cannot
    source: str = "noise"     # where the flow starts at t = 1: "noise", or "observation" (the degraded
    source_sigma: float = 1.0  # latents plus noise of this scale: a bridge; restore/sampling/source.py)
    skip_local: float = 0.0   # obs_skip below t = 1: each bin's prior variance at most this times the
                              # observation's power there (restore/model/precondition.py); 0: one per dimension
    encoder: EncoderConfig = field(default_factory=EncoderConfig)
    text: TextConfig = field(default_factory=TextConfig)

    @property
    def head_dim(self) -> int:
        return self.width // self.heads

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> "ModelConfig":
        d = dict(d or {})
        enc = EncoderConfig.from_dict(d.pop("encoder", None))
        txt = TextConfig.from_dict(d.pop("text", None))
        return dataclasses.replace(super().from_dict(d), encoder=enc, text=txt)


@dataclass(frozen=True)
class SamplerConfig(BaseConfig):
    name: str = "pro"
    steps: int = 32
    shift: float = 1.0        # timestep shift; >1 spends more steps near the noise end
    guided_until: float = 0.5  # fraction of steps (from the start) that run all three branches
    w_so: float = 1.5          # guidance of the conditions (semantic + observation) over none
    w_t: float = 1.5           # guidance of the transcript over no transcript
    churn: float = 0.3         # fresh noise per step, as a fraction of ancestral sampling's (0: ODE)
    refine_from: float = 1.0   # 1: the steps draw the signal from pure noise; below 1: they refine the
                               # one-step estimate re-noised to this flow time (sampling.schedule)
    anchor: float = 0.0        # obs_skip models, below t = 1: the skip's prior is the first step's estimate,
                               # its mean, each bin's variance at most this times its power (loop.py); 0: off
    shifts: int = 1            # each window restored at this many offsets of the codec's frame grid, within
                               # one hop, and the results averaged (pipeline.windows.spin)
    mix_first: float = 0.0     # with more than one step from t = 1: the output's spectrum takes this share
                               # from the first step's restoration and the rest from the last's, each
                               # post-processed (post.mix); 0: the last step's alone

    def schedule(self):
        from .sampling import schedule

        return schedule(self.steps, self.shift, self.guided_until, self.churn, self.refine_from)

    @classmethod
    def preset(cls, name: str) -> "SamplerConfig":
        if name not in SAMPLER_PRESETS:
            raise ValueError(f"unknown sampler {name!r}: choose {' or '.join(SAMPLER_PRESETS)}")
        return cls(name=name, **SAMPLER_PRESETS[name])


SAMPLER_PRESETS = {  # a model may override these in its config.json `samplers` (restore/weights.py)
    "pro": dict(steps=32, guided_until=0.5, churn=0.3),
    "flash": dict(steps=8, guided_until=0.5, churn=0.0),
}


@dataclass(frozen=True)
class PostConfig(BaseConfig):
    """What happens to the sampler's result before it is decoded (restore/pipeline/post.py). A model's
    config.json `samplers` may set these per sampler, beside the sampler's own settings."""
    strength: float = 1.0      # share of the network's correction on top of the observation skip's linear
                               # estimate, taken on the full-strength result (0: the linear estimate alone;
                               # models with the skip only)
    keep_db: float | None = None  # keep the input in bins where the restoration took out less than this
                                  # many dB below itself; None: off
    balance: bool = True       # give the restoration the input's spectral balance where the input can be
                               # trusted (post.match_balance)
    extend_band: bool = True   # let the model fill a band-limited input's band above its cut-off; False:
                               # nothing is added there (post.limit_band)


@dataclass(frozen=True)
class WindowConfig(BaseConfig):
    seconds: float = 30.0     # window length: the compiled shape every engine sees
    overlap: float = 2.0      # seconds shared by neighbouring windows, crossfaded
    gap: float = 0.5          # seconds of silence between short files packed into one window
