"""Three-branch classifier-free guidance.

u = no conditions, so = semantic + observation, sot = all conditions:
    v = v_u + w_so (v_so - v_u) + w_t (v_sot - v_so)
w_so = w_t = 1 gives v_sot (no guidance).
"""

from __future__ import annotations

import torch


def combine(v_u: torch.Tensor, v_so: torch.Tensor, v_sot: torch.Tensor, w_so: float, w_t: float) -> torch.Tensor:
    v_u, v_so, v_sot = v_u.float(), v_so.float(), v_sot.float()
    return v_u + w_so * (v_so - v_u) + w_t * (v_sot - v_so)
