"""Benchmark (CPU or GPU, needs vLLM): the vLLM engine against the hf engine on the same model and prompts.

    python perf/vllm_rollouts.py speed --model default      # the embedded default (cold-start cache)
    python perf/vllm_rollouts.py speed --model random75m    # a random Qwen3-shaped ~75M model, no hub
    python perf/vllm_rollouts.py agree --n 2048             # log-prob mismatch fp32/bf16, sampler statistics

speed: seconds per rollout batch (train.prompts_per_step x train.group_size completions of the arith task's
prompts, rollout.max_new_tokens each at most) for each engine, `--repeats` batches after one warm-up batch,
and the cost of one weight sync (vLLM) per step. A random model never ends a completion early, so both
engines decode the full budget: the same work. agree: the per-token gap between vLLM's log-probs of its own
samples and the trainer's scoring (`mismatch/*`, at rollout.vllm_dtype float32 and bfloat16), and the mean
log-prob and length of `--n` completions from each sampler on fixed seeds (same distribution, not the same
draws). Prints one JSON object; `--out` writes it too.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time


def _setup(model_name: str, overrides: list[str]):
    from gspo.conf import compose_config
    from gspo.evals.arith import ALPHABET
    from gspo.trainer.model.models import build_char_tokenizer, build_tiny_qwen3
    from gspo.trainer.policy import load_policy
    from gspo.trainer.step.sampling import format_prompts
    from gspo.trainer.tasks.registry import build_task

    cfg = compose_config(["rollout=vllm", "algo.old_logp_source=engine", *overrides])
    if model_name == "default":
        model, tok = load_policy(cfg, log=lambda _m: None)
    else:  # ~75M parameters: 12 layers, hidden 768, MLP 2048, 12 heads of 64, 4 KV heads (a Qwen3 shape)
        tok = build_char_tokenizer(ALPHABET)
        model = build_tiny_qwen3(len(tok), hidden_size=768, num_layers=12, intermediate_size=2048, num_heads=12,
                                 num_kv_heads=4, head_dim=64, seed=0, max_positions=512)
    model.eval()
    task = build_task(cfg.task)
    n = cfg.train.prompts_per_step
    prompts = [p for p in format_prompts(tok, task.eval_items[:n], chat=False) for _ in range(cfg.train.group_size)]
    return cfg, model, tok, prompts


def _hf(cfg, model, tok, **kw):
    from gspo.trainer.engines.hf_engine import HFEngine

    r = cfg.rollout
    return HFEngine(model, tok, temperature=r.temperature, top_p=r.top_p, max_new_tokens=r.max_new_tokens,
                    batch_size=r.batch_size, want_logprobs=True, sampler=r.sampler, **kw)


def _vllm(cfg, model, tok):
    from gspo.trainer.engines.vllm_engine import VLLMEngine

    return VLLMEngine(cfg, model, tok, want_logprobs=True)  # algo.old_logp_source=engine, as the hf arm


def _timed(engine, prompts, repeats: int) -> dict:
    engine.generate(prompts, seed=999)  # warm-up
    times, tokens = [], []
    for i in range(repeats):
        t = time.perf_counter()
        r = engine.generate(prompts, seed=i * len(prompts))
        times.append(time.perf_counter() - t)
        tokens.append(int(r.completion_mask.sum()))
    return {"seconds_per_batch": times, "completion_tokens": tokens, "mean_s": sum(times) / len(times)}


def speed(args) -> dict:
    import torch

    cfg, model, tok, prompts = _setup(args.model, args.override)
    n_params = sum(p.numel() for p in model.parameters())
    out = {"model": args.model, "parameters": n_params, "completions_per_batch": len(prompts),
           "max_new_tokens": cfg.rollout.max_new_tokens, "torch_threads": torch.get_num_threads()}
    out["load_before_hf"] = os.getloadavg()
    out["hf"] = _timed(_hf(cfg, model, tok), prompts, args.repeats)
    t = time.perf_counter()
    engine = _vllm(cfg, model, tok)
    out["vllm_startup_s"] = time.perf_counter() - t
    out["load_before_vllm"] = os.getloadavg()
    out["vllm"] = _timed(engine, prompts, args.repeats)
    syncs = []
    for _ in range(args.repeats):
        t = time.perf_counter()
        engine.sync_weights(model)
        syncs.append(time.perf_counter() - t)
    out["vllm_sync_s"] = syncs
    out["vllm_sync_mode"] = engine.sync_mode
    out["load_after"] = os.getloadavg()
    return out


def _sampler_stats(engine, model, prompts, n: int, *, trainer: bool) -> dict:
    """Mean per-token log-prob (the trainer's scoring of each sampler's tokens) and mean length over n completions."""
    import torch

    from gspo.trainer.model.logprobs import completion_logprobs

    logp_sum, tokens, lengths, gaps, seed = 0.0, 0, [], [], 0
    while len(lengths) < n:
        r = engine.generate(prompts, seed=seed)
        seed += len(prompts)
        with torch.no_grad():
            logp, _ = completion_logprobs(model, r.input_ids, r.attention_mask, r.n_completion, temperature=1.0)
        m = r.completion_mask
        logp_sum += float((logp * m).sum())
        tokens += int(m.sum())
        lengths += m.sum(-1).tolist()
        if r.engine_logp is not None:
            gaps.append(float(((logp - r.engine_logp).abs() * m).sum() / m.sum()))
    return {"completions": len(lengths), "mean_token_logp": logp_sum / tokens, "mean_length": sum(lengths) / len(lengths),
            "length_sd": float(torch.tensor(lengths).std()),
            "mismatch_logp_abs_diff": (sum(gaps) / len(gaps)) if gaps and not trainer else None}


def agree(args) -> dict:
    import gc

    cfg, model, tok, prompts = _setup("default", args.override)
    out = {"model": "default", "load_before": os.getloadavg()}
    out["hf"] = _sampler_stats(_hf(cfg, model, tok), model, prompts, args.n, trainer=True)
    for dtype in ("float32", "bfloat16"):  # a second engine in one process: recorded as an error if vLLM refuses it
        cfg.rollout.vllm_dtype = dtype
        try:
            engine = _vllm(cfg, model, tok)
            out[f"vllm_{dtype}"] = _sampler_stats(engine, model, prompts,
                                                  args.n if dtype == "float32" else len(prompts) * 2, trainer=False)
        except Exception as e:  # noqa: BLE001 - a benchmark reports what failed and goes on
            out[f"vllm_{dtype}"] = {"error": f"{type(e).__name__}: {e}"[:500]}
        engine = None
        gc.collect()
    out["load_after"] = os.getloadavg()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["speed", "agree"])
    ap.add_argument("--model", default="default", choices=["default", "random75m"])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--n", type=int, default=2048, help="agree: completions per sampler")
    ap.add_argument("--override", nargs="*", default=[], help="config overrides, e.g. rollout.max_new_tokens=32")
    ap.add_argument("--out")
    args = ap.parse_args()
    result = {"machine": f"{platform.machine()} {os.cpu_count()} cores", **(speed(args) if args.what == "speed" else agree(args))}
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
