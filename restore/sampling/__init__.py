from .guidance import combine
from .samplers import step
from .source import NOISE, SOURCES, Source, check_source, source_for
from .schedules import Schedule, guided_steps, schedule, timesteps

__all__ = ["combine", "step", "NOISE", "SOURCES", "Source", "check_source", "source_for", "Schedule", "guided_steps", "schedule", "timesteps"]
