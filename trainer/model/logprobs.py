"""Per-token log-probabilities of given tokens without a full [N, T, V] log-softmax.

The model body runs once; the LM head, log-sum-exp and gather then run over chunks of tokens, each
chunk under activation checkpointing, so at most `chunk x V` logits are alive at a time in the forward
and the backward (Qwen's vocabulary has 152k entries: [N, T, V] float32 would dominate memory).

Scored distribution = sampled distribution: logits in fp32 (whatever the compute precision, so the
log-probs that enter a ratio are fp32), divided by the temperature, then cut to the top-p nucleus
exactly as transformers' TopPLogitsWarper cuts it, and renormalised. Tokens outside the nucleus get
a logit of -1e4 rather than -inf: probability exactly 0 in fp32, but a finite log-prob, so a token that
left the nucleus after an update gives a ratio of 0 instead of NaN.
"""

from __future__ import annotations

import os
import weakref
from pathlib import Path

import torch
from torch.utils.checkpoint import checkpoint

INDUCTOR_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"  # torch's own setting for where compiled kernels are kept
OUTSIDE_NUCLEUS = -1e4  # a logit whose exp underflows to exactly 0 next to any real logit
_COMPILED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> its compiled body
# A sharded model (trainer/parallel/fsdp.py) carries this method, registered with FSDP so that its hooks gather the
# root's weights (embeddings, output layer) around the whole computation, which calls the body and the
# output layer directly, not the model's forward
SHARDED_ENTRY = "gspo_completion_logprobs"


def compile_body(model: torch.nn.Module, cache_dir: Path | None = None) -> None:
    """Score `model` (here: completion_logprobs, the update's and the scoring pass's forwards) through a
    torch.compile'd copy of its decoder body, with dynamic shapes (every minibatch has its own width). The
    model itself, its state dict and generation are untouched; the same function, fused kernels.

    `cache_dir`: where torch keeps what it compiled (inductor's FX-graph and AOT-autograd caches, under
    cache_dir/inductor) unless TORCHINDUCTOR_CACHE_DIR says otherwise, so a model shape compiled once on a
    machine is read back by every later process (the runs of a sweep): on the embedded model the first
    two batches cost ~66 s more cold and ~16 s more warm (perf/compile_payback.py)."""
    if cache_dir is not None:
        os.environ.setdefault(INDUCTOR_CACHE_ENV, str(Path(cache_dir) / "inductor"))  # torch reads it lazily
    _COMPILED[model] = torch.compile(_decoder(model), dynamic=True)


def _decoder(model: torch.nn.Module) -> torch.nn.Module:
    return model.get_decoder() if hasattr(model, "get_decoder") else model.model


def sampling_logits(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """[*, V] raw logits -> logits (at least fp32) of the distribution the sampler draws from."""
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()  # log-sum-exp over 152k entries in half precision loses the tail
    logits = logits / temperature
    if top_p >= 1.0:
        return logits
    with torch.no_grad():
        # TopPLogitsWarper: drop the least likely tokens whose cumulative probability is <= 1 - top_p,
        # always keeping the most likely one
        ascending, order = torch.sort(logits, dim=-1)
        drop_sorted = ascending.softmax(-1).cumsum(-1) <= 1.0 - top_p
        drop_sorted[..., -1] = False
        drop = drop_sorted.scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, OUTSIDE_NUCLEUS)


def _chunk_logp(head: torch.nn.Module, hidden: torch.Tensor, targets: torch.Tensor, temperature: float,
                top_p: float, with_entropy: bool = False, entropy_grad: bool = False):
    """Log-probs of `targets` [chunk] and, with `with_entropy`, the entropies [chunk] (detached, or differentiable
    with `entropy_grad`: an entropy bonus), from one output-layer matmul: H = lse - sum_v p_v z_v, with
    p = exp(z - lse) of the same logits z."""
    logits = sampling_logits(head(hidden), temperature, top_p)  # [chunk, V]
    lse = torch.logsumexp(logits, dim=-1)
    logp = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - lse
    if not with_entropy:
        return logp
    if entropy_grad:
        # H = lse - sum_v softmax(z)_v z_v, its gradient through every logit
        return logp, lse - torch.linalg.vecdot(torch.softmax(logits, dim=-1), logits)
    with torch.no_grad():
        z, m = logits.detach(), lse.detach()
        entropy = m - torch.linalg.vecdot(torch.exp(z - m.unsqueeze(-1)), z)
    return logp, entropy


def completion_logprobs(model: torch.nn.Module, *args, **kwargs) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs of the last `n_completion` tokens of each row (`completion_logprobs_of`), through a sharded
    model's FSDP-registered entry where it has one."""
    entry = getattr(model, SHARDED_ENTRY, None)
    return entry(*args, **kwargs) if entry is not None else completion_logprobs_of(model, *args, **kwargs)


def completion_logprobs_of(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    n_completion: int,
    *,
    temperature: float = 1.0,
    top_p: float = 1.0,
    chunk: int = 1024,
    with_entropy: bool = False,
    entropy_grad: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs of the last `n_completion` tokens of each row.

    input_ids, attention_mask: [N, P+T] (prompt left-padded, completion right-padded); returns
    logp [N, T] (float32, differentiable) and, when asked, the sampling distribution's entropy [N, T]
    (detached; differentiable with `entropy_grad`, an entropy bonus's), both of the sampling distribution:
    temperature, then the top-p nucleus.
    """
    position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    body = _COMPILED.get(model)  # not `or`: a compiled module has no truth value (len() raises)
    if body is None:
        body = _decoder(model)
    hidden = body(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).last_hidden_state
    # the token at position j is predicted from the hidden state at j - 1
    h = hidden[:, -n_completion - 1 : -1, :]  # [N, T, H]
    targets = input_ids[:, -n_completion:]  # [N, T]
    n, t, d = h.shape
    flat_h, flat_t = h.reshape(n * t, d), targets.reshape(n * t)
    head = model.get_output_embeddings()
    pieces, ents = [], []
    for s in range(0, n * t, chunk):
        hs, ts = flat_h[s : s + chunk], flat_t[s : s + chunk]
        if torch.is_grad_enabled():
            out = checkpoint(_chunk_logp, head, hs, ts, temperature, top_p, with_entropy, entropy_grad,
                             use_reentrant=False)
        else:
            out = _chunk_logp(head, hs, ts, temperature, top_p, with_entropy, entropy_grad)
        if with_entropy:
            out, ent = out
            ents.append(ent)
        pieces.append(out)
    logp = torch.cat(pieces).view(n, t)
    entropy = torch.cat(ents).view(n, t) if with_entropy else None
    return logp, entropy
