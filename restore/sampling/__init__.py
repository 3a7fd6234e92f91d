from .guidance import combine
from .samplers import step
from .schedules import guided_steps, timesteps

__all__ = ["combine", "step", "guided_steps", "timesteps"]
