"""The algorithm registry: a name -> the algorithm's loss, its own options and how its metrics reduce.

    @register("grpo", options=GrpoOptions, metrics=STANDARD_METRICS)
    def grpo_loss(x: LossInputs, *, aggregation: str): ...

A policy-loss function takes the typed `LossInputs` (algos/common.py: the tensors logp, old_logp,
advantages, mask, the clip bounds and the trainer's context: reference log-probs, the KL weight, the
minibatch's denominators, the completion budget), checked once by `policy_loss`, and its own options as
keywords: the fields of its `options` dataclass, which is what the config's `algo.options` holds. A quick
loss (a test's throwaway) may instead take the inputs as keywords: the REQUIRED ones and any of CONTEXT it
uses. It returns (loss, metrics): 0-dim detached
tensors, each a mean over the micro-batch's tokens or sequences, a sum, or an extreme, as its `metrics`
declaration says (REDUCTIONS), so the trainer reduces them over micro-batches without knowing names.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gspo.vocab.algorithms import TITLES
from gspo.vocab.choices import Ratio
from gspo.vocab.reductions import REDUCTIONS

from .common import LossInputs

if TYPE_CHECKING:
    from torch import Tensor


LossFn = Callable[..., tuple["Tensor", dict[str, "Tensor"]]]  # Tensor: torch's, named for type checkers only

# Arguments every algorithm takes.
REQUIRED = ("logp", "old_logp", "advantages", "mask", "clip_low", "clip_high")
# What the trainer offers every loss; a loss declares the ones it uses.
CONTEXT = ("ref_logp", "kl_beta", "seq_denominator", "token_denominator", "max_len", "sampler_logp", "kl_unbiased",
           "entropy", "entropy_coef")



@dataclass(frozen=True)
class NoOptions:
    """An algorithm with no options of its own."""


@dataclass(frozen=True)
class Algorithm:
    name: str
    loss: LossFn
    options: type = NoOptions  # a dataclass: the algorithm's own options, checked in __post_init__
    metrics: Mapping[str, str] = field(default_factory=dict)  # metric name -> one of REDUCTIONS
    token_advantages: bool = False  # accepts per-token advantages [N, T] (else one per sequence, [N])
    no_lower_bound: bool = False  # clip_low = 1 is allowed: a clip bound on a weight, 1 meaning none (CISPO)
    ratio: str = Ratio.TOKEN  # its importance ratio: token (one per token) or geometric (one per sequence, the
    #                       geometric mean of the token ratios: GSPO, GSPO-token, GMPO); a correction's level follows it
    card: str = ""  # its ratio and objective for `gspo explain`, a format string: {lo} = 1 - clip_low, {hi} =
    #                 1 + clip_high, {clip_low}, {clip_high}, {exp_lo} = e^-clip_low, {exp_hi} = e^clip_high, its options
    aggregation: str = ""  # its fixed token reduction where it has no aggregation option (seq_mean: 1/N sum_i J_i)
    same_as: str = ""  # an algorithm it equals in value and gradient when every sequence has one advantage (GSPO
    #                    paper, eqs. 13-14: GSPO-token and GSPO), so a sweep holding both runs it once
    on_policy_as: str = ""  # an algorithm whose gradient it equals on-policy (every ratio 1: GSPO and GRPO), so a
    #                         sweep comparing them on-policy is refused
    reads_sampler: bool = False  # reads the sampler's own log-probs (LossInputs.sampler_logp: OPSM's mask, DPPO's
    #                              anchor), so the engine returns them whatever algo.old_logp_source says

    @property
    def title(self) -> str:
        """The name as its paper writes it (vocab/algorithms.py); a plugin's name in capitals."""
        return TITLES.get(self.name, self.name.upper())

    def make_options(self, values: Mapping[str, Any]) -> Any:
        """The options dataclass from config values: TypeError naming an unknown option and the known ones,
        ValueError (from the dataclass) for a value it does not take."""
        known = [f.name for f in dataclasses.fields(self.options)]
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise TypeError(f"unknown option(s) {unknown} for {self.name!r}; known: {', '.join(known) or 'none'}")
        return self.options(**values)


ALGOS: dict[str, Algorithm] = {}


RATIOS = Ratio.values  # gspo.vocab.choices


def register(name: str, *, options: type = NoOptions, metrics: Mapping[str, str], token_advantages: bool = False,
             no_lower_bound: bool = False, ratio: str = Ratio.TOKEN, card: str = "", aggregation: str = "",
             same_as: str = "", on_policy_as: str = "",
             reads_sampler: bool = False) -> Callable[[LossFn], LossFn]:
    """Decorator: make a policy-loss function available as `name`, with its options and metric reductions."""

    def decorator(fn: LossFn) -> LossFn:
        if name in ALGOS:
            raise ValueError(f"algorithm {name!r} is already registered")
        params = inspect.signature(fn).parameters
        declared = {f.name for f in dataclasses.fields(options)}
        if takes_inputs(fn):  # fn(x: LossInputs, *, <its options>)
            undeclared = [p for p in list(params)[1:] if p not in declared]
        else:  # fn(*, <REQUIRED>, <CONTEXT it uses>, <its options>)
            missing = [arg for arg in REQUIRED if arg not in params]
            if missing:
                raise TypeError(f"algorithm {name!r} lacks required keyword arguments {missing}")
            undeclared = [p for p in params if p not in (*REQUIRED, *CONTEXT) and p not in declared]
        if undeclared:
            raise TypeError(f"algorithm {name!r}: parameters {undeclared} are neither context nor options")
        if ratio not in RATIOS:
            raise ValueError(f"algorithm {name!r}: ratio {ratio!r} not in {', '.join(RATIOS)}")
        bad = {k: v for k, v in metrics.items() if v not in REDUCTIONS}
        if bad:
            raise ValueError(f"algorithm {name!r}: metric reductions {bad} not in {', '.join(REDUCTIONS)}")
        ALGOS[name] = Algorithm(name, fn, options, dict(metrics), token_advantages, no_lower_bound, ratio, card,
                                aggregation, same_as, on_policy_as, reads_sampler)
        return fn

    return decorator


def available() -> tuple[str, ...]:
    """Registered algorithm names, sorted."""
    return tuple(sorted(ALGOS))


def get(name: str) -> Algorithm:
    """The algorithm registered as `name`; ValueError naming the known ones otherwise."""
    if name not in ALGOS:
        raise ValueError(f"unknown algorithm {name!r}; known: {', '.join(available())}")
    return ALGOS[name]


def option_names(name: str) -> tuple[str, ...]:
    """The options algorithm `name` declares (its `algo.options`)."""
    return tuple(f.name for f in dataclasses.fields(get(name).options))


def policy_loss(
    name: str,
    *,
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_low: float,
    clip_high: float,
    **kwargs: Any,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Loss (a scalar to minimise, the negated objective) and detached 0-dim metrics of `name`.

    logp, old_logp, mask: [N, T]; advantages: [N] ([N, T] where the algorithm takes token advantages).
    Every input is checked here, once, whichever loss runs (`check_inputs`); the losses hold only their math.
    `kwargs`: any of CONTEXT (passed where the loss declares it; a non-zero kl_beta to a loss without a
    KL term raises TypeError) and the algorithm's options; an option it does not declare raises TypeError.
    """
    algo = get(name)
    typed = takes_inputs(algo.loss)  # every built-in loss: it has a KL term (common.finish)
    params = inspect.signature(algo.loss).parameters
    for weight in ("kl_beta", "entropy_coef"):  # a KL weight or an entropy bonus is never dropped silently
        if not typed and kwargs.get(weight) and weight not in params:
            raise TypeError(f"algorithm {name!r} has no {weight} term: {weight}={kwargs[weight]} cannot apply")
    check_inputs(logp=logp, old_logp=old_logp, advantages=advantages, mask=mask, clip_low=clip_low, clip_high=clip_high,
                 ref_logp=kwargs.get("ref_logp"), kl_beta=kwargs.get("kl_beta", 0.0), algo=algo,
                 sampler_logp=kwargs.get("sampler_logp"), entropy=kwargs.get("entropy"),
                 entropy_coef=kwargs.get("entropy_coef", 0.0))
    options = algo.make_options({k: v for k, v in kwargs.items() if k not in CONTEXT})
    inputs = {"logp": logp, "old_logp": old_logp, "advantages": advantages, "mask": mask, "clip_low": clip_low,
              "clip_high": clip_high}
    if typed:
        context = {k: v for k, v in kwargs.items() if k in CONTEXT}
        return algo.loss(LossInputs(**inputs, **context), **dataclasses.asdict(options))
    context = {k: v for k, v in kwargs.items() if k in CONTEXT and k in params}
    return algo.loss(**inputs, **context, **dataclasses.asdict(options))


def takes_inputs(fn: LossFn) -> bool:
    """Whether a loss takes the typed LossInputs as its one positional argument (else keywords)."""
    first = next(iter(inspect.signature(fn).parameters.values()), None)
    return first is not None and first.kind is not inspect.Parameter.KEYWORD_ONLY and \
        first.annotation in (LossInputs, "LossInputs")

def check_clip(algo: Algorithm, clip_low: float, clip_high: float) -> None:
    """The clip-range rule, stated once (the loss's inputs and the pre-run check read it): 0 < clip_low < 1 and
    clip_high > 0, with clip_low = 1 (a weight clipped below at 0, i.e. not at all) only where the algorithm
    declares `no_lower_bound` (CISPO). ValueError otherwise."""
    top = "<=" if algo.no_lower_bound else "<"
    if not (0.0 < clip_low and (clip_low <= 1.0 if algo.no_lower_bound else clip_low < 1.0) and clip_high > 0.0):
        raise ValueError(f"needs 0 < clip_low {top} 1 and clip_high > 0, got {clip_low}, {clip_high}")


def check_inputs(*, logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, clip_low: float, clip_high: float,
                 ref_logp: Tensor | None, kl_beta: float, algo: Algorithm, sampler_logp: Tensor | None = None,
                 entropy: Tensor | None = None, entropy_coef: float = 0.0) -> None:
    """Raise ValueError on shapes or settings that would silently broadcast into a wrong loss. The clip bounds are
    the config's (conf/ranges.py: 0 < clip_low <= 1, clip_high > 0), under `check_clip`'s rule."""
    if logp.dim() != 2:
        raise ValueError(f"logp must be [N, T], got shape {tuple(logp.shape)}")
    for name, tensor in (("old_logp", old_logp), ("mask", mask), ("ref_logp", ref_logp), ("sampler_logp", sampler_logp),
                         ("entropy", entropy)):
        if tensor is not None and tensor.shape != logp.shape:
            raise ValueError(f"{name} must have logp's shape {tuple(logp.shape)}, got {tuple(tensor.shape)}")
    allowed = [logp.shape[:1]] + ([logp.shape] if algo.token_advantages else [])
    if advantages.shape not in allowed:
        want = " or ".join(str(tuple(shape)) for shape in allowed)
        raise ValueError(f"advantages must have shape {want}, got {tuple(advantages.shape)}")
    check_clip(algo, clip_low, clip_high)
    if kl_beta < 0.0:
        raise ValueError(f"kl_beta must be >= 0, got {kl_beta}")
    if kl_beta != 0.0 and ref_logp is None:
        raise ValueError(f"kl_beta={kl_beta} needs ref_logp (reference-model log-probs, [N, T])")
    if entropy_coef < 0.0:
        raise ValueError(f"entropy_coef must be >= 0, got {entropy_coef}")
    if entropy_coef != 0.0 and entropy is None:
        raise ValueError(f"entropy_coef={entropy_coef} needs entropy (the policy's per-token entropy, [N, T])")
