"""gspo's losses against TRL's on the same inputs (TRL 1.16.0, the `bench` extra): the loss and its gradient with
respect to the policy's log-probs, for every objective both ship.

How TRL is driven without a model: `GRPOTrainer._compute_loss(model, inputs)` is TRL's own loss code, from the
log-probs to the scalar. The one model call in it, `_get_per_token_logps_and_entropies`, is replaced on a bare
trainer object (built with `__new__`, no `__init__`, no model) by a function returning the test's log-probs
tensor, a leaf that requires grad; the object carries the attributes that code reads (loss type, epsilons,
importance-sampling level, a one-process stand-in for the accelerator's gather/reduce). Everything else runs
as shipped. TRL's vLLM importance-sampling ratio is computed inside its generation method, which needs a
rollout; `trl_is_ratio` below writes that block's documented formula (grpo_config.py, 1.16.0) and the ratio
then enters TRL's `_compute_loss` as `inputs["importance_sampling_ratio"]`, as it does in TRL.

    python -m tests.algos.trl_parity          # prints the parity table of docs/parity-trl.md
"""

from __future__ import annotations

import math
from collections import defaultdict
from types import SimpleNamespace

import torch

from gspo.algos import correction_weights, policy_loss

F64 = torch.float64
CLIP = (0.2, 0.27)
GSPO_CLIP = (3e-4, 4e-4)


def batch(seed: int = 0, dtype=F64, lengths=(7, 3, 5, 6, 2, 4), width: int = 8, spread: float = 0.3):
    """(logp leaf [N, T], old_logp, sampler_logp, mask, advantages [N]): an off-policy batch, zeros in the padding."""
    gen = torch.Generator().manual_seed(seed)
    n = len(lengths)
    mask = torch.zeros((n, width), dtype=dtype)
    for i, length in enumerate(lengths):
        mask[i, :length] = 1.0
    old = (-0.2 - 2.0 * torch.rand((n, width), generator=gen, dtype=dtype)) * mask
    logp = (old + spread * torch.randn((n, width), generator=gen, dtype=dtype)).clamp(max=-1e-3) * mask
    sampler = (old + 0.05 * torch.randn((n, width), generator=gen, dtype=dtype)) * mask
    adv = torch.randn(n, generator=gen, dtype=dtype)
    return logp.requires_grad_(True), old, sampler, mask, adv


class _Accelerator:
    num_processes = 1
    sync_gradients = True

    @staticmethod
    def gather(x):
        return x

    @staticmethod
    def gather_for_metrics(x):
        return x

    @staticmethod
    def reduce(x, reduction="sum"):
        return x


def trl_trainer(loss_type: str, *, epsilon: tuple[float, float], level: str = "token", max_len: int = 8,
                vllm_is: bool = False, opsm_delta: float | None = None, sapo=(1.0, 1.05), beta: float = 0.0,
                bias_kl: bool = False):
    """A GRPOTrainer object with no model: what `_compute_loss` reads, set as TRL's __init__ would."""
    from trl import GRPOTrainer

    t = GRPOTrainer.__new__(GRPOTrainer)
    t.loss_type, t.epsilon_low, t.epsilon_high = loss_type, epsilon[0], epsilon[1]
    t.importance_sampling_level, t.beta, t.top_entropy_quantile = level, beta, 1.0
    t.off_policy_mask_threshold = opsm_delta
    t.use_vllm = t.vllm_importance_sampling_correction = vllm_is
    t.aux_loss_enabled, t._entropy_bonus_enabled = False, False
    t.max_completion_length, t.current_gradient_accumulation_steps = max_len, 1
    t.model = SimpleNamespace(training=True)
    t.accelerator = _Accelerator()
    t._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    t.args = SimpleNamespace(delta=None, use_bias_correction_kl=bias_kl, sapo_temperature_pos=sapo[0],
                             sapo_temperature_neg=sapo[1], steps_per_generation=1, vespo_k_pos=2.0,
                             vespo_lambda_pos=3.0, vespo_k_neg=3.0, vespo_lambda_neg=2.0)  # TRL's VESPO defaults
    return t


def trl_loss(trainer, logp, old, mask, adv, *, is_ratio=None, sampler=None, ref=None):
    """TRL's loss on these log-probs (its model call replaced by them)."""
    n, width = logp.shape
    trainer._get_per_token_logps_and_entropies = lambda *a, **k: (logp, torch.zeros_like(logp), None)
    inputs = {"prompt_ids": torch.zeros((n, 1), dtype=torch.long), "prompt_mask": torch.ones((n, 1), dtype=torch.long),
              "completion_ids": torch.zeros((n, width), dtype=torch.long), "completion_mask": mask.long(),
              "advantages": adv, "old_per_token_logps": old, "num_items_in_batch": mask.sum()}
    if is_ratio is not None:
        inputs["importance_sampling_ratio"] = is_ratio
    if sampler is not None:
        inputs["sampling_per_token_logps"] = sampler
    if ref is not None:
        inputs["ref_per_token_logps"] = ref
    return trainer._compute_loss(None, inputs)


def trl_is_ratio(old, sampler, mask, mode: str, clip_max: float, clip_min: float | None = None):
    """TRL's vLLM importance-sampling ratio (GRPOConfig.vllm_importance_sampling_mode, 1.16.0): d = (old - sampler)
    on valid tokens; token_*: exp(d) [N, T]; sequence_*: exp(sum_t d) [N, 1] (the product of the token ratios);
    *_truncate: clamped to [clip_min, clip_max]; *_mask: set to 0 outside [clip_min, clip_max]."""
    d = (old - sampler) * mask
    ratio = torch.exp(d.sum(-1, keepdim=True) if mode.startswith("sequence") else d)
    low = -math.inf if clip_min is None else clip_min
    if mode.endswith("truncate"):
        return ratio.clamp(min=clip_min, max=clip_max)
    return ratio.masked_fill((ratio < low) | (ratio > clip_max), 0.0)


def _grad(loss, logp):
    return torch.autograd.grad(loss, logp)[0]


def _rel(a, b) -> float:
    """max |a - b| / max |b| (0 when both are 0)."""
    scale = b.abs().max().item()
    return (a - b).abs().max().item() / scale if scale else (a - b).abs().max().item()


# (name, what gspo computes, what TRL computes): each returns a loss on the same leaf `logp`
def cases():
    lo, hi = CLIP
    return [
        ("GRPO", lambda b: policy_loss("grpo", **_gspo(b, CLIP)),
         lambda b: trl_loss(trl_trainer("grpo", epsilon=CLIP), *b[:2], b[3], b[4])),
        ("DAPO", lambda b: policy_loss("dapo", **_gspo(b, (lo, 0.28))),
         lambda b: trl_loss(trl_trainer("dapo", epsilon=(lo, 0.28)), *b[:2], b[3], b[4])),
        ("BNPO", lambda b: policy_loss("grpo", aggregation="token_mean", **_gspo(b, CLIP)),
         lambda b: trl_loss(trl_trainer("bnpo", epsilon=CLIP), *b[:2], b[3], b[4])),
        ("Dr. GRPO", lambda b: policy_loss("dr_grpo", max_len=8, **_gspo(b, CLIP)),
         lambda b: trl_loss(trl_trainer("dr_grpo", epsilon=CLIP, max_len=8), *b[:2], b[3], b[4])),
        # CISPO: TRL caps the weight at epsilon_high itself, gspo at 1 + clip_high: TRL's 5.0 is gspo's 4.0, the preset
        ("CISPO", lambda b: policy_loss("cispo", **_gspo(b, (1.0, 4.0))),
         lambda b: trl_loss(trl_trainer("cispo", epsilon=(0.2, 5.0)), *b[:2], b[3], b[4])),
        ("SAPO", lambda b: policy_loss("sapo", **_gspo(b, CLIP)),
         lambda b: trl_loss(trl_trainer("sapo", epsilon=CLIP), *b[:2], b[3], b[4])),
        # DeepSeek-V3.2's unbiased KL: the k3 term weighted by pi / pi_old (b[2] stands for the reference here)
        ("GRPO + unbiased KL", lambda b: policy_loss("grpo", ref_logp=b[2], kl_beta=0.04, kl_unbiased=True,
                                                     **_gspo(b, CLIP)),
         lambda b: trl_loss(trl_trainer("grpo", epsilon=CLIP, beta=0.04, bias_kl=True), *b[:2], b[3], b[4], ref=b[2])),
        ("LUSPO", lambda b: policy_loss("luspo", **_gspo(b, CLIP)),
         lambda b: trl_loss(trl_trainer("luspo", epsilon=CLIP, level="sequence"), *b[:2], b[3], b[4])),
        ("VESPO", lambda b: policy_loss("vespo", **_gspo(b, CLIP)),
         lambda b: trl_loss(trl_trainer("vespo", epsilon=CLIP), *b[:2], b[3], b[4])),
        ("GSPO (sequence level)", lambda b: policy_loss("gspo", **_gspo(b, GSPO_CLIP)),
         lambda b: trl_loss(trl_trainer("grpo", epsilon=GSPO_CLIP, level="sequence"), *b[:2], b[3], b[4])),
        ("OPSM (delta 0.02)", lambda b: policy_loss("opsm", delta=0.02, **_gspo(b, CLIP, old=b[2])),
         lambda b: trl_loss(trl_trainer("grpo", epsilon=CLIP, opsm_delta=0.02), b[0], b[2], b[3], b[4], sampler=b[2])),
        *[(f"GRPO + vLLM IS {mode}", _gspo_is(mode), _trl_is(mode))
          for mode in ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")],
        # OPSM beside TRL's token-level TIS, the sampler apart from the trainer: both mask on the sampler's log-probs
        ("OPSM (delta 0.02) + vLLM IS token_truncate", _gspo_opsm_is, _trl_opsm_is),
    ]


def _gspo_opsm_is(b):
    logp, old, sampler, mask, adv = b
    c, _ = correction_weights(old_logp=old, engine_logp=sampler, mask=mask, kind="tis", level="token", cap=IS_MAX,
                              low=0.0, high=IS_MAX)
    return policy_loss("opsm", delta=0.02, sampler_logp=sampler, **{**_gspo(b, CLIP), "advantages": adv[:, None] * c})


def _trl_opsm_is(b):
    logp, old, sampler, mask, adv = b
    ratio = trl_is_ratio(old, sampler, mask, "token_truncate", IS_MAX)
    return trl_loss(trl_trainer("grpo", epsilon=CLIP, vllm_is=True, opsm_delta=0.02), logp, old, mask, adv,
                    is_ratio=ratio, sampler=sampler)


# the vLLM IS modes as gspo's corrections: (kind, level, cap / band); TRL's clip_max 1.05 and clip_min 0.95 make
# every mode act on this batch (sampler 0.05 off per token)
IS_MODES = {"token_truncate": ("tis", "token"), "token_mask": ("mis", "token"),
            "sequence_truncate": ("tis", "sequence"), "sequence_mask": ("mis", "sequence")}
IS_MAX, IS_MIN = 1.05, 0.95


def _gspo(b, clip, old=None):
    logp, old_logp, _, mask, adv = b
    return {"logp": logp, "old_logp": old_logp if old is None else old, "advantages": adv, "mask": mask,
            "clip_low": clip[0], "clip_high": clip[1]}


def _gspo_is(mode):
    kind, level = IS_MODES[mode]

    def run(b):
        logp, old, sampler, mask, adv = b
        c, _ = correction_weights(old_logp=old, engine_logp=sampler, mask=mask, kind=kind, level=level, cap=IS_MAX,
                                  low=0.0, high=IS_MAX)  # TRL's *_mask default: no lower bound (clip_min None)
        weighted = adv.unsqueeze(-1) * c if c.dim() == 2 else adv * c
        return policy_loss("grpo", **{**_gspo(b, CLIP), "advantages": weighted})
    return run


def _trl_is(mode):
    def run(b):
        logp, old, sampler, mask, adv = b
        ratio = trl_is_ratio(old, sampler, mask, mode, IS_MAX)
        return trl_loss(trl_trainer("grpo", epsilon=CLIP, vllm_is=True), logp, old, mask, adv, is_ratio=ratio)
    return run


def parity(seed: int = 0, dtype=F64) -> list[tuple[str, float, float]]:
    """(objective, max relative difference of the loss, of its gradient) on one batch."""
    rows = []
    for name, ours, theirs in cases():
        b = batch(seed, dtype)
        mine = ours(b)
        mine = mine[0] if isinstance(mine, tuple) else mine
        g_mine = _grad(mine, b[0])
        other = theirs(b)
        g_other = _grad(other, b[0])
        rows.append((name, _rel(mine.detach(), other.detach()), _rel(g_mine, g_other)))
    return rows


def main() -> None:
    import trl

    print(f"TRL {trl.__version__}, torch {torch.__version__}; six sequences of lengths 2-7, off-policy (log-ratio sd 0.3)")
    print("| objective | loss rel. diff float64 | grad rel. diff float64 | loss rel. diff float32 | grad rel. diff float32 |")
    print("|---|---|---|---|---|")
    worst = {}
    for dtype in (F64, torch.float32):
        for seed in range(5):
            for name, dl, dg in parity(seed, dtype):
                key = (name, dtype)
                worst[key] = tuple(max(a, b) for a, b in zip(worst.get(key, (0.0, 0.0)), (dl, dg), strict=True))
    for name, _, _ in parity(0):
        a, b = worst[(name, F64)], worst[(name, torch.float32)]
        print(f"| {name} | {a[0]:.1e} | {a[1]:.1e} | {b[0]:.1e} | {b[1]:.1e} |")


if __name__ == "__main__":
    main()
