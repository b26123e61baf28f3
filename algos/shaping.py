"""Reward shaping: DAPO's soft overlong punishment (Yu et al. 2025, arXiv 2503.14476, sec. 3.4, eq. 13).

    R_length(y) = 0                                   if |y| <= L_max - L_cache
                = ((L_max - L_cache) - |y|) / L_cache  if L_max - L_cache < |y| <= L_max
                = -1                                  if |y| > L_max

added to the task's reward. L_max is the generation budget (rollout.max_new_tokens) and L_cache the width
of the punished interval at its end. Departures and choices:
- The width is given as a share of the budget (rollout.overlong_buffer; DAPO: 4096 of 20480 = 0.2), so a
  preset keeps its meaning when the budget changes. A truncated completion has |y| = L_max: penalty -1.
- buffer 0 turns it off (0 for every length), never a division by zero.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gspo.vocab.lazy import lazy_module

if TYPE_CHECKING:
    from torch import Tensor

torch = lazy_module("torch")  # runs at its first use: the registry reads names and cards without it (vocab/lazy.py)


def overlong_penalty(lengths: Tensor, *, max_len: int, buffer: float) -> Tensor:
    """R_length per completion, same shape as `lengths` (token counts, any numeric dtype), as floats.

    buffer: L_cache / L_max, in [0, 1]; 0 gives zeros.
    """
    if not 0.0 <= buffer <= 1.0:
        raise ValueError(f"overlong buffer must be a share of the budget in [0, 1], got {buffer}")
    lengths = lengths.to(torch.get_default_dtype()) if not torch.is_floating_point(lengths) else lengths
    if buffer == 0.0:
        return torch.zeros_like(lengths)
    cache = buffer * max_len  # L_cache
    # ((L_max - L_cache) - |y|) / L_cache, 0 before the interval, -1 from L_max on
    ramp = ((max_len - cache) - lengths) / cache
    return ramp.clamp(min=-1.0, max=0.0)
