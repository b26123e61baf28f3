"""Every closed choice of the config and the algorithms, each value named once.

A choice is a class whose upper-case attributes are its values, in order; `values` is the tuple of them, which
conf/ checks a config against and the registries in algos/ are tested against. Code compares through the names:

    if cfg.algo.routing_replay == Replay.ROLLOUT: ...
    check_choice("rollout.kv_cache", value, KvCache.values)

Which config key takes which choice is conf/'s (conf/choice_check.py CHOICES); the algorithm names are the
`name:` of the algo presets, so they are not here.
"""

from __future__ import annotations


class Choice:
    """A closed set of names: subclasses list them as upper-case str attributes; `values` holds them in order."""

    values: tuple[str, ...] = ()

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        cls.values = tuple(v for k, v in vars(cls).items() if k.isupper() and isinstance(v, str))


# --- the policy loss and its advantages (algos/) -----------------------------------------------------------------
class Aggregation(Choice):
    """GRPO's algo.options.aggregation: how token terms reduce (verl's loss_agg_mode, spelt with underscores)."""

    SEQ_MEAN_TOKEN_MEAN = "seq_mean_token_mean"  # 1/N sum_i 1/|y_i| sum_t      (GRPO paper)
    TOKEN_MEAN = "token_mean"  # 1/sum_i|y_i| sum_i sum_t                         (DAPO)
    SEQ_MEAN_TOKEN_SUM_NORM = "seq_mean_token_sum_norm"  # 1/N sum_i 1/max_len sum_t   (Dr. GRPO)
    SEQ_MEAN_TOKEN_SUM = "seq_mean_token_sum"  # 1/N sum_i sum_t                  (verl's seq-mean-token-sum)


class Advantage(Choice):
    """algo.advantage: the advantage estimators registered in gspo.algos.advantages (ESTIMATORS)."""

    GROUP, STEP, GDPO, LOO = "group", "step", "gdpo", "loo"


class AdvScale(Choice):
    """algo.adv_scale: what a group's centred rewards are divided by (std: GRPO; none: Dr. GRPO; mean: MaxRL)."""

    STD, NONE, MEAN = "std", "none", "mean"


class Ratio(Choice):
    """An algorithm's importance ratio (algos.registry.Algorithm.ratio): one per token, or the geometric mean of
    a sequence's token ratios (GSPO, GSPO-token, GMPO)."""

    TOKEN, GEOMETRIC = "token", "geometric"


class OldLogp(Choice):
    """algo.old_logp_source: where the old policy's log-probs come from."""

    AUTO, RECOMPUTE, ENGINE = "auto", "recompute", "engine"


class Replay(Choice):
    """algo.routing_replay (MoE): none; trainer (R2): the old policy's experts; rollout (R3): the sampler's."""

    NONE, TRAINER, ROLLOUT = "none", "trainer", "rollout"


class Correction(Choice):
    """algo.correction.kind: the training-inference mismatch correction (gspo.algos.corrections)."""

    NONE, TIS, MIS, MASK, GEO_RS = "none", "tis", "mis", "mask", "geo_rs"
    K3_RS, GEO_RS_TIS = "k3_rs", "geo_rs_tis"  # a trust-region sequence mask with a token veto; Geo-RS and TIS at once
    SEQUENCE_ONLY = (K3_RS, GEO_RS_TIS)  # one weight per sequence whatever the algorithm's ratio


class Level(Choice):
    """algo.correction.level: auto is resolved by the trainer to one of RESOLVED (the levels algos/ computes)."""

    AUTO, TOKEN, SEQUENCE, GEOMETRIC = "auto", "token", "sequence", "geometric"
    RESOLVED = (TOKEN, SEQUENCE, GEOMETRIC)


# Each resolved level's default bounds (cap, low, high), used where algo.correction.cap / low / high are unset.
# The levels' scales differ by orders of magnitude, so one set of numbers cannot act at all three:
CORRECTION_BOUNDS: dict[str, tuple[float, float, float]] = {
    Level.TOKEN: (2.0, 0.5, 2.0),  # verl rollout_correction: rollout_is_threshold 2.0, RS band [1/2, 2] (reciprocal lower)
    Level.SEQUENCE: (2.0, 0.5, 2.0),  # verl decoupled_seq_is_rs: product of the token ratios, 2.0 and [0.5, 2.0]
    Level.GEOMETRIC: (1.001, 0.999, 1.001),  # verl decoupled_geo_rs: rollout_rs_threshold 1.001, lower 0.999
}
# The two sequence-only kinds read their own numbers, (cap, low, high), where algo.correction.cap / low / high are unset:
KIND_BOUNDS: dict[str, tuple[float, float, float]] = {
    # k3_rs: cap = the k3 threshold on 1/|y| sum_t k3(rho_t) (verl rollout_rs=seq_mean_k3 takes no default; 0.005 as a
    # public verl recipe's rollout_rs_threshold), low = the token veto (verl rollout_token_veto_threshold, DR.Kernel's 1e-4)
    "k3_rs": (0.005, 1e-4, 1.0),
    # geo_rs_tis: the band of geo_rs [0.999, 1.001] on the geometric mean, the cap of TIS (2) on the product (verl's
    # Geo-RS-Seq-TIS: rollout_rs=geometric with rollout_is=sequence, rollout_is_threshold 2.0)
    "geo_rs_tis": (2.0, 0.999, 1.001),
}
ICEPOP_BAND: tuple[float, float] = (0.5, 5.0)  # kind=mis at token level: IcePop (arXiv 2510.18855), verl decoupled_token_icepop


# --- the run's settings (trainer/) --------------------------------------------------------------------------------
class ModelDtype(Choice):
    """model.dtype: the weights' storage dtype."""

    FLOAT32, BFLOAT16, FLOAT16 = "float32", "bfloat16", "float16"


class RolloutDtype(Choice):
    """rollout.dtype: the sampler's compute dtype (auto: the model's)."""

    AUTO, BFLOAT16, FLOAT16 = "auto", "bfloat16", "float16"


class Sampler(Choice):
    """rollout.sampler: the hf engine's own decode loop (lean) or transformers' generate."""

    LEAN, GENERATE = "lean", "generate"


class KvCache(Choice):
    """rollout.kv_cache: the lean sampler's cache (auto: static on CUDA, dynamic elsewhere)."""

    AUTO, STATIC, DYNAMIC = "auto", "static", "dynamic"


class VllmSync(Choice):
    """rollout.vllm_sync: how vLLM gets the updated weights (auto: reload on CPU, load_weights elsewhere)."""

    AUTO, LOAD_WEIGHTS, RELOAD = "auto", "load_weights", "reload"


class TrainPrecision(Choice):
    """train.precision: the update's arithmetic (auto: from the weights' dtype)."""

    AUTO, FP32, BF16, FP16 = "auto", "fp32", "bf16", "fp16"


class LrSchedule(Choice):
    """train.lr_schedule."""

    CONSTANT, LINEAR, COSINE = "constant", "linear", "cosine"


class OnNonfinite(Choice):
    """train.on_nonfinite: a NaN/inf batch stops the run, or is undone and skipped."""

    STOP, SKIP = "stop", "skip"


class Wandb(Choice):
    """logger.wandb (auto: online with an API key, else offline)."""

    AUTO, ONLINE, OFFLINE, DISABLED = "auto", "online", "offline", "disabled"


class CodeBenchmark(Choice):
    """task.benchmark: the code task's problems."""

    LIVECODEBENCH, CODEFORCES = "livecodebench", "codeforces"


class CodeReward(Choice):
    """task.code_reward: 1 only when every test passes, or the share of tests passed."""

    ALL, FRACTION = "all", "fraction"


# --- the verdict (gspo compare / gspo report) ----------------------------------------------------------------------
class Until(Choice):
    """verdict.until: one round of seeds, or rounds until each verdict is resolved."""

    NONE, RESOLVED = "none", "resolved"


class Spending(Choice):
    """verdict.spending: the Lan-DeMets alpha-spending function of the looks (report/sequential.py)."""

    OBRIEN_FLEMING, POCOCK = "obrien_fleming", "pocock"


SPENDING_TITLES = {Spending.OBRIEN_FLEMING: "O'Brien-Fleming-type", Spending.POCOCK: "Pocock-type"}  # report's words
