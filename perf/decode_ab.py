"""A/B of the hf engine's lean sampler in one process: ms per decode step of the growing cache (kv_cache=dynamic),
the fixed-shape cache (static; a CUDA graph per step on CUDA), and optionally the engine of another git revision
(`--before REV`: its hf_engine.py loaded beside this one), interleaved round by round so that other load on the
machine falls on every arm alike.

    python perf/decode_ab.py                                  # the embedded model's shape, CPU, 128 rows x 64 tokens
    python perf/decode_ab.py --before main --rounds 7
    python perf/decode_ab.py --device cuda --shape qwen3-0.6b --dtype bfloat16 --max-new-tokens 512 --hf

`--hf` adds transformers' own `generate` (sampling, every row to max_new_tokens) with its default dynamic cache
and with `cache_implementation="static"` (which compiles its decode step: the warm-up round pays that), the
settings TRL's GRPOTrainer exposes.

The model is randomly initialised (weights do not change the arithmetic) and no token ends a completion, so
every row decodes `--max-new-tokens` tokens. Also prints whether the arms drew the same tokens.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

from gspo.evals.arith import ALPHABET
from gspo.trainer.engines.hf_engine import HFEngine
from gspo.trainer.model.models import QWEN3_0_6B as Q
from gspo.trainer.model.models import build_char_tokenizer, build_tiny_qwen3

SHAPES = {  # build_tiny_qwen3's arguments: the embedded cold start's (conf/schema.py TinyConfig), Qwen3-0.6B's
    "embedded": {"hidden_size": 128, "num_layers": 4, "intermediate_size": 512, "num_heads": 4, "num_kv_heads": 2},
    "qwen3-0.6b": {"hidden_size": Q["hidden_size"], "num_layers": Q["num_layers"], "head_dim": Q["head_dim"],
                   "intermediate_size": Q["intermediate_size"], "num_heads": Q["num_heads"],
                   "num_kv_heads": Q["num_kv_heads"], "vocab": Q["vocab_size"]},
}


def engine_class_at(rev: str):
    """HFEngine as hf_engine.py at git revision `rev` defines it (imported beside the current one)."""
    source = subprocess.run(["git", "show", f"{rev}:trainer/engines/hf_engine.py"], capture_output=True, text=True,
                            check=True).stdout
    path = os.path.join(tempfile.mkdtemp(), "hf_engine_before.py")
    with open(path, "w") as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location("hf_engine_before", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.HFEngine


def _hf_generate(model, tokenizer, enc, args, cache: str, seed: int) -> None:
    """transformers' sampling `generate`, every row to max_new_tokens, with its dynamic or static cache."""
    torch.manual_seed(seed)
    static = {"cache_implementation": "static"} if cache == "static" else {}
    with torch.no_grad():  # as generate itself runs (its compiled static step under inference mode is untested)
        model.generate(**enc, do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=args.max_new_tokens,
                       min_new_tokens=args.max_new_tokens, pad_token_id=tokenizer.pad_token_id, **static)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="embedded", choices=sorted(SHAPES))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--rows", type=int, default=128)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--before", help="a git revision whose engine is a third arm (its own default cache)")
    ap.add_argument("--hf", action="store_true", help="also transformers' generate, dynamic and static cache")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    shape = dict(SHAPES[args.shape])
    tokenizer = build_char_tokenizer(ALPHABET, size=shape.pop("vocab", None))
    device = torch.device(args.device)
    model = build_tiny_qwen3(len(tokenizer), **shape, seed=0, max_positions=4096).to(device, getattr(torch, args.dtype)).eval()
    prompts = [f"{i % 97}+{(i * 7) % 1000}=" for i in range(args.rows)]  # widths vary: left padding
    opts = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": args.max_new_tokens, "batch_size": args.rows,
            "want_logprobs": True}
    arms = {"dynamic": HFEngine(model, tokenizer, kv_cache="dynamic", **opts),
            "static": HFEngine(model, tokenizer, kv_cache="static", **opts)}
    if args.before:
        arms[f"before ({args.before})"] = engine_class_at(args.before)(model, tokenizer, **opts)
    for engine in arms.values():
        engine.eos_ids = [-1]  # nothing ends a row: every arm decodes max_new_tokens tokens
    runs = {name: (lambda seed, e=engine: e.generate(prompts, seed=seed).input_ids) for name, engine in arms.items()}
    if args.hf:
        enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
        for cache in ("dynamic", "static"):
            runs[f"hf generate ({cache})"] = lambda seed, c=cache: _hf_generate(model, tokenizer, enc, args, c, seed)
    times: dict[str, list[float]] = {a: [] for a in runs}
    cpu: dict[str, list[float]] = {a: [] for a in runs}  # process CPU ms per step: less sensitive to other load
    tokens = {}
    for r in range(args.rounds + 1):  # round 0 warms up (allocator, capture, compile) and is not counted
        for name, run in (runs.items() if r % 2 else reversed(runs.items())):
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0, c0 = time.perf_counter(), time.process_time()
            out = run(r)
            if device.type == "cuda":
                torch.cuda.synchronize()
            if r:
                times[name].append((time.perf_counter() - t0) / args.max_new_tokens * 1e3)
                cpu[name].append((time.process_time() - c0) / args.max_new_tokens * 1e3)
            if name in arms:
                tokens[name] = out
    print(f"{args.shape} shape, {args.dtype}, {args.device}, {args.rows} rows x {args.max_new_tokens} new tokens, "
          f"{args.threads} threads; ms per decode step (whole generate / tokens), median of {args.rounds} "
          f"interleaved rounds; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for name, ms in times.items():
        print(f"  {name:>22}: {statistics.median(ms):8.3f} ms/step, best {min(ms):.3f}  (rounds: {', '.join(f'{m:.2f}' for m in ms)}); "
              f"{args.rows * 1e3 / statistics.median(ms):,.0f} tokens/s; process CPU {statistics.median(cpu[name]):.3f} "
              f"ms/step")
    first = next(iter(tokens.values()))
    same = all(torch.equal(first, t) for t in tokens.values())
    print(f"  same tokens in every gspo arm (last round's seed): {same}")
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
