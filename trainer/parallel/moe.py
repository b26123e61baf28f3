"""Routing Replay for Mixture-of-Experts policies, and the routing metrics that show why it matters.

GSPO paper, sec. 4.3: after a gradient update about a tenth of the experts a token is routed to
change, so a token-level importance ratio pi(y_t)/pi_old(y_t) compares two different sub-networks and
GRPO's training breaks down; the paper's GRPO baseline therefore caches the experts chosen under the
old policy and reuses them when computing the new policy's ratio ("Routing Replay"). GSPO needs no
replay: its sequence likelihood is insensitive to single routing changes.

How it is done here. transformers' MoE routers (Qwen3-MoE's `Qwen3MoeTopKRouter` and its kin) are
modules returning `(router_logits, router_scores, router_indices)` over the flattened tokens of one
forward. A forward hook on every router:
  - while the old log-probs are scored (`recording`): stores each token's top-k experts per layer;
  - during the update's forwards (`updating`): compares the current top-k set with the recorded one
    (`moe/routing_changed_frac`, counted over attended tokens whether replay is on or off) and, with
    replay on, replaces the router's choice by the recorded experts. The gates are recomputed from
    the *current* router's softmax over those experts (renormalised where the router renormalises),
    so the router still receives gradient, as the paper's baseline does.
The selection of rows and columns stays set until the next one, so a backward pass that recomputes a
checkpointed forward replays the same experts.

That is R2 (`algo.routing_replay=trainer`): the experts replayed are the trainer's own old-policy choice.
R3 (`algo.routing_replay=rollout`; Ma et al. 2025, "Rollout Routing Replay", arXiv 2510.11370) replays the
experts the *sampler* chose while it decoded (`DecodeRouting`, recorded by the hf engine in whatever
precision it samples), in the old-log-prob forward as in the update's, so the trainer's forwards see the
routing that produced the tokens. A position the sampler never forwarded (a completion's last token, whose
output predicts nothing scored) holds -1: there the router keeps its own choice and nothing is counted.
`moe/routing_changed_frac` is measured against what the mode replays.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import Tensor, nn
from transformers import AutoConfig

from gspo.conf.errors import GspoError
from gspo.trainer.parallel import distributed
from gspo.vocab.choices import Replay
from gspo.vocab.metrics import LOAD_MAX, ROUTING_CHANGED


def find_routers(model: nn.Module) -> list[nn.Module]:
    """The top-k router modules of `model`, in forward order (empty for a dense model)."""
    return [m for m in model.modules()
            if type(m).__name__.endswith("TopKRouter") and hasattr(m, "top_k") and hasattr(m, "num_experts")]


def replay_gates(router_logits: Tensor, experts: Tensor, *, normalize: bool) -> Tensor:
    """Gates [L, k] of the recorded `experts` [L, k] under the current router: softmax over all experts
    (in fp32, as the router does), gathered at the recorded ones, renormalised to sum 1 if `normalize`."""
    probs = torch.softmax(router_logits, dim=-1, dtype=torch.float)  # [L, E]
    gates = probs.gather(-1, experts)  # [L, k]
    if normalize:
        gates = gates / gates.sum(dim=-1, keepdim=True)
    return gates.to(router_logits.dtype)


def changed_decisions(current: Tensor, recorded: Tensor) -> Tensor:
    """[L] bool: the top-k expert *set* of a token differs (order within the top-k does not count)."""
    return (current.sort(dim=-1).values != recorded.sort(dim=-1).values).any(dim=-1)


SOURCES = (Replay.TRAINER, Replay.ROLLOUT)  # R2: the old policy's scoring forward; R3: the sampler's decoding



EXPERT_COUNTS = ("num_experts", "num_local_experts", "n_routed_experts")  # Qwen-MoE / OLMoE, Mixtral / GPT-OSS, DeepSeek


def declares_experts(model_cfg) -> bool:
    """Whether the policy `model_cfg` (cfg.model) names is a Mixture-of-Experts model, read from its config alone,
    before any weights load: the embedded model's num_experts, or a hub / local model's config.json. A config that
    cannot be read counts as MoE: loading the model then says why it cannot be read."""
    if model_cfg.name == "tiny":
        return bool(model_cfg.tiny.num_experts)
    try:
        config = AutoConfig.from_pretrained(model_cfg.name, trust_remote_code=model_cfg.trust_remote_code)
    except (OSError, ValueError):
        return True
    config = getattr(config, "text_config", None) or config
    return any(getattr(config, name, None) for name in EXPERT_COUNTS)


class DecodeRouting:
    """The experts every router of `model` chose during one decoding (the hf engine's lean loop): the prefill
    forward over [N, P] prompt tokens, then one [N, 1] forward per new token. `experts(width)` gives them as
    [N, width, layers, k] over the rollout's columns, -1 where nothing was forwarded."""

    def __init__(self, model: nn.Module):
        self.routers = find_routers(model)
        self._index = {id(r): i for i, r in enumerate(self.routers)}
        self._forwards: list[list[Tensor | None]] = []  # per forward: per router [N, s, k]
        self._n = 0

    def __enter__(self) -> DecodeRouting:
        self._hooks = [r.register_forward_hook(self._hook) for r in self.routers]
        return self

    def __exit__(self, *exc) -> None:
        for h in self._hooks:
            h.remove()

    def next_forward(self, n: int) -> None:
        """The next model forward covers `n` rows."""
        self._n = n
        self._forwards.append([None] * len(self.routers))

    def experts(self, width: int) -> Tensor:
        """[N, width, layers, k] long: column c holds the experts of the forward that read token c."""
        cols = [torch.stack(f, dim=2) for f in self._forwards]  # each [N, s, layers, k]
        seen = torch.cat(cols, dim=1)[:, :width]
        missing = width - seen.shape[1]
        return torch.nn.functional.pad(seen, (0, 0, 0, 0, 0, missing), value=-1)

    def _hook(self, router: nn.Module, args, output):
        experts = output[2]  # [L, k] over the forward's flattened tokens
        self._forwards[-1][self._index[id(router)]] = experts.detach().view(self._n, -1, experts.shape[-1]).clone()


class RoutingRecorder:
    """Records, compares and optionally replays expert choices over one rollout batch (see module doc).
    `source`: whose experts are replayed and compared with, the trainer's old-policy forward (R2) or the
    sampler's decoding (R3, the rollout's `routing`)."""

    def __init__(self, model: nn.Module, *, replay: bool, source: str = Replay.TRAINER):
        if source not in SOURCES:
            raise ValueError(f"unknown routing source {source!r}; known: {', '.join(SOURCES)}")
        self.routers = find_routers(model)
        if replay and not self.routers:  # the config declared experts (preflight) but no router here can be hooked
            raise GspoError(f"algo.routing_replay: {type(model).__name__} declares experts, but none of its modules is "
                            "a top-k router Routing Replay can hook (transformers' *TopKRouter)")
        self.replay, self.source = replay, source
        self._mode = "off"
        self._index = {id(r): i for i, r in enumerate(self.routers)}
        self._recorded: list[Tensor] = []  # per router: [N, S, k] expert ids of the rollout batch
        self._attended: Tensor | None = None  # [N, S] the rollout's attention mask
        self._sel: tuple[Tensor | slice, slice] = (slice(None), slice(None))
        self._changed = self._total = None
        self._hooks = [r.register_forward_hook(self._hook) for r in self.routers]

    @property
    def is_moe(self) -> bool:
        return bool(self.routers)

    def start_batch(self, attention_mask: Tensor, sampled: Tensor | None = None) -> None:
        """A new rollout batch [N, S]: forget what was recorded for the previous one. R3: `sampled`, the
        rollout's routing [N, S, layers, k], is what is replayed."""
        n, s = attention_mask.shape
        k = self.routers[0].top_k if self.routers else 0
        if self.source == Replay.ROLLOUT:
            if sampled is None:
                raise ValueError("routing replay from the rollout needs the sampler's experts (rollout.routing)")
            self._recorded = [sampled[:, :, i].to(attention_mask.device) for i in range(len(self.routers))]
        else:
            self._recorded = [torch.zeros(n, s, k, dtype=torch.long, device=attention_mask.device)
                              for _ in self.routers]
        self._attended = attention_mask.bool()
        self._changed = torch.zeros((), device=attention_mask.device)
        self._total = torch.zeros((), device=attention_mask.device)

    @contextmanager
    def recording(self, rows: slice):
        """Forwards inside (the old log-probs' scoring) record the experts of rollout rows `rows` (all columns);
        R3: they replay the sampler's instead, uncounted."""
        with self._in("record" if self.source == Replay.TRAINER else "replay", (rows, slice(None))):
            yield

    def updating(self, rows: Tensor, cols: slice) -> None:
        """Forwards from now on (until the next call or `stop`) cover rollout rows `rows`, columns `cols`."""
        self._mode, self._sel = "update", (rows, cols)

    def stop(self) -> None:
        self._mode = "off"

    def share(self, world) -> None:
        """[distributed] After a scoring pass dealt across ranks: every rank's recorded rows on every rank
        (each rank recorded its chunks into zeros). R3's came whole with the rollout: nothing to share."""
        if self.source == Replay.TRAINER:
            distributed.sum_tensors(self._recorded, world)

    def metrics(self, world=None) -> dict[str, Tensor]:
        """moe/routing_changed_frac (share of attended token-layer decisions whose top-k set changed
        since the old policy, over the step's update forwards) and moe/load_max (the most loaded
        expert's share of the old policy's routed slots times the number of experts, mean over layers:
        1 is perfectly balanced, num_experts is everything on one expert)."""
        if not self.routers:
            return {}
        if world is not None:  # [distributed] the counts of every rank's update forwards
            distributed.sum_tensors([self._changed, self._total], world)
        return {ROUTING_CHANGED: self._changed / self._total.clamp(min=1),
                LOAD_MAX: torch.stack([self._load_max(i) for i in range(len(self.routers))]).mean()}

    def remove(self) -> None:
        for h in self._hooks:
            h.remove()

    def _load_max(self, layer: int) -> Tensor:
        experts = self._recorded[layer]  # [N, S, k]
        n_experts = self.routers[layer].num_experts
        # padding routes nowhere; R3's unforwarded positions (-1) count nowhere either
        weight = (self._attended.unsqueeze(-1).expand(experts.shape) & (experts >= 0)).float()
        counts = torch.zeros(n_experts, device=experts.device).scatter_add_(0, experts.clamp(min=0).flatten(),
                                                                             weight.flatten())
        return counts.max() / counts.sum().clamp(min=1) * n_experts

    @contextmanager
    def _in(self, mode: str, sel):
        self._mode, self._sel = mode, sel
        try:
            yield
        finally:
            self._mode = "off"

    def _hook(self, router: nn.Module, args, output):
        if self._mode == "off":
            return None
        layer = self._index[id(router)]
        logits, _, experts = output  # [L, E], [L, k], [L, k] over the forward's flattened tokens
        rows, cols = self._sel
        if self._mode == "record":
            store = self._recorded[layer]
            store[rows] = experts.view(-1, store.shape[1], store.shape[2])
            return None
        recorded = self._recorded[layer][rows][:, cols].reshape(experts.shape)
        known = recorded[:, 0] >= 0  # [L] R3: -1 where the sampler forwarded nothing; the router keeps its choice
        recorded = torch.where(known.unsqueeze(-1), recorded, experts)
        if self._mode == "update":
            attended = self._attended[rows][:, cols].reshape(-1) & known
            self._changed += (changed_decisions(experts, recorded) & attended).sum()
            self._total += attended.sum()
        if not self.replay:
            return None
        gates = replay_gates(logits, recorded, normalize=getattr(router, "norm_topk_prob", True))
        return logits, gates, recorded
