"""Metrics of a step reduced over its micro-batches, minibatches and processes, as each metric declares
(gspo.vocab.reductions.REDUCTIONS: token or sequence mean, sum, min, max), and read to the host once.

`MetricSums` keeps a (sum, count) per metric over the micro-batches of one minibatch and divides once;
`reduce_metrics` combines the updates of a step; `to_host` is the step's one host sync of its metrics.
"""

from __future__ import annotations

import torch

from gspo.trainer.parallel import distributed
from gspo.vocab.metrics import DIAG, section
from gspo.vocab.reductions import MAX, MIN, SEQ_MEAN, SUM, TOKEN_MEAN


class MetricSums:
    """Metrics of micro-batches combined as their algorithm declares: a (sum, count) per mean or sum,
    a running min or max per extreme; `result()` divides once. Sums are 0-dim device tensors in float64
    (float32 where the device has no float64), so adding the same parts in another order (other ranks)
    changes the result by ~1e-16 relative; counts are host numbers."""

    def __init__(self, kinds: dict[str, str], device: torch.device | None = None):
        self.kinds = kinds
        self.dtype = torch.float32 if device is not None and device.type == "mps" else torch.float64
        self.sums: dict[str, torch.Tensor] = {}
        self.counts: dict[str, float] = {}

    def add(self, metrics: dict[str, torch.Tensor], *, n_seq: float, n_tok: float) -> None:
        for key, value in metrics.items():
            kind = self.kinds.get(key)
            if kind is None:
                raise KeyError(f"metric {key!r} has no declared reduction (gspo.algos.register(..., metrics=))")
            value = value.detach().to(self.dtype)
            acc = self.sums.get(key)
            if kind in (MIN, MAX):
                self.sums[key] = value if acc is None else (torch.minimum if kind == MIN else torch.maximum)(acc, value)
                continue
            weight = {TOKEN_MEAN: n_tok, SEQ_MEAN: n_seq, SUM: 1.0}[kind]  # a sum's parts add up as they are
            self.sums[key] = value * weight if acc is None else acc + value * weight
            self.counts[key] = self.counts.get(key, 0.0) + weight

    def all_reduce(self, world, device: torch.device, *, n_seq: float, n_tok: float) -> None:
        """[distributed] Each rank's sums of one global minibatch -> the global sums (SUM of sums, MIN / MAX
        of extremes) before `result()` divides; the counts become the global minibatch's (`n_seq`
        sequences, `n_tok` tokens), which every rank knows. A no-op with one process."""
        if world.size == 1:
            return
        ops = {k: "min" if kind == MIN else "max" if kind == MAX else "sum" for k, kind in self.kinds.items()}
        self.sums = distributed.reduce_parts(self.sums, ops, device, world, self.dtype)
        self.counts = {k: {TOKEN_MEAN: n_tok, SEQ_MEAN: n_seq}[self.kinds[k]] for k in self.sums
                       if self.kinds[k] in (TOKEN_MEAN, SEQ_MEAN)}

    def result(self) -> dict[str, torch.Tensor]:
        """Means divided once (sum / count); sums and extremes as they are."""
        return {k: (v if self.kinds[k] in (MIN, MAX, SUM) else v / max(self.counts[k], 1.0)).float()
                for k, v in self.sums.items()}


def reduce_metrics(rows: list[dict[str, torch.Tensor]], kinds: dict[str, str]) -> dict[str, torch.Tensor]:
    """Over the updates of a step: means, and min / max for the extremes (by `kinds`), still on the device."""
    out: dict[str, torch.Tensor] = {}
    for key in rows[0]:
        vals = torch.stack([r[key] for r in rows])
        kind = kinds.get(key)
        out[key] = vals.min() if kind == MIN else vals.max() if kind == MAX else vals.mean()
    return out


def to_host(metrics: dict[str, torch.Tensor]) -> dict[str, float]:
    """0-dim device tensors -> floats, in one host sync. A NaN diag/ entry means nothing to measure this
    step (a length bucket with under 2 values) and is left out; any other NaN is kept, it is news."""
    values = torch.stack([v.float() for v in metrics.values()]).tolist() if metrics else []
    return {k: v for k, v in zip(metrics, values, strict=True) if not (section(k) == DIAG and v != v)}
