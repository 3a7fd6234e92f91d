"""The options of a restoration, typed and validated once: the CLI builds a `RestoreOptions` from its
flags, the Python API from keyword arguments, and the pipeline reads nothing else. The CLI's choices
come from the constants here.

Model-independent checks run on construction; `resolve` then combines the options with the model's
own settings (the presets, overridden by the model's config.json, overridden by the options).
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, fields
from numbers import Integral, Real

from .audio import MAX_RATE, MIN_RATE
from .config import SAMPLER_PRESETS, PostConfig, SamplerConfig
from .errors import UsageError, option

SAMPLERS = tuple(SAMPLER_PRESETS)      # pro, flash
CHANNEL_MODES = ("auto", "each", "mix")
LEVEL_MODES = ("input", "model")
STRENGTH_RANGE = (0.0, 2.0)
KEEP_RANGE_DB = (-20.0, 40.0)
KEEP_OFF = "off"
MAX_SHIFTS = 8                      # restorations of a window at grid offsets (more gained nothing measurable)


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
    extend_band: bool | None = None    # let the model fill a band-limited input above its cut-off; None:
                                       # the model's setting (the shipped model: yes)
    shifts: int | None = None          # restorations of each window at offsets of the codec's frame grid,
                                       # averaged (SamplerConfig.shifts); None: the model's setting

    def __post_init__(self):
        _choice("sampler", self.sampler, SAMPLERS)
        _choice("channels", self.channels, CHANNEL_MODES)
        _choice("level", self.level, LEVEL_MODES)
        whole("seed", self.seed)
        if self.extend_band is not None and not isinstance(self.extend_band, bool):
            raise UsageError(f"{option('extend_band')} must be True, False or None, got {self.extend_band!r}")
        if self.steps is not None:
            at_least("steps", self.steps, 1)
        if self.shifts is not None and at_least("shifts", self.shifts, 1) > MAX_SHIFTS:
            raise UsageError(f"{option('shifts')} must be 1-{MAX_SHIFTS}, got {self.shifts}")
        if self.guidance is not None and _number("guidance", self.guidance) < 0:
            raise UsageError(f"{option('guidance')} must be 0 or more, got {self.guidance}")
        lo, hi = STRENGTH_RANGE
        if self.strength is not None and not lo <= _number("strength", self.strength) <= hi:
            raise UsageError(f"{option('strength')} must be between {lo:g} and {hi:g}, got {self.strength}")
        if self.sample_rate is not None and not MIN_RATE <= whole("sample_rate", self.sample_rate) <= MAX_RATE:
            raise UsageError(f"{option('sample_rate')} must be {MIN_RATE}-{MAX_RATE} Hz, got {self.sample_rate}")
        if self.transcript is not None and not isinstance(self.transcript, (str, os.PathLike)):
            raise UsageError(f"{option('transcript')} must be text or the path of a .txt file, "
                             f"got {self.transcript!r}")
        if isinstance(self.transcript, os.PathLike):
            object.__setattr__(self, "transcript", os.fspath(self.transcript))
        object.__setattr__(self, "keep_input", _keep_input(self.keep_input))

    @classmethod
    def of(cls, options: "RestoreOptions | None" = None, **changes) -> "RestoreOptions":
        """`options` with `changes` applied (keyword arguments of the Python API); validated."""
        unknown = sorted(set(changes) - {f.name for f in fields(cls)})
        if unknown:
            raise UsageError(f"unknown option(s) {', '.join(unknown)}; "
                             f"choose from {', '.join(f.name for f in fields(cls))}")
        if options is not None and not isinstance(options, cls):
            raise UsageError(f"options must be a RestoreOptions, got {options!r}")
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
                raise UsageError(f"{option('guidance')} has no effect here: none of the {sampler.steps} step(s) of "
                                 f"'{self.sampler}' runs the guidance branches (the first "
                                 f"{sampler.guided_until:g} of the steps do, rounded); use {option('steps', 2)} "
                                 f"or more")
        if self.shifts is not None:
            sampler = dataclasses.replace(sampler, shifts=self.shifts)
        if self.strength is not None:
            post = dataclasses.replace(post, strength=self.strength)
        if self.keep_input is not None:
            post = dataclasses.replace(post, keep_db=None if self.keep_input == KEEP_OFF else self.keep_input)
        if self.extend_band is not None:
            post = dataclasses.replace(post, extend_band=self.extend_band)
        if post.strength != 1.0 and not has_skip:
            raise UsageError(f"{option('strength')} needs a model with the observation skip (precondition obs_skip)")
        return sampler, post


def _choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise UsageError(f"{option(name)} must be one of {', '.join(choices)}, got {value!r}")


def whole(name: str, value) -> int:
    """`value`, refused unless it is a whole number (a bool is not one)."""
    if not isinstance(value, Integral) or isinstance(value, bool):
        raise UsageError(f"{option(name)} must be a whole number, got {value!r}")
    return int(value)


def at_least(name: str, value, minimum: int) -> int:
    """A whole-number option with a lower bound (steps, batch...)."""
    if whole(name, value) < minimum:
        raise UsageError(f"{option(name)} must be at least {minimum}, got {value}")
    return int(value)


def _number(name: str, value) -> float:
    if not isinstance(value, Real) or isinstance(value, bool) or not math.isfinite(value):
        raise UsageError(f"{option(name)} must be a number, got {value!r}")
    return float(value)


def _keep_input(keep: float | str | None) -> float | str | None:
    """keep_input: 'off', or a level in dB; None leaves the model's setting."""
    if keep is None:
        return None
    if str(keep).strip().lower() == KEEP_OFF:
        return KEEP_OFF
    try:
        db = float(keep)
    except (TypeError, ValueError):
        raise UsageError(f"{option('keep_input')} takes 'off' or a level in dB, got {keep!r}") from None
    lo, hi = KEEP_RANGE_DB
    if not lo <= db <= hi:
        raise UsageError(f"{option('keep_input')} must be 'off' or between {lo:g} and {hi:g} dB, got {keep}")
    return db
