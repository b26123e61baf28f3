"""A/B of the hf engine's lean sampler in one process: ms per decode step of the growing cache (kv_cache=dynamic),
the fixed-shape cache (static: attention in growing windows, ended rows compacted out, a CUDA graph per (rows,
width) on CUDA), the fixed-shape cache reading its whole bucket and every row (static-bucket: issue 43's decoder),
and optionally the engine of another git revision (`--before REV`: its hf_engine.py loaded beside this one),
interleaved round by round so that other load on the machine falls on every arm alike.

    python perf/decode_ab.py                                  # the embedded model's shape, CPU, 128 rows x 64 tokens
    python perf/decode_ab.py --before main --rounds 7
    python perf/decode_ab.py --device cuda --shape qwen3-0.6b --dtype bfloat16 --max-new-tokens 512 --hf
    python perf/decode_ab.py --arms static,static-bucket --rows 32 --max-new-tokens 512 --end-every 64

`--hf` adds transformers' own `generate` (sampling, every row to max_new_tokens) with its default dynamic cache
and with `cache_implementation="static"` (which compiles its decode step: the warm-up round pays that), the
settings TRL's GRPOTrainer exposes.

The model is randomly initialised (weights do not change the arithmetic) and no token ends a completion, so
every row decodes `--max-new-tokens` tokens; `--end-every L` makes every L-th token id an end of sequence
instead, so that with near-uniform random logits a row ends after ~L tokens and rows end at different steps
(what compaction is for). Prints whether the arms drew the same tokens, and for the static arms the KV positions
x rows their attention read per layer in the last round.
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


ARMS = {  # HFEngine's arguments per arm
    "dynamic": {"kv_cache": "dynamic"},
    "static": {"kv_cache": "static"},
    "static-bucket": {"kv_cache": "static", "window": None, "min_rows": None},
}


def _arguments() -> argparse.Namespace:
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
    ap.add_argument("--arms", default=",".join(ARMS), help=f"gspo arms, comma-separated, of {', '.join(ARMS)}")
    ap.add_argument("--end-every", type=int, default=0, help="every L-th token id ends a row (0: none does)")
    args = ap.parse_args()
    args.arms = args.arms.split(",")
    if not set(args.arms) <= set(ARMS):
        ap.error(f"--arms: one of {', '.join(ARMS)} each, not {args.arms}")
    if args.end_every and args.hf:
        ap.error("--end-every with --hf: transformers' arms decode every row to the end; run them without it")
    return args


def main() -> None:
    args = _arguments()
    torch.set_num_threads(args.threads)
    shape = dict(SHAPES[args.shape])
    tokenizer = build_char_tokenizer(ALPHABET, size=shape.pop("vocab", None))
    device = torch.device(args.device)
    model = build_tiny_qwen3(len(tokenizer), **shape, seed=0, max_positions=4096).to(device, getattr(torch, args.dtype)).eval()
    prompts = [f"{i % 97}+{(i * 7) % 1000}=" for i in range(args.rows)]  # widths vary: left padding
    opts = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": args.max_new_tokens, "batch_size": args.rows,
            "want_logprobs": True}
    arms = {name: HFEngine(model, tokenizer, **ARMS[name], **opts) for name in args.arms}
    if args.before:
        arms[f"before ({args.before})"] = engine_class_at(args.before)(model, tokenizer, **opts)
    for engine in arms.values():  # nothing ends a row (every arm decodes max_new_tokens), or every L-th id does
        engine.eos_ids = list(range(1, len(tokenizer), args.end_every)) if args.end_every else [-1]
    runs = {name: (lambda seed, e=engine: e.generate(prompts, seed=seed)) for name, engine in arms.items()}
    if args.hf:
        enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
        for cache in ("dynamic", "static"):
            runs[f"hf generate ({cache})"] = lambda seed, c=cache: _hf_generate(model, tokenizer, enc, args, c, seed)
    times: dict[str, list[float]] = {a: [] for a in runs}
    cpu: dict[str, list[float]] = {a: [] for a in runs}  # process CPU ms per step: less sensitive to other load
    tokens, decoded = {}, {}
    for r in range(args.rounds + 1):  # round 0 warms up (allocator, capture, compile) and is not counted
        for name, run in (runs.items() if r % 2 else reversed(runs.items())):
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0, c0 = time.perf_counter(), time.process_time()
            out = run(r)
            if device.type == "cuda":
                torch.cuda.synchronize()
            steps = out.n_completion if name in arms else args.max_new_tokens  # tokens decoded (all rows end)
            if r:
                times[name].append((time.perf_counter() - t0) / steps * 1e3)
                cpu[name].append((time.process_time() - c0) / steps * 1e3)
            if name in arms:
                tokens[name], decoded[name] = out.input_ids, steps
        # each round as it ends: a run stopped by a time limit (perf/gpu_check.sh's stages) keeps what it measured
        done = ", ".join(f"{n} {t[-1]:.3f} ms/step" for n, t in times.items()) if r else "warm-up done"
        print(f"round {r}: {done}", flush=True)
    _report(args, times, cpu, arms, decoded)
    first = next(iter(tokens.values()))
    same = all(torch.equal(first, t) for t in tokens.values())
    print(f"  same tokens in every gspo arm (last round's seed): {same}")
    sys.exit(0 if same else 1)


def _report(args, times: dict, cpu: dict, arms: dict, decoded: dict) -> None:
    ends = f" (every {args.end_every}th token id ends a row)" if args.end_every else ""
    print(f"{args.shape} shape, {args.dtype}, {args.device}, {args.rows} rows x {args.max_new_tokens} new tokens{ends}, "
          f"{args.threads} threads; ms per decode step (whole generate / tokens), median of {args.rounds} "
          f"interleaved rounds; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for name, ms in times.items():
        print(f"  {name:>22}: {statistics.median(ms):8.3f} ms/step, best {min(ms):.3f}  (rounds: {', '.join(f'{m:.2f}' for m in ms)}); "
              f"{args.rows * 1e3 / statistics.median(ms):,.0f} tokens/s; process CPU {statistics.median(cpu[name]):.3f} "
              f"ms/step")
    for name, engine in arms.items():
        if getattr(engine, "static", None) is not None:
            print(f"  {name:>22}: attention read {engine.static.reads:,} KV positions x rows per layer "
                  f"({decoded[name]} tokens; the whole bucket, every row: {args.rows} x {engine.static.capacity} "
                  f"per step)")


if __name__ == "__main__":
    main()
