"""The options of a restoration, typed and validated once: the CLI builds a `RestoreOptions` from its
flags, the Python API from keyword arguments, and the pipeline reads nothing else. The CLI's choices
come from the constants here.

Model-independent checks run on construction; `resolve` then combines the options with the model's
own settings (the presets, overridden by the model's config.json, overridden by the options).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields

from .audio import MAX_RATE, MIN_RATE
from .config import SAMPLER_PRESETS, PostConfig, SamplerConfig
from .errors import UsageError

SAMPLERS = tuple(SAMPLER_PRESETS)      # pro, flash
CHANNEL_MODES = ("auto", "each", "mix")
LEVEL_MODES = ("input", "model")
STRENGTH_RANGE = (0.0, 2.0)
KEEP_RANGE_DB = (-20.0, 40.0)
KEEP_OFF = "off"


@dataclass(frozen=True)
class RestoreOptions:
    sampler: str = "pro"               # a preset: pro (more steps) or flash (fewer)
    steps: int | None = None           # None: the model's setting for the sampler, else the preset's
    guidance: float | None = None      # weight of both guidance terms (1 = none); None: the preset's
    strength: float | None = None      # 0-2: share of the network's correction (restore/pipeline/post.py)
    keep_input: float | str | None = None  # dB, "off", or None: the model's setting
    seed: int = 0                      # of the sampler noise; the same seed gives the same output
    transcript: str | None = None      # text or a .txt path; None: a sidecar NAME.txt if present
    channels: str = "auto"             # auto: identical channels once, else each; each; mix: mono
    sample_rate: int | None = None     # of the output; None: the input's
    level: str = "input"               # input: as loud as the input; model: as the model restores it

    def __post_init__(self):
        _choice("--sampler", self.sampler, SAMPLERS)
        _choice("--channels", self.channels, CHANNEL_MODES)
        _choice("--level", self.level, LEVEL_MODES)
        if self.steps is not None and self.steps < 1:
            raise UsageError(f"--steps must be at least 1, got {self.steps}")
        if self.guidance is not None and self.guidance < 0:
            raise UsageError(f"--guidance must be 0 or more, got {self.guidance}")
        lo, hi = STRENGTH_RANGE
        if self.strength is not None and not lo <= self.strength <= hi:
            raise UsageError(f"--strength must be between {lo:g} and {hi:g}, got {self.strength}")
        if self.sample_rate is not None and not MIN_RATE <= self.sample_rate <= MAX_RATE:
            raise UsageError(f"--sample-rate must be {MIN_RATE}-{MAX_RATE} Hz, got {self.sample_rate}")
        object.__setattr__(self, "keep_input", _keep_input(self.keep_input))

    @classmethod
    def of(cls, options: "RestoreOptions | None" = None, **changes) -> "RestoreOptions":
        """`options` with `changes` applied (keyword arguments of the Python API); validated."""
        unknown = sorted(set(changes) - {f.name for f in fields(cls)})
        if unknown:
            raise UsageError(f"unknown option(s) {', '.join(unknown)}; "
                             f"choose from {', '.join(f.name for f in fields(cls))}")
        return dataclasses.replace(options or cls(), **changes)

    def resolve(self, model_settings: dict[str, dict] | None = None, has_skip: bool = True
                ) -> tuple[SamplerConfig, PostConfig]:
        """The sampler's preset, then the model's own settings for it (config.json `samplers`), then these
        options; refused where an option cannot act on this model."""
        own = dict((model_settings or {}).get(self.sampler, {}))
        post_names = {f.name for f in fields(PostConfig)}
        sampler = dataclasses.replace(SamplerConfig.preset(self.sampler),
                                      **{k: v for k, v in own.items() if k not in post_names})
        post = PostConfig(**{k: v for k, v in own.items() if k in post_names})
        if self.steps is not None:
            sampler = dataclasses.replace(sampler, steps=self.steps)
        if self.guidance is not None:
            sampler = dataclasses.replace(sampler, w_so=self.guidance, w_t=self.guidance)
            if not any(sampler.schedule().guided):
                raise UsageError(f"--guidance has no effect here: none of the {sampler.steps} step(s) of "
                                 f"'{self.sampler}' runs the guidance branches (the first "
                                 f"{sampler.guided_until:g} of the steps do, rounded); use --steps 2 or more")
        if self.strength is not None:
            post = dataclasses.replace(post, strength=self.strength)
        if self.keep_input is not None:
            post = dataclasses.replace(post, keep_db=None if self.keep_input == KEEP_OFF else self.keep_input)
        if post.strength != 1.0 and not has_skip:
            raise UsageError("--strength needs a model with the observation skip (precondition obs_skip)")
        return sampler, post


def _choice(flag: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise UsageError(f"{flag} must be one of {', '.join(choices)}, got {value!r}")


def _keep_input(keep: float | str | None) -> float | str | None:
    """--keep-input: 'off', or a level in dB; None leaves the model's setting."""
    if keep is None:
        return None
    if str(keep).strip().lower() == KEEP_OFF:
        return KEEP_OFF
    try:
        db = float(keep)
    except ValueError:
        raise UsageError(f"--keep-input takes 'off' or a level in dB, got {keep!r}") from None
    lo, hi = KEEP_RANGE_DB
    if not lo <= db <= hi:
        raise UsageError(f"--keep-input must be 'off' or between {lo:g} and {hi:g} dB, got {keep}")
    return db
