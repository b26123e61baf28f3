"""Benchmark (CUDA): peak GPU memory of one policy forward+backward, with and without gradient checkpointing.

The model is randomly initialised in Qwen3-0.6B's shape (28 layers, hidden 1024, vocabulary 151,936),
in training mode as the update runs it, under autocast at the given precision; the log-probs come from
trainer.logprobs (chunked LM head). Reported: peak memory allocated above the weights and gradients'
baseline, in GiB, and the time of the forward+backward.

    python perf/checkpointing_memory.py                  # N=8 sequences, 64 prompt + 512 completion tokens
    python perf/checkpointing_memory.py --n 16 --t 1024 --precision bf16
"""

from __future__ import annotations

import argparse
import json
import time


def measure(*, checkpointing: bool, n: int, t: int, precision: str = "bf16", dtype: str = "float32") -> dict:
    import torch

    from gspo.trainer.model.logprobs import completion_logprobs
    from gspo.trainer.model.models import DTYPES, QWEN3_0_6B, build_tiny_qwen3
    from gspo.trainer.model.precision import Precision

    q, device = QWEN3_0_6B, torch.device("cuda")
    model = build_tiny_qwen3(q["vocab_size"], hidden_size=q["hidden_size"], num_layers=q["num_layers"],
                             intermediate_size=q["intermediate_size"], num_heads=q["num_heads"],
                             num_kv_heads=q["num_kv_heads"], head_dim=q["head_dim"], seed=0, max_positions=4096)
    model.to(device=device, dtype=DTYPES[dtype])
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.config.use_cache = False
    model.train()
    prec = Precision(model, precision, device)
    ids = torch.randint(0, q["vocab_size"], (n, 64 + t), device=device, generator=torch.Generator(device).manual_seed(0))
    mask = torch.ones_like(ids)
    for p in model.parameters():  # gradients allocated up front: the baseline holds weights and gradients
        p.grad = torch.zeros_like(p)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    with prec.autocast():
        logp, _ = completion_logprobs(model, ids, mask, t, chunk=1024)
    logp.sum().backward()
    torch.cuda.synchronize()
    return {"checkpointing": checkpointing, "n": n, "t": t, "precision": precision, "dtype": dtype,
            "peak_above_base_gib": (torch.cuda.max_memory_allocated() - base) / 2**30,
            "seconds": time.perf_counter() - t0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--t", type=int, default=512)
    ap.add_argument("--precision", default="bf16", choices=["fp32", "bf16", "fp16"])
    args = ap.parse_args()
    for checkpointing in (False, True, False, True):  # twice: the first pair warms the kernels up
        print(json.dumps(measure(checkpointing=checkpointing, n=args.n, t=args.t, precision=args.precision)), flush=True)


if __name__ == "__main__":
    main()
