"""The embedded model's cold start: a short supervised fine-tune on worked solutions.

RL needs a policy that is sometimes right. The tiny Qwen3 starts from random weights, is fine-tuned on
worked arithmetic solutions, and the fine-tune stops as soon as its sampled accuracy on a dev set
(drawn from the training distribution, never from the held-out split) reaches a target, so RL starts
from a policy that is right some of the time, not most of it. The result is keyed by a hash of
everything that shapes it, built once per machine and cached (GSPO_CACHE or ~/.cache/gspo); the build
writes to a temporary folder and renames it into place, so an interrupted build leaves nothing behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from gspo.conf.schema import TinyModelConfig
from gspo.evals.arith import ALPHABET, ArithProblem, grade_arith, make_split
from gspo.trainer.engines.hf_engine import HFEngine
from gspo.trainer.model.models import build_char_tokenizer, build_tiny_qwen3, cache_root
from gspo.trainer.run.progress import Progress

FORMAT_VERSION = 1  # bump when the task text, tokenizer or recipe changes meaning


@dataclass(frozen=True)
class ColdStartSpec:
    """Everything that shapes a cold start: the embedded model's settings (`model.tiny`, the schema's
    TinyModelConfig, all but where it is cached) and the arithmetic task it learns."""

    tiny: TinyModelConfig
    min_digits: int
    max_digits: int
    ops: str
    max_new_tokens: int

    def fields(self) -> dict:
        """The settings as one flat dict (the cache key's, and coldstart.json's `spec`)."""
        tiny = {k: v for k, v in asdict(self.tiny).items() if k != "cache_dir"}
        return {**tiny, "min_digits": self.min_digits, "max_digits": self.max_digits, "ops": self.ops,
                "max_new_tokens": self.max_new_tokens}

    def key(self) -> str:
        fields = self.fields()
        if not self.tiny.num_experts:  # a dense model's key is what it was before MoE fields existed
            for name in ("num_experts", "experts_per_token", "moe_intermediate_size"):
                fields.pop(name)
        blob = json.dumps({"v": FORMAT_VERSION, **fields}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def cold_start_path(spec: ColdStartSpec, cache_dir: str | None,
                    log: Callable[[str], None] = print, *, progress: bool = False) -> Path:
    """The folder of the cold-started model for `spec`, building it first if it is not cached (`progress`:
    a bar to the step bound)."""
    final = cache_root(cache_dir) / "coldstart" / spec.key()
    if (final / "coldstart.json").exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    changed = settings_changed(spec, final.parent)
    if changed:  # otherwise a run whose task setting changed sits minutes in a build nobody asked for
        log(f"cold start: none cached for these settings ({changed}): building a new one")
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=final.parent))
    try:
        _build(spec, tmp, log, progress, final)
        try:
            os.replace(tmp, final)
        except OSError:  # another process finished the same build first: keep theirs
            if not (final / "coldstart.json").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


SPEC_KEYS = {"min_digits": "task.min_digits", "max_digits": "task.max_digits", "ops": "task.ops",
             "max_new_tokens": "rollout.max_new_tokens"}  # the rest of a spec's fields are model.tiny.<field>


def settings_changed(spec: ColdStartSpec, root: Path) -> str:
    """What differs between `spec` and the closest cold start cached under `root`, as config keys
    (`task.max_digits=4, cached 5`); empty when none is cached (the first build says so itself)."""
    cached = []
    for f in root.glob("*/coldstart.json"):
        try:
            cached.append(json.loads(f.read_text()).get("spec") or {})
        except (OSError, ValueError):
            continue
    mine = spec.fields()
    diffs = [[k for k in mine if k in c and c[k] != mine[k]] for c in cached]
    if not diffs:
        return ""
    i = min(range(len(diffs)), key=lambda j: len(diffs[j]))
    return ", ".join(f"{SPEC_KEYS.get(k, f'model.tiny.{k}')}={mine[k]}, cached {cached[i][k]}" for k in diffs[i][:3]) + (
        f" and {len(diffs[i]) - 3} more" if len(diffs[i]) > 3 else "")


def _build(spec: ColdStartSpec, out: Path, log: Callable[[str], None], progress: bool, final: Path) -> None:
    tokenizer = build_char_tokenizer(ALPHABET)
    model = build_tiny_qwen3(len(tokenizer), hidden_size=spec.tiny.hidden_size, num_layers=spec.tiny.num_layers,
                             intermediate_size=spec.tiny.intermediate_size, num_heads=spec.tiny.num_heads,
                             num_kv_heads=spec.tiny.num_kv_heads, seed=spec.tiny.sft_seed, num_experts=spec.tiny.num_experts,
                             experts_per_token=spec.tiny.experts_per_token,
                             moe_intermediate_size=spec.tiny.moe_intermediate_size)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"cold start: building the embedded model ({n_params / 1e6:.2f}M parameters) once per machine, cached in "
        f"{final} (GSPO_CACHE or model.tiny.cache_dir sets where); it stops when the dev sampled accuracy reaches "
        f"{spec.tiny.sft_target_accuracy:.2f} (checked every {spec.tiny.sft_eval_every} steps) or at step {spec.tiny.sft_max_steps}")
    split = {"min_digits": spec.min_digits, "max_digits": spec.max_digits, "ops": spec.ops, "seed": spec.tiny.sft_seed}
    data = make_split("sft", spec.tiny.sft_batch_size * spec.tiny.sft_max_steps, **split)
    dev = make_split("dev", 128, **split)
    engine = HFEngine(model, tokenizer, temperature=1.0, top_p=1.0, max_new_tokens=spec.max_new_tokens,
                      batch_size=len(dev))
    opt = torch.optim.AdamW(model.parameters(), lr=spec.tiny.sft_lr, weight_decay=0.0)
    t0, accuracy, step, recent = time.time(), 0.0, 0, []
    bar = Progress(spec.tiny.sft_max_steps, enabled=progress, label="cold start", stats=_sft_stats)
    with torch.random.fork_rng(), bar:
        say = bar.wrap(log)
        torch.manual_seed(spec.tiny.sft_seed)
        model.train()
        for step in range(1, spec.tiny.sft_max_steps + 1):
            batch = data[(step - 1) * spec.tiny.sft_batch_size : step * spec.tiny.sft_batch_size]
            loss = _sft_loss(model, tokenizer, batch)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            recent = [*recent[1 - spec.tiny.sft_eval_every :], loss.item()]
            mean_loss = sum(recent) / len(recent)
            # above this loss the sampled accuracy is ~0: sampling the dev set would only cost time
            if step % spec.tiny.sft_eval_every == 0 and mean_loss < spec.tiny.sft_eval_max_loss:
                accuracy = _accuracy(engine, dev, seed=spec.tiny.sft_seed + step)
            bar.advance({"loss": mean_loss, "accuracy": accuracy})  # the bar shows this step's check
            if step % spec.tiny.sft_eval_every:
                continue
            say(f"cold start: step {step} loss {mean_loss:.3f} dev sampled accuracy {accuracy:.2f} (stops at "
                f"{spec.tiny.sft_target_accuracy:.2f}; sampled once the loss is below {spec.tiny.sft_eval_max_loss})")
            if accuracy >= spec.tiny.sft_target_accuracy:
                break
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    info = {"steps": step, "dev_sampled_accuracy": accuracy, "seconds": round(time.time() - t0, 1),
            "parameters": n_params, "spec": spec.fields(), "format_version": FORMAT_VERSION}
    (out / "coldstart.json").write_text(json.dumps(info, indent=2))
    log(f"cold start: done in {info['seconds']} s after {step} steps (dev sampled accuracy {accuracy:.2f})")


def _sft_stats(row: dict) -> str:
    return f"loss {row.get('loss', float('nan')):.3f}  dev sampled accuracy {row.get('accuracy', 0.0):.2f}"


def _sft_loss(model, tokenizer, batch: list[ArithProblem]) -> torch.Tensor:
    """Cross-entropy on the response tokens (and the end-of-sequence token), not on the prompt."""
    rows, labels = [], []
    for p in batch:
        prompt = tokenizer(p.prompt, add_special_tokens=False).input_ids
        answer = tokenizer(p.solution, add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
        rows.append(prompt + answer)
        labels.append([-100] * len(prompt) + answer)
    width = max(map(len, rows))
    ids = torch.tensor([r + [tokenizer.pad_token_id] * (width - len(r)) for r in rows])  # [B, L] right-padded
    lab = torch.tensor([r + [-100] * (width - len(r)) for r in labels])
    lengths = torch.tensor([len(r) for r in rows])
    attention_mask = (torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)).long()
    return model(input_ids=ids, attention_mask=attention_mask, labels=lab).loss


def _accuracy(engine: HFEngine, problems: list[ArithProblem], *, seed: int) -> float:
    out = engine.generate([p.prompt for p in problems], seed=seed)
    return sum(grade_arith(t, p.gold) for t, p in zip(out.texts, problems, strict=True)) / len(problems)
