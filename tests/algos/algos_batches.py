"""Small float64 batches shared by the hand-computed algos tests."""

from __future__ import annotations

import torch

F64 = torch.float64


def make_batch(log_ratios, width):
    """logp (leaf, requires grad), old_logp, mask [N, width]; padding holds garbage values."""
    n = len(log_ratios)
    old = torch.full((n, width), -7.0, dtype=F64)
    logp = torch.full((n, width), 3.0, dtype=F64)
    mask = torch.zeros((n, width), dtype=F64)
    for i, row in enumerate(log_ratios):
        for t, value in enumerate(row):
            old[i, t] = -1.0 - 0.25 * t - 0.5 * i
            logp[i, t] = old[i, t] + value
            mask[i, t] = 1.0
    return logp.requires_grad_(True), old, mask
