"""Benchmark: per-token log-probs, chunked (trainer.logprobs) vs a full [N, T, V] log-softmax.

Prints peak resident memory and time of a forward+backward for each method, and of the no-grad scoring
pass that also returns the entropy (the old-log-prob pass: one output-layer matmul per chunk gives both),
each in a fresh process so the peaks do not mix; and the peak over the model body's own, relative to one
float32 [N, T, V] logits tensor. `--methods chunked,scoring` leaves the full method out (at N=16, T=1024
its three [N, T, V] tensors do not fit in 24 GB). The model is a random Qwen3-architecture transformer with Qwen's vocabulary size
(151,936), small elsewhere, so the LM head dominates as it does for real RL batches.

    python perf/logprobs.py                 # defaults: N=16 sequences, T=256 completion tokens
    python perf/logprobs.py --n 8 --t 512 --chunk 1024
    python perf/logprobs.py --n 16 --t 1024 --methods chunked,scoring   # the issue's memory figure
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time


def run(method: str, n: int, t: int, chunk: int, vocab: int, hidden: int) -> dict:
    import torch

    from gspo.trainer.model.logprobs import completion_logprobs
    from gspo.trainer.model.models import build_tiny_qwen3

    torch.manual_seed(0)
    model = build_tiny_qwen3(vocab, hidden_size=hidden, num_layers=2, intermediate_size=2 * hidden, num_heads=4,
                             num_kv_heads=2, seed=0, max_positions=t + 64)
    ids = torch.randint(0, vocab, (n, 32 + t))
    mask = torch.ones_like(ids)
    with torch.no_grad():  # the body's own peak (its activations), so that the rest is the log-prob's
        body = model.get_decoder()(input_ids=ids, attention_mask=mask).last_hidden_state
        del body
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    if method == "scoring":
        with torch.no_grad():
            logp, entropy = completion_logprobs(model, ids, mask, t, chunk=chunk, with_entropy=True)
    elif method == "chunked":
        logp, _ = completion_logprobs(model, ids, mask, t, chunk=chunk)
    else:
        logits = model(input_ids=ids, attention_mask=mask).logits[:, -t - 1 : -1].float()  # [N, T, V]
        logp = torch.log_softmax(logits, -1).gather(-1, ids[:, -t:].unsqueeze(-1)).squeeze(-1)
    if logp.requires_grad:
        logp.sum().backward()
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"method": method, "seconds": round(seconds, 2), "peak_extra_mb": round((peak - base) / 1024),
            "checksum": round(float(logp.sum()), 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--t", type=int, default=256)
    ap.add_argument("--chunk", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=151_936)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--methods", default="full,chunked,scoring")
    ap.add_argument("--method")
    args = ap.parse_args()
    if args.method:
        print(json.dumps(run(args.method, args.n, args.t, args.chunk, args.vocab, args.hidden)))
        return
    full = args.n * args.t * args.vocab * 4 / 2**20
    print(f"N={args.n} T={args.t} V={args.vocab} hidden={args.hidden} chunk={args.chunk}: "
          f"one float32 [N, T, V] tensor is {full:.0f} MB")
    for method in args.methods.split(","):
        out = subprocess.run([sys.executable, __file__, "--method", method, *sys.argv[1:]],
                             capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        what = "forward (no grad) + entropy" if method == "scoring" else "forward+backward"
        print(f"{r['method']:>8}: {r['seconds']:6.2f} s {what}, peak +{r['peak_extra_mb']} MB over the body's "
              f"= {r['peak_extra_mb'] / full:.3f} x the [N, T, V] logits, sum log p = {r['checksum']}")


if __name__ == "__main__":
    main()
