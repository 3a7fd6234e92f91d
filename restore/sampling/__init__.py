from .guidance import combine
from .samplers import step
from .schedules import Schedule, guided_steps, schedule, timesteps

__all__ = ["combine", "step", "Schedule", "guided_steps", "schedule", "timesteps"]
