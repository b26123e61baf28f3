"""What an engine returns (`Rollout`), its masks, and the per-row sampler both engines' rows are drawn with;
the engines themselves are hf_engine.py and vllm_engine.py.

A completion's mask covers every generated token up to and including its first end-of-sequence token;
what comes after is padding. The mask is never derived by comparing tokens with the pad id, because
many tokenizers (Qwen's among them) pad with their end-of-sequence token, and masking every eos would
hide the real end of each answer from the loss (tiny-grpo's bug).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from transformers import LogitsProcessor

from gspo.trainer.model.logprobs import sampling_logits


@dataclass
class Rollout:
    """One batch of sampled completions. N sequences, P prompt tokens (left-padded), T completion tokens."""

    input_ids: torch.Tensor  # [N, P+T] prompt then completion
    attention_mask: torch.Tensor  # [N, P+T] 1 on real prompt tokens and on the completion up to its eos
    completion_mask: torch.Tensor  # [N, T] float, 1 up to and including the first eos
    texts: list[str]  # decoded completions, special tokens removed
    truncated: torch.Tensor  # [N] bool: no eos within max_new_tokens
    engine_logp: torch.Tensor | None = None  # [N, T] the sampler's log-probs of the chosen tokens
    engine_entropy: torch.Tensor | None = None  # [N, T] the sampler's entropy at each completion position
    routing: torch.Tensor | None = None  # [N, P+T, layers, k] MoE: the experts the sampler chose per token, -1 where none (R3)

    @property
    def n_completion(self) -> int:
        return self.completion_mask.shape[1]

    def to(self, device: torch.device) -> Rollout:
        """The same rollout with every tensor on `device` (an engine may build it elsewhere: vLLM on the CPU)."""
        move = {f.name: getattr(self, f.name).to(device) for f in dataclasses.fields(self)
                if isinstance(getattr(self, f.name), torch.Tensor)}
        return dataclasses.replace(self, **move)

    def select(self, rows: list[int]) -> Rollout:
        """The rollout's rows `rows`, in that order (widths unchanged)."""
        index = torch.tensor(rows, dtype=torch.long, device=self.completion_mask.device)
        pick = {f.name: getattr(self, f.name)[index] for f in dataclasses.fields(self)
                if isinstance(getattr(self, f.name), torch.Tensor)}
        return dataclasses.replace(self, texts=[self.texts[i] for i in rows], **pick)


def eos_ids_of(model, tokenizer) -> list[int]:
    """Every id that ends a completion: the tokenizer's eos and the model's generation eos ids (Qwen3's
    generation config lists both <|im_end|> and <|endoftext|>). Every engine stops on this set."""
    gen_eos = getattr(model.generation_config, "eos_token_id", None)
    ids = {tokenizer.eos_token_id} | set(gen_eos if isinstance(gen_eos, list) else [gen_eos])
    return sorted(i for i in ids if i is not None)


def completion_mask_from_eos(completion: torch.Tensor, eos_ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """[N, T] token ids -> (mask [N, T] float with 1 up to and including the first eos, truncated [N])."""
    is_eos = torch.isin(completion, torch.tensor(eos_ids, device=completion.device))
    seen_before = (is_eos.long().cumsum(-1) - is_eos.long()) > 0  # an eos occurred strictly earlier
    mask = (~seen_before).float()
    return mask, ~is_eos.any(-1)


def _int64(c: int) -> int:
    """A 64-bit constant as the signed value torch's int64 holds (arithmetic wraps modulo 2**64)."""
    return c - (1 << 64) if c >= 1 << 63 else c


_GOLDEN, _MIX1, _MIX2 = 0x9E3779B97F4A7C15, _int64(0xBF58476D1CE4E5B9), _int64(0x94D049BB133111EB)


def _shr(x: torch.Tensor, k: int) -> torch.Tensor:
    """Logical right shift of int64 (torch's >> is arithmetic on signed integers)."""
    return (x >> k) & ((1 << (64 - k)) - 1)


def _mix(x: torch.Tensor) -> torch.Tensor:
    """SplitMix64's finaliser (Steele, Lea, Flood 2014), elementwise on int64."""
    x = (x ^ _shr(x, 30)) * _MIX1
    x = (x ^ _shr(x, 27)) * _MIX2
    return x ^ _shr(x, 31)


def row_uniforms(seeds: torch.Tensor, step: int | torch.Tensor) -> torch.Tensor:
    """[n] int64 seeds, a token index -> [n] float64 uniforms in [0, 1): a counter-based draw (SplitMix64
    of the seed's own stream at position `step`), so row i's draw at token t depends on (seeds[i], t) alone,
    whatever else is in the batch, on any device, in one vectorised op. `step` may be a 0-dim int64 tensor
    on the seeds' device (a captured decode step reads it there; its product wraps modulo 2**64 as the int's)."""
    if isinstance(step, torch.Tensor):
        offset = (step + 1) * _int64(_GOLDEN)
    else:
        offset = _int64((step + 1) * _GOLDEN % (1 << 64))
    x = _mix(_mix(seeds) + offset)
    return _shr(x, 11).double() * 2.0**-53


class RowSampler(LogitsProcessor):
    """Draws every row's next token from softmax(logits / T) with top-p (`sampling_logits`, the distribution
    the trainer scores) by the inverse CDF at the row's own uniform (`row_uniforms` of its seed `seeds[i]`
    and the token index); returns scores that keep only the drawn token, so transformers' greedy search
    picks it. A row's completion thus depends on its seed and its prompt alone, not on which rows share its
    batch, its process or its rank (vLLM's per-request seeds give its engine the same property)."""

    def __init__(self, seeds: list[int], device: torch.device, *, temperature: float, top_p: float):
        self.seeds = torch.tensor(seeds, dtype=torch.long, device=device)
        self.temperature, self.top_p = temperature, top_p
        self.step = 0  # the next token's index: the lean loop and generate both ask once per token

    def draw(self, probs: torch.Tensor, step: torch.Tensor | None = None) -> torch.Tensor:
        """[n, V] probabilities -> [n] token ids: the first token whose cumulative probability exceeds the
        row's uniform (a zero-probability token, outside the nucleus, is never the first). The token index is
        the sampler's own count, or `step` (a 0-dim device tensor, which a captured decode step advances)."""
        cdf = probs.float().cumsum(-1)  # [n, V] fp32: a float64 cumsum costs ~13x more over a 32k vocabulary
        total = cdf[:, -1]
        # strictly below the total, so the token found has probability > 0 even where rounding reaches it
        uniform = row_uniforms(self.seeds, self.step if step is None else step).float()
        u = torch.minimum(uniform * total, torch.nextafter(total, total.new_zeros(())))
        if step is None:
            self.step += 1
        return torch.searchsorted(cdf, u.unsqueeze(-1), right=True).squeeze(-1)  # [n]

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(sampling_logits(scores.float(), self.temperature, self.top_p), dim=-1)  # [n, V]
        chosen = self.draw(probs).unsqueeze(-1)  # [n, 1]
        return torch.full_like(scores, float("-inf")).scatter_(-1, chosen, 0.0)


def concat_rollouts(parts: list[Rollout], pad_id: int) -> Rollout:
    """Join rollouts whose prompt and completion widths differ: prompts pad left, completions right."""
    p = max(r.input_ids.shape[1] - r.n_completion for r in parts)
    t = max(r.n_completion for r in parts)

    def fit(x: torch.Tensor, n_prompt: int, value) -> torch.Tensor:
        left, right = x[:, :n_prompt], x[:, n_prompt:]
        left = torch.nn.functional.pad(left, (p - left.shape[1], 0), value=value)
        right = torch.nn.functional.pad(right, (0, t - right.shape[1]), value=value)
        return torch.cat([left, right], dim=1)

    def pad_t(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.pad(x, (0, t - x.shape[1]))

    return Rollout(
        input_ids=torch.cat([fit(r.input_ids, r.input_ids.shape[1] - r.n_completion, pad_id) for r in parts]),
        attention_mask=torch.cat([fit(r.attention_mask, r.input_ids.shape[1] - r.n_completion, 0) for r in parts]),
        completion_mask=torch.cat([pad_t(r.completion_mask) for r in parts]),
        texts=[s for r in parts for s in r.texts],
        truncated=torch.cat([r.truncated for r in parts]),
        engine_logp=torch.cat([pad_t(r.engine_logp) for r in parts]) if parts[0].engine_logp is not None else None,
        engine_entropy=(torch.cat([pad_t(r.engine_entropy) for r in parts])
                        if parts[0].engine_entropy is not None else None),
        routing=(torch.cat([_fit_columns(r.routing, r.input_ids.shape[1] - r.n_completion, p, t) for r in parts])
                 if parts[0].routing is not None else None),
    )


def _fit_columns(routing: torch.Tensor, n_prompt: int, p: int, t: int) -> torch.Tensor:
    """[N, P+T, layers, k] -> [N, p+t, layers, k]: prompt columns padded left, completion right, with -1."""
    left, right = routing[:, :n_prompt], routing[:, n_prompt:]
    left = torch.nn.functional.pad(left, (0, 0, 0, 0, p - left.shape[1], 0), value=-1)
    right = torch.nn.functional.pad(right, (0, 0, 0, 0, 0, t - right.shape[1]), value=-1)
    return torch.cat([left, right], dim=1)
