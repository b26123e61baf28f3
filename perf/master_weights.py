"""Benchmark: how much of a bf16-stored model 10 AdamW steps at lr 1e-6 change, with and without fp32 masters.

A randomly initialised model of Qwen3-0.6B's shape (stored in bfloat16) takes 10 optimizer steps on one
fixed batch (the gradient of the mean log-prob of random tokens, under bf16 autocast). Reported: the
share of stored parameters that differ from their initial value, and of the fp32 masters when present.

    python perf/master_weights.py            # on CUDA when available, else the CPU (slow)
"""

from __future__ import annotations

import json

import torch

from gspo.trainer.model.logprobs import completion_logprobs
from gspo.trainer.model.models import QWEN3_0_6B, build_tiny_qwen3
from gspo.trainer.model.precision import Precision


def changed_share(*, masters: bool, steps: int = 10, lr: float = 1e-6) -> dict:
    q, device = QWEN3_0_6B, torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = build_tiny_qwen3(q["vocab_size"], hidden_size=q["hidden_size"], num_layers=q["num_layers"],
                             intermediate_size=q["intermediate_size"], num_heads=q["num_heads"],
                             num_kv_heads=q["num_kv_heads"], head_dim=q["head_dim"], seed=0)
    model.to(device=device, dtype=torch.bfloat16).train()
    initial = [p.detach().clone() for p in model.parameters()]
    precision = Precision(model, "bf16", device)
    params = precision.master if masters else list(model.parameters())
    optimizer = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.99), weight_decay=0.0)
    ids = torch.randint(0, q["vocab_size"], (4, 96), device=device, generator=torch.Generator(device).manual_seed(0))
    for _ in range(steps):
        with precision.autocast():
            logp, _ = completion_logprobs(model, ids, torch.ones_like(ids), 64)
        (-logp.mean()).backward()
        if masters:
            precision.step(optimizer, max_grad_norm=1e9)
        else:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    n = sum(p.numel() for p in initial)
    stored = sum((p.detach() != p0).sum().item() for p, p0 in zip(model.parameters(), initial, strict=True))
    out = {"masters": masters, "steps": steps, "lr": lr, "device": device.type, "stored_changed_share": stored / n}
    if masters:
        master = sum((m != p0.float()).sum().item() for m, p0 in zip(precision.master, initial, strict=True))
        out["master_changed_share"] = master / n
    return out


if __name__ == "__main__":
    for masters in (False, True):
        print(json.dumps(changed_share(masters=masters)), flush=True)
