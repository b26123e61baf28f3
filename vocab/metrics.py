"""The metric catalogue: every metric a run logs, declared once.

Each `Metric` says what the number means (one line), how it reduces over micro-batches and updates
(reductions.REDUCTIONS; None for a value made once per step), and what a report needs to show it: a plot
label, its scale (linear or log), the range a valid value lies in, whether the comparison report
headlines it, and its kind: HIGHER (higher is better: reward, accuracy), LOWER (lower is better: cost,
time), or MECHANISM (neither: how the algorithm behaved, e.g. clip fractions, ratios).

Code that writes or reads a metric uses the constant here (`REWARD_MEAN`, `CLIP_TOKEN_FRAC`, ...) or,
for the names made from a task, benchmark or phase, the `Family` that builds them (`EVAL.name(task,
"accuracy")`, `REWARD_TASK.name(task)`, `TIME_PHASE.name("generate")`). `lookup(name)` finds the
declaration of any logged name; tests/algos/test_metric_catalogue.py fails when a run logs a name it lacks.

This module is of the bottom room (vocab): it imports the standard library and the reduction names only, so
report/ reads the catalogue without loading torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .reductions import MAX, MIN, SEQ_MEAN, SUM, TOKEN_MEAN

HIGHER, LOWER, MECHANISM = "higher", "lower", "mechanism"  # higher / lower is better; neither
LINEAR, LOG = "linear", "log"
UNIT = (0.0, 1.0)  # fractions, accuracies
NONNEG = (0.0, None)
ANY = (None, None)


@dataclass(frozen=True)
class Metric:
    """One logged metric (or a family of them: `name` holds {placeholders})."""

    name: str
    meaning: str
    reduction: str | None = None  # how it combines over micro-batches and updates; None: one value per step
    label: str = ""  # plot axis / table label; default: the name
    scale: str = LINEAR
    valid: tuple[float | None, float | None] = ANY  # (low, high), None: unbounded
    headline: bool = False  # the comparison report's summary table shows it
    kind: str = MECHANISM
    short: str = ""  # the report's verdict words ("clipped tokens"); default: the label

    def __post_init__(self) -> None:
        if not self.label:
            object.__setattr__(self, "label", self.name)
        if not self.short:
            object.__setattr__(self, "short", self.label)

    def in_range(self, value: float) -> bool:
        low, high = self.valid
        return value != value or ((low is None or value >= low) and (high is None or value <= high))


@dataclass(frozen=True)
class Family(Metric):
    """Metrics named after a task, a benchmark or a phase: `name` is a pattern such as eval/{source}/{stat}."""

    def format(self, *parts: str) -> str:
        return re.sub(r"\{[a-z]+\}", "{}", self.name).format(*parts)

    def matches(self, name: str) -> bool:
        return re.fullmatch(re.sub(r"\\\{[a-z]+\\\}", r"[^/]+", re.escape(self.name)), name) is not None


CATALOGUE: dict[str, Metric] = {}
CLIP, RATIO, DIAG = "clip", "ratio", "diag"  # sections (a name's first part) code selects by


def section(name: str) -> str:
    """A name's first part: clip/token_frac -> clip."""
    return name.split("/", 1)[0]


def declare(metric: Metric) -> str:
    """Add `metric` to the catalogue; returns its name (the constant code uses). A name twice is an error."""
    if metric.name in CATALOGUE:
        raise ValueError(f"metric {metric.name!r} is declared twice")
    CATALOGUE[metric.name] = metric
    return metric.name


def family(metric: Family) -> Family:
    declare(metric)
    return metric


def lookup(name: str) -> Metric | None:
    """The declaration of a logged name: its own, or the family whose pattern it fits."""
    if name in CATALOGUE:
        return CATALOGUE[name]
    return next((m for m in CATALOGUE.values() if isinstance(m, Family) and m.matches(name)), None)


def reductions(names: tuple[str, ...]) -> dict[str, str]:
    """name -> reduction, for `register(..., metrics=)` and the update's own metrics."""
    return {n: CATALOGUE[n].reduction for n in names}


def headlines() -> list[Metric]:
    """What the report's summary table shows, in catalogue order."""
    return [m for m in CATALOGUE.values() if m.headline]


# --- the policy loss (gspo.algos.common; every algorithm) -------------------------------------------------------
CLIP_TOKEN_FRAC = declare(Metric("clip/token_frac", "share of completion tokens whose clipped branch is active (no gradient)",
                                 TOKEN_MEAN, "clipped-token fraction", LOG, UNIT, headline=True, short="clipped tokens"))
CLIP_LOW_FRAC = declare(Metric("clip/low_frac", "share of tokens clipped at the lower bound (A < 0)", TOKEN_MEAN,
                               "clipped low", LOG, UNIT))
CLIP_HIGH_FRAC = declare(Metric("clip/high_frac", "share of tokens clipped at the upper bound (A > 0)", TOKEN_MEAN,
                                "clipped high", LOG, UNIT))
CLIP_OUT_OF_BAND = declare(Metric("clip/ratio_out_of_band_frac", "share of tokens whose ratio lies outside "
                                  "[1 - clip_low, 1 + clip_high], whatever the advantage's sign", TOKEN_MEAN,
                                  "ratio out of band", LOG, UNIT))
CLIP_SEQ_FRAC = declare(Metric("clip/seq_frac", "share of sequences with at least one clipped token", SEQ_MEAN,
                               "clipped-sequence fraction", LINEAR, UNIT, headline=True, short="clipped sequences"))
RATIO_TOKEN_MEAN = declare(Metric("ratio/token_mean", "mean token importance ratio pi / pi_old", TOKEN_MEAN,
                                  "token ratio (mean)", LINEAR, NONNEG))
RATIO_TOKEN_MIN = declare(Metric("ratio/token_min", "smallest token ratio", MIN, "token ratio (min)", LOG, NONNEG))
RATIO_TOKEN_MAX = declare(Metric("ratio/token_max", "largest token ratio", MAX, "token ratio (max)", LOG, NONNEG))
RATIO_SEQ_MEAN = declare(Metric("ratio/seq_mean", "mean sequence ratio s_i (GSPO's length-normalised ratio)", SEQ_MEAN,
                                "sequence ratio (mean)", LINEAR, NONNEG))
RATIO_SEQ_MIN = declare(Metric("ratio/seq_min", "smallest sequence ratio", MIN, "sequence ratio (min)", LOG, NONNEG))
RATIO_SEQ_MAX = declare(Metric("ratio/seq_max", "largest sequence ratio", MAX, "sequence ratio (max)", LOG, NONNEG))
KL_OLD = declare(Metric("policy/kl_old", "k3 KL(pi_old || pi) over the update's tokens", TOKEN_MEAN,
                        "KL to the old policy (k3)", LOG, NONNEG, short="KL to the old policy"))
KL_REF = declare(Metric("policy/kl_ref", "k3 KL(pi || pi_ref) to the frozen initial model (kl_beta > 0 or a reference)",
                        TOKEN_MEAN, "KL to the reference (k3)", LOG, NONNEG))
OPSM_MASKED = declare(Metric("clip/opsm_masked_frac", "share of sequences OPSM drops (A < 0 and mean log(pi_s / pi) "
                             "above delta, pi_s the sampler's; algo=opsm)", SEQ_MEAN, "OPSM masked sequences", LINEAR, UNIT))
LOSS_POLICY = declare(Metric("loss/policy", "the policy term of the loss (-J), summed over a minibatch's micro-batches",
                             SUM, "policy loss"))

# --- the update (trainer/step/update.py) ---------------------------------------------------------------------------
GRAD_NORM = declare(Metric("optim/grad_norm", "global gradient norm before clipping, mean over the step's updates",
                           SEQ_MEAN, "grad norm (before clipping)", LINEAR, NONNEG, short="grad norm"))
LR = declare(Metric("optim/lr", "learning rate of the step's updates (mean)", SEQ_MEAN, "learning rate", LOG, NONNEG))

# --- the step's rollout (trainer/loop.py step_row, trainer/step/sampling.py) ------------------------------------------
# a task reward lies in [0, 1]; DAPO's overlong penalty (in [-1, 0]) can take the shaped one below 0
REWARD_MEAN = declare(Metric("reward/mean", "mean task reward of the step's completions", None, "training reward",
                             LINEAR, (-1.0, 1.0), headline=True, kind=HIGHER))
REWARD_STD = declare(Metric("reward/std", "standard deviation of the step's task rewards", None, "reward std",
                            LINEAR, NONNEG))
REWARD_TASK = family(Family("reward/{task}", "mean task reward, named after the task (as reward/mean)", None,
                            "training reward", LINEAR, ANY, kind=HIGHER))
FRAC_ZERO_STD = declare(Metric("reward/frac_zero_std_groups", "share of groups whose rewards are all equal "
                               "(advantage 0: no signal)", None, "groups with no signal", LINEAR, UNIT))
OVERLONG_PENALTY = declare(Metric("reward/overlong_penalty", "mean DAPO overlong penalty added to the rewards "
                                  "(rollout.overlong_buffer > 0)", None, "overlong penalty", LINEAR, (-1.0, 0.0)))
LEN_MEAN = declare(Metric("completion/len_mean", "mean completion length in tokens", None, "response length (tokens)",
                          LINEAR, NONNEG, headline=True, short="response length"))
LEN_MAX = declare(Metric("completion/len_max", "longest completion in tokens", None, "longest response (tokens)",
                         LINEAR, NONNEG))
TRUNCATED_FRAC = declare(Metric("completion/truncated_frac", "share of completions cut at rollout.max_new_tokens",
                                None, "truncated fraction", LINEAR, UNIT, kind=LOWER))
ENTROPY = declare(Metric("policy/entropy", "mean per-token entropy of the sampling policy (nats)", None,
                         "entropy (nats per token)", LINEAR, NONNEG, short="entropy"))
GROUPS_DRAWN = declare(Metric("sampling/groups_drawn", "groups sampled this step (dynamic sampling)", None,
                              "groups drawn", LINEAR, NONNEG, kind=LOWER))
GROUPS_KEPT = declare(Metric("sampling/groups_kept", "informative groups in the batch (dynamic sampling)", None,
                             "groups kept", LINEAR, NONNEG))
GROUPS_DROPPED = declare(Metric("sampling/groups_dropped", "groups with no signal dropped (dynamic sampling: "
                                "all-equal rewards; under GDPO every component constant)", None,
                                "groups dropped", LINEAR, NONNEG))
DRAWS = declare(Metric("sampling/draws", "rounds of prompts drawn (dynamic sampling)", None, "draw rounds",
                       LINEAR, NONNEG, kind=LOWER))
GROUPS_REFILLED = declare(Metric("sampling/groups_refilled", "dropped groups put back to complete a short batch "
                                 "(dynamic sampling)", None, "groups refilled", LINEAR, NONNEG))
TIME_ROLLOUT = declare(Metric("time/rollout_s", "seconds generating and grading the step", None, "rollout seconds",
                              LINEAR, NONNEG, kind=LOWER))
TIME_UPDATE = declare(Metric("time/update_s", "seconds scoring old log-probs and updating", None, "update seconds",
                             LINEAR, NONNEG, kind=LOWER))
TIME_STEP = declare(Metric("time/step_s", "seconds of the whole step", None, "seconds per step", LINEAR, NONNEG,
                           headline=True, kind=LOWER))
TIME_PHASE = family(Family("time/{phase}_s", "seconds of one phase of the step: generate, grade, old_logp, updates; eval (the held-out task eval)",
                           None, "phase seconds", LINEAR, NONNEG, kind=LOWER))
TOKENS_PER_S = declare(Metric("throughput/tokens_per_s", "completion tokens per second of the step", None,
                              "tokens per second", LINEAR, NONNEG, kind=HIGHER))

# --- diagnostics over every update's log-ratios (gspo.algos.diagnostics) -----------------------------------------
DIAG_TOKEN_VAR = declare(Metric("diag/token_logratio_var", "variance of the token log-ratios the updates used", None,
                                "token log-ratio variance", LOG, NONNEG))
DIAG_SEQ_VAR = declare(Metric("diag/seq_logratio_var", "variance of the sequence log-ratios the updates used", None,
                              "sequence log-ratio variance", LOG, NONNEG))
DIAG_TOKEN_VAR_BUCKET = family(Family("diag/token_logratio_var/len_{lo}_{hi}", "token log-ratio variance of the "
                                      "sequences whose length lies in [lo, hi)", None, "token log-ratio variance "
                                      "(length bucket)", LOG, NONNEG))
DIAG_SEQ_VAR_BUCKET = family(Family("diag/seq_logratio_var/len_{lo}_{hi}", "sequence log-ratio variance of the "
                                    "sequences whose length lies in [lo, hi)", None, "sequence log-ratio variance "
                                    "(length bucket)", LOG, NONNEG))
DIAG_LEN_CORR_TOKEN = declare(Metric("diag/len_corr_token_noise", "correlation of length with |summed token "
                                     "log-ratio| (GRPO's noise grows with length)", None, "length vs token noise",
                                     LINEAR, (-1.0, 1.0)))
DIAG_LEN_CORR_SEQ = declare(Metric("diag/len_corr_seq_noise", "correlation of length with |sequence log-ratio| "
                                   "(GSPO's does not)", None, "length vs sequence noise", LINEAR, (-1.0, 1.0)))

# --- sampler-trainer mismatch (algo.old_logp_source=engine; gspo.algos.diagnostics, corrections) ----------------
MISMATCH_LOGP = declare(Metric("mismatch/logp_abs_diff", "mean |trainer - sampler| log-prob per token", None,
                               "sampler-trainer |log-prob diff|", LOG, NONNEG, kind=LOWER))
MISMATCH_SEQ_MEAN = declare(Metric("mismatch/seq_ratio_mean", "mean sequence ratio trainer / sampler", None,
                                   "mismatch sequence ratio (mean)", LINEAR, NONNEG))
MISMATCH_SEQ_STD = declare(Metric("mismatch/seq_ratio_std", "std of the sequence ratio trainer / sampler", None,
                                  "mismatch sequence ratio (std)", LOG, NONNEG, kind=LOWER))
MISMATCH_TOKEN_OOB = declare(Metric("mismatch/token_out_of_band_frac", "share of tokens whose trainer / sampler ratio "
                                    "leaves the clip band", None, "mismatch tokens out of band", LOG, UNIT, kind=LOWER))
MISMATCH_SEQ_OOB = declare(Metric("mismatch/seq_out_of_band_frac", "share of sequences whose trainer / sampler ratio "
                                  "leaves the clip band", None, "mismatch sequences out of band", LOG, UNIT, kind=LOWER))
# --- rollouts k updates behind (rollout.lag; trainer/step/lagged.py): mismatch/* above are logged under a lag too --
LAG_BEHIND = declare(Metric("lag/updates_behind", "updates between the weights that drew the batch (pi_s) and the "
                            "trainer's at the step's start (pi_old): min(rollout.lag, step - 1)", None,
                            "updates behind", LINEAR, NONNEG))
LAG_GAP_MAX = declare(Metric("mismatch/logp_abs_diff_max", "largest |trainer - sampler| log-prob of a token in the "
                             "batch (rollout.lag)", None, "sampler-trainer |log-prob diff| (max)", LOG, NONNEG,
                             kind=LOWER))
LAG_TOKEN_STD = declare(Metric("mismatch/token_ratio_std", "std over the batch's tokens of the ratio trainer / "
                               "sampler, pi_old / pi_s (rollout.lag)", None, "mismatch token ratio (std)", LOG,
                               NONNEG, kind=LOWER))
CORRECTION_MEAN = declare(Metric("correction/weight_mean", "mean correction ratio rho = pi_old / pi_sampler (token, "
                                 "product or geometric mean), before truncation or masking", None,
                                 "correction ratio (mean)", LINEAR, NONNEG))
CORRECTION_MAX = declare(Metric("correction/weight_max", "largest correction ratio rho, before truncation or masking",
                                None, "correction ratio (max)", LOG, NONNEG))
CORRECTION_APPLIED = declare(Metric("correction/applied_mean", "mean weight the terms got after truncation or masking "
                                    "(masked terms count 0)", None, "correction weight applied (mean)", LINEAR, NONNEG))
CORRECTION_TRUNCATED = declare(Metric("correction/truncated_frac", "share of TIS weights truncated at the cap", None,
                                      "TIS truncated", LINEAR, UNIT))
CORRECTION_MASKED = declare(Metric("correction/masked_frac", "share of terms MIS / mask / Geo-RS masks out", None,
                                   "masked by the correction", LINEAR, UNIT))

# --- Mixture-of-Experts (trainer/parallel/moe.py) ------------------------------------------------------------------------
ROUTING_CHANGED = declare(Metric("moe/routing_changed_frac", "share of tokens whose experts differ between the old "
                                 "policy's forward and the update's", None, "routing changed", LINEAR, UNIT))
LOAD_MAX = declare(Metric("moe/load_max", "busiest expert's share of the tokens, mean over layers", None,
                          "max expert load", LINEAR, UNIT))

# --- guards (trainer/run/guards.py) ---------------------------------------------------------------------------------
SKIPPED_BATCH = declare(Metric("guard/skipped_batch", "1 when the step's batch met a NaN/inf and was undone "
                               "(train.on_nonfinite=skip)", None, "skipped batch", LINEAR, UNIT, kind=LOWER))

# --- evals (trainer/evaluate.py) --------------------------------------------------------------------------------
EVAL = family(Family("eval/{source}/{stat}", "held-out score: the task's accuracy and accuracy_greedy, a benchmark's "
                     "pass@1, pass@k, avg@k (or CodeForces rating)", None, "held-out score", LINEAR, ANY,
                     headline=True, kind=HIGHER))
EVAL_ACCURACY, EVAL_ACCURACY_GREEDY = "accuracy", "accuracy_greedy"  # the task eval's two stats
# what the report shows of the task eval's two stats (fractions of the held-out set)
EVAL_STATS = {EVAL_ACCURACY: Metric("eval/{task}/accuracy", "held-out accuracy, sampled at the training temperature",
                                    None, "held-out accuracy (sampled)", LINEAR, UNIT, True, HIGHER, "held-out accuracy"),
              EVAL_ACCURACY_GREEDY: Metric("eval/{task}/accuracy_greedy", "held-out accuracy, greedy", None,
                                           "held-out accuracy (greedy)", LINEAR, UNIT, True, HIGHER,
                                           "held-out accuracy (greedy)")}

# The policy loss's metrics, as every algorithm registers them.
STANDARD = (CLIP_TOKEN_FRAC, CLIP_LOW_FRAC, CLIP_HIGH_FRAC, CLIP_OUT_OF_BAND, CLIP_SEQ_FRAC, RATIO_TOKEN_MEAN,
            RATIO_TOKEN_MIN, RATIO_TOKEN_MAX, RATIO_SEQ_MEAN, RATIO_SEQ_MIN, RATIO_SEQ_MAX, KL_OLD, KL_REF, LOSS_POLICY)
