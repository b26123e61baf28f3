"""Collapse detection: the training failure the GSPO paper is about, named when it happens.

A run has collapsed when one of these holds (thresholds in `train.collapse`, defaults measured on the
embedded task, see the README):
  - reward: the training reward's moving average (over `window` steps) stays below (1 - reward_drop)
    times its best moving average for `patience` steps in a row, once that best is at least min_best;
  - held-out accuracy: an eval falls below (1 - eval_drop) times the best earlier eval (best >= min_best);
  - entropy collapse or explosion: mean token entropy below entropy_min, or above entropy_max_factor
    times its value at the first step;
  - length blow-up: at least truncated_max of the completions hit max_new_tokens.
The detector is a pure function of the metrics rows, so a resumed run rebuilds its state by replaying
metrics.jsonl, and a report can apply it to any finished run.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from gspo.vocab.metrics import ENTROPY, REWARD_MEAN, TRUNCATED_FRAC


@dataclass(frozen=True)
class Collapse:
    step: int
    reason: str


class CollapseDetector:
    """Feed it each step's metrics row in order; `observe` returns the first collapse found, once."""

    def __init__(self, cfg, eval_key: str):
        self.cfg, self.eval_key = cfg, eval_key  # eval_key: the held-out accuracy, eval/<task>/accuracy
        self._recent: deque[float] = deque(maxlen=max(1, cfg.window))
        self._best_reward = self._best_eval = None
        self._below = 0
        self._entropy0 = None
        self.found: Collapse | None = None

    def observe(self, row: dict) -> Collapse | None:
        """The collapse this row reveals (only the first of a run is reported), else None."""
        if self.found is not None or not self.cfg.enabled:
            return None
        reason = self._eval(row) or self._reward(row) or self._entropy(row) or self._length(row)
        if reason:
            self.found = Collapse(int(row["step"]), reason)
            return self.found
        return None

    def _reward(self, row: dict) -> str | None:
        if REWARD_MEAN not in row:
            return None
        c = self.cfg
        self._recent.append(row[REWARD_MEAN])
        avg = sum(self._recent) / len(self._recent)
        if len(self._recent) == self._recent.maxlen:
            self._best_reward = avg if self._best_reward is None else max(self._best_reward, avg)
        best = self._best_reward
        falling = best is not None and best >= c.min_best and avg < (1 - c.reward_drop) * best
        self._below = self._below + 1 if falling else 0
        if self._below >= c.patience:
            return (f"training reward collapsed: {c.window}-step mean {avg:.3f} below {1 - c.reward_drop:.0%} of its "
                    f"best {best:.3f} for {self._below} steps")
        return None

    def _eval(self, row: dict) -> str | None:
        if self.eval_key not in row:
            return None
        value = row[self.eval_key]
        best = self._best_eval
        self._best_eval = value if best is None else max(best, value)
        if best is not None and best >= self.cfg.min_best and value < (1 - self.cfg.eval_drop) * best:
            return f"held-out accuracy collapsed: {self.eval_key} {value:.3f} after a best of {best:.3f}"
        return None

    def _entropy(self, row: dict) -> str | None:
        entropy = row.get(ENTROPY)
        if entropy is None:
            return None
        if self._entropy0 is None:
            self._entropy0 = entropy
        if entropy < self.cfg.entropy_min:
            return f"entropy collapse: {entropy:.4f} nats per token (threshold {self.cfg.entropy_min})"
        if entropy > self.cfg.entropy_max_factor * self._entropy0:
            return f"entropy explosion: {entropy:.3f} nats per token, {entropy / self._entropy0:.1f}x the first step's"
        return None

    def _length(self, row: dict) -> str | None:
        truncated = row.get(TRUNCATED_FRAC)
        if truncated is not None and truncated >= self.cfg.truncated_max:
            return f"length blow-up: {truncated:.0%} of completions hit max_new_tokens"
        return None
