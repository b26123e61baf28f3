"""Guards against non-finite numbers: a NaN or inf reward, log-prob, loss or gradient stops the step
before it can reach the weights.

The update checks the loss and the gradient norm before every optimizer step (the bad update is never
applied); the loop checks rewards and old log-probs before the first. The step that found the value
writes `nonfinite_step_NNNNNN.json` into the run directory (the batch's prompts, completions, rewards
and the ratio and clip statistics of its updates so far), then, by `train.on_nonfinite`, stops the run
(status failed, the reason in run.json and on the command line; updates of the batch before the bad
one stay applied in memory, but no checkpoint is taken of them) or skips the batch: the update restores
the weights and optimizer state it copied at the start of the batch, so the batch leaves no trace.
"""

from __future__ import annotations

import torch

from gspo.conf.errors import GspoError
from gspo.vocab.choices import OnNonfinite
from gspo.vocab.metrics import SKIPPED_BATCH


class NonFinite(Exception):
    """A non-finite value, found before it changed the weights; `dump` says what the batch held."""

    def __init__(self, what: str, dump: dict | None = None):
        super().__init__(what)
        self.dump = dump or {}


def check_finite(what: str, values: torch.Tensor) -> None:
    if not bool(torch.isfinite(values).all()):
        raise NonFinite(f"non-finite {what}")


def handle_nonfinite(cfg, run, step: int, err: NonFinite, log) -> dict:
    """Write the dump; then stop the run (a GspoError) or, with train.on_nonfinite=skip, return the row
    that records the skipped batch."""
    path = run.write_json(f"nonfinite_step_{step:06d}.json", {"step": step, "reason": str(err), **err.dump})
    if cfg.train.on_nonfinite == OnNonfinite.SKIP:
        log(f"step {step}: {err}; the batch is skipped, its earlier updates undone (dump: {path})")
        return {SKIPPED_BATCH: 1.0}
    run.set_status("running", stopped="nonfinite")  # a state: a bare resume leaves the run stopped (train.past_stop)
    raise GspoError(f"step {step}: {err}; stopped before it reached the weights (dump: {path}); "
                    f"lower train.lr, or set train.on_nonfinite=skip")
