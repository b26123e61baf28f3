"""The loss card: the exact estimator a config's update computes, in words and numbers (`gspo explain`, and
estimator.txt in every run directory).

Peers' users could not see which estimator a config produced, and the bugs that hurt them most were there:
the sum or the mean of a sequence weight, a loss divided twice by the accumulation steps, gradients scaled by
the parallel degree. The card states, from the resolved config and the algorithm registry (never from a copy
of the losses' logic): the ratio (token or sequence, geometric mean or product), the clip or mask rule with its
numbers, the advantage (normalisation, scale), the aggregation and its normaliser with the micro-batch,
accumulation and data-parallel factors, where pi_old and the sampler's log-probs come from, and the correction.
"""

from __future__ import annotations

import math

from gspo.algos import get, get_estimator
from gspo.trainer.engines.registry import engine_kind
from gspo.trainer.step.advantages import correction_bounds
from gspo.vocab.choices import ICEPOP_BAND, Advantage, AdvScale, Correction, Level, OldLogp, Replay

NORMALISERS = {  # loss = -(this) over a minibatch, the counts being the whole minibatch's (every micro-batch, rank)
    "seq_mean": "1/N sum_i J_i  (N sequences of the minibatch)",
    "seq_mean_token_mean": "1/N sum_i 1/|y_i| sum_t J_it  (N sequences; each sequence's own length)",
    "token_mean": "1/T sum_i sum_t J_it  (T valid tokens of the minibatch; long sequences weigh more)",
    "seq_mean_token_sum": "1/N sum_i J_i, J_i = sum_t J_it  (N sequences; no length normaliser, verl's "
                          "seq-mean-token-sum: a long sequence weighs more; LUSPO's J_i holds its length |y_i|)",
    "seq_mean_token_sum_norm": "1/N sum_i 1/L sum_t J_it  (N sequences; L = rollout.max_new_tokens = {max_len}, a constant)",
}


def estimator_card(cfg, *, world_size: int = 1) -> str:
    """The card for a resolved config (gspo.conf.compose_config's); `world_size`: the data-parallel ranks."""
    algo, spec = cfg.algo, get(cfg.algo.name)
    options = {**_defaults(spec), **dict(algo.options)}
    numbers = {"lo": _num(max(0.0, 1.0 - algo.clip_low)), "hi": _num(1.0 + algo.clip_high),
               "clip_low": _num(algo.clip_low), "clip_high": _num(algo.clip_high),
               "exp_lo": _num(math.exp(-algo.clip_low)), "exp_hi": _num(math.exp(algo.clip_high)),
               **{k: _num(v) if isinstance(v, float) else v for k, v in options.items()},
               **getattr(spec.make_options(dict(algo.options)), "card_fields", dict)()}  # words an option picks
    lines = [f"estimator  {algo.name}: the update's loss = -J + {_num(algo.kl_beta)} KL (k3, to the initial model; "
             + ("weighted by r_it = pi / pi_old per token, DeepSeek-V3.2's unbiased KL; " if algo.kl_unbiased else "")
             + "reduced like J)" if algo.kl_beta else f"estimator  {algo.name}: the update's loss = -J (no KL term)"]
    if algo.entropy_coef:
        lines.append(f"entropy    the loss less {_num(algo.entropy_coef)} H, H_it = -sum_v pi_v log pi_v the sampling "
                     "distribution's entropy at each token (its gradient through every logit), reduced like J: an "
                     "entropy bonus")
    lines += spec.card.format(**numbers).splitlines() if spec.card else [
        f"objective  not declared: {algo.name} registers no card (gspo.algos.register(..., card=...))"]
    lines += _advantage(cfg)
    lines += _aggregation(cfg, options.get("aggregation") or spec.aggregation, world_size)
    lines += _policies(cfg, spec.make_options(dict(algo.options)))
    lines += _lag(cfg, spec)
    lines += _correction(cfg)
    return "\n".join(lines) + "\n"


def _defaults(spec) -> dict:
    return {f: getattr(spec.options(), f) for f in spec.options.__dataclass_fields__}


def _num(x: float) -> str:
    return f"{x:.6g}"


def _advantage(cfg) -> list[str]:
    algo, r = cfg.algo, cfg.rollout
    G, eps = cfg.train.group_size, _num(algo.adv_eps)
    scale = {AdvScale.STD: f"(r_i - mean_G) / (std_G + {eps}), Bessel std over each group of G = {G}",
             AdvScale.NONE: f"r_i - mean_G over each group of G = {G} (no std division)",
             AdvScale.MEAN: f"(r_i - mean_G) / max(mean_G, {eps}) over each group of G = {G} (MaxRL)"}[algo.adv_scale]
    est = get_estimator(algo.advantage)
    if algo.advantage == Advantage.STEP:
        what = f"per token: the sum of the normalised rewards of its step and the later ones; each step {scale}"
    elif algo.advantage == Advantage.LOO:
        what = (f"A_i = r_i - the mean of the other G - 1 = {G - 1} rewards of its group (leave-one-out, RLOO)"
                + ("" if algo.adv_scale == AdvScale.NONE else f", divided by (std_G + {eps}), Bessel std")
                + "; a group of equal rewards gets exactly 0")
    elif est.needs_components:
        parts = "the task's reward components (arith: correctness, format)" + (
            ", and the overlong penalty as one more" if r.overlong_buffer else "")
        what = (f"{parts}, each normalised in its group ({scale}), summed, then (S - mean_batch) / "
                f"(std_batch + {eps}) over the batch (GDPO); a group constant in every component gets exactly 0")
    else:
        what = f"A_i = {scale}; a group of equal rewards gets exactly 0"
    rewards = f"the task's ({cfg.task.kind})"
    if r.overlong_buffer:
        rewards += (f" + the overlong penalty over the last {_num(r.overlong_buffer)} of {r.max_new_tokens} tokens"
                    + (" (added after the filter below)" if r.dynamic_sampling else ""))
    lines = [f"advantage  {algo.advantage}: {what}", f"rewards    {rewards}"]
    if r.dynamic_sampling:
        silent = ("every reward component (unshaped) is constant" if est.needs_components else
                  "task rewards (correctness, unshaped) are all equal")
        lines.append(f"filter     dynamic sampling: groups whose {silent} are dropped, up to {r.max_draws} draws of "
                     f"{cfg.train.prompts_per_step} prompts; a batch still short is refilled with dropped groups, "
                     "unshaped, at advantage 0 (sampling/groups_refilled)")
    return lines


def _aggregation(cfg, aggregation: str, world_size: int) -> list[str]:
    t = cfg.train
    n_batch = t.prompts_per_step * t.group_size
    n_mb = n_batch // t.minibatches
    micro = t.micro_batch_size or -(-n_mb // world_size)
    n_micro = -(-n_mb // micro)
    norm = NORMALISERS.get(aggregation, "its own (the algorithm declares no aggregation)").format(
        max_len=cfg.rollout.max_new_tokens)
    return [
        f"aggregate  {aggregation or 'undeclared'}: J = {norm}",
        f"batches    rollout batch {t.prompts_per_step} prompts x {t.group_size} = {n_batch} sequences, split into "
        f"{t.minibatches} minibatches of N = {n_mb}; x {t.epochs} epoch(s) = {t.minibatches * t.epochs} optimizer "
        f"steps per rollout batch" + ("; on-policy: every ratio is 1 (GRPO and GSPO give the same gradient)"
                                      if t.minibatches * t.epochs == 1 else ""),
        f"accumulate {n_micro} micro-batch(es) of {micro} per minibatch, each divided by the whole minibatch's N (or T), "
        "not its own and not by the number of micro-batches: their losses and gradients sum to the minibatch's",
        f"parallel   {world_size} data-parallel rank(s): the same global N (or T) on every rank, gradients summed "
        f"(not averaged) before clipping to norm {_num(t.max_grad_norm)}",
    ]


def _policies(cfg, options) -> list[str]:
    algo, r = cfg.algo, cfg.rollout
    sampled = (f"sampler    {engine_kind(r.engine).description(r)}, temperature {_num(r.temperature)}, top_p {_num(r.top_p)}: its "
               "log-probs are pi_s, scored at the same temperature and nucleus")
    if algo.correction.kind != Correction.NONE:
        # OPSM's mask reads the sampler's whatever pi_old is; DPPO and CISPO only anchored there (refused here)
        reads = get(algo.name).reads_sampler and getattr(options, "anchored_at_sampler", True)
        old = ("a trainer scoring forward before the updates (the sampler's log-probs enter through the correction"
               + (f", and {algo.name}'s own line above reads them)" if reads else " only)"))
    elif algo.old_logp_source == OldLogp.ENGINE:
        old = "the sampler's own log-probs (algo.old_logp_source=engine), whatever their precision; the mismatch logged"
    elif algo.old_logp_source == OldLogp.RECOMPUTE:
        old = "a trainer scoring forward before the updates (algo.old_logp_source=recompute)"
    elif r.lag:
        old = f"a trainer scoring forward before the updates (algo.old_logp_source=auto under rollout.lag={r.lag})"
    else:
        old = ("the sampler's own log-probs where they equal a trainer forward to fp tolerance (hf lean sampler, fp32, "
               "no MoE routers), else a trainer scoring forward (algo.old_logp_source=auto)")
    lines = [sampled, f"pi_old     {old}"]
    if algo.routing_replay != Replay.NONE:
        whose = ("the experts the old policy's scoring forward chose (R2)" if algo.routing_replay == Replay.TRAINER else
                 "the experts the sampler chose while decoding (R3)")
        lines.append(f"replay     routing replay: {whose}, replayed in the update's forwards, gates recomputed from "
                     "the current router")
    return lines


def _lag(cfg, spec) -> list[str]:
    """Under rollout.lag = k: which policy drew the batch, and which one each ratio, correction and mask reads."""
    k, algo = cfg.rollout.lag, cfg.algo
    if not k:
        return []
    behind = f"pi_s, the behaviour policy {k} update(s) before pi_old"
    ratio = (behind if algo.correction.kind == Correction.NONE and algo.old_logp_source == OldLogp.ENGINE else
             "pi_old, the trainer's weights at the step's start")
    lines = [f"lag        rollout.lag={k}: step t's batch was drawn by step t-{k}'s weights (pi_s, the behaviour policy, "
             f"its log-probs the sampler's), drawn while step t-{k} updated; pi_old = the weights at step t's start; "
             f"steps 1..{k + 1} train on batches the start model drew ({k} update(s) behind from step {k + 1} on)",
             f"reads      the ratio (and its clip) is pi_theta / {ratio}"]
    if algo.correction.kind != Correction.NONE:
        lines.append("reads      the correction's rho is pi_old / pi_s: it weighs the k updates of staleness")
    if spec.reads_sampler:
        lines.append(f"reads      {algo.name}'s mask or anchor reads pi_s, the batch's behaviour policy ({k} updates old)")
    return lines


def _correction(cfg) -> list[str]:
    c = cfg.algo.correction
    if c.kind == Correction.NONE:
        return ["correction none"]
    b = correction_bounds(cfg.algo)
    rho = {Level.TOKEN: "rho_it = exp(old_logp_it - sampler_logp_it), per token",
           Level.SEQUENCE: "rho_i = exp(sum_t (old_logp_it - sampler_logp_it)), the product of the token ratios",
           Level.GEOMETRIC: "rho_i = exp(1/|y_i| sum_t (old_logp_it - sampler_logp_it)), their geometric mean"}[b.level]
    rule = {Correction.TIS: f"c = sg(min(rho, {_num(b.cap)}))",
            Correction.MIS: f"c = sg(rho) if {_num(b.low)} <= rho <= {_num(b.high)}, else 0 ("
                   + ("IcePop)" if b.level == Level.TOKEN and (b.low, b.high) == ICEPOP_BAND else "masked IS)"),
            Correction.MASK: f"c = 1 if {_num(b.low)} <= rho <= {_num(b.high)}, else 0",
            Correction.GEO_RS: f"c = 1 if {_num(b.low)} <= rho <= {_num(b.high)}, else 0 (Geo-RS)",
            Correction.K3_RS: f"c = 1 if 1/|y_i| sum_t k3(rho_it) <= {_num(b.cap)} and no rho_it < {_num(b.low)} (the "
                              "token veto), else 0; k3(rho) = rho - 1 - log rho (a trust-region sequence mask)",
            Correction.GEO_RS_TIS: f"c = sg(min(rho, {_num(b.cap)})) if {_num(b.low)} <= rho_geo_i <= {_num(b.high)}, "
                                   "else 0, rho_geo_i their geometric mean (Geo-RS and TIS at once)"}[b.kind]
    return [f"correction {b.kind} at {b.level} level: {rule}, {rho}; c multiplies each term's advantage"]
