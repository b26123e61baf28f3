"""Run directories written by hand for report tests: what a finished run leaves (config.yaml, metrics.jsonl,
run.json), with metrics drawn from a seeded generator, so a report can be built in a second without
training. Real runs are in test_sweep_report.py (the `sweep_dir` fixture)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import yaml

ALGO = {"grpo": (0.2, 0.27, 0.002), "gspo": (3e-4, 4e-4, 0.25)}  # clip_low, clip_high, clipped-token fraction


def fake_run(root: Path, algo: str, seed: int, lr: float = 1e-4, steps: int = 12, eval_every: int = 4,
             level: float = 0.5, collapse_at: int | None = None) -> Path:
    """One finished run of `algo` at `seed`: held-out accuracy rises from 0.3 towards `level` (noise from the
    seed); a run with `collapse_at` falls to near zero from that step and says so in run.json."""
    rng = np.random.default_rng([seed, int(lr * 1e7), sum(map(ord, algo))])
    clip_low, clip_high, clip = ALGO[algo]
    run = root / f"{algo}-lr{lr:g}-s{seed}"
    run.mkdir(parents=True)
    config = {"algo": {"name": algo, "clip_low": clip_low, "clip_high": clip_high, "advantage": "group"},
              "model": {"name": "tiny"}, "task": {"name": "arith", "kind": "arith", "eval_size": 128},
              "train": {"steps": steps, "lr": lr, "minibatches": 4, "epochs": 1, "prompts_per_step": 16,
                        "group_size": 8, "eval_every": eval_every},
              "rollout": {"max_new_tokens": 64, "temperature": 1.0}, "seed": seed, "output_dir": str(root),
              "run_id": run.name, "logger": {"wandb": "disabled"}, "device": "cpu"}
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    rows = []
    for step in range(steps + 1):
        frac = step / steps
        broke = collapse_at is not None and step >= collapse_at
        acc = 0.01 + rng.uniform(0, 0.01) if broke else 0.3 + (level - 0.3) * frac + rng.normal(0, 0.04)
        row = {"step": step}
        if step % eval_every == 0:
            row |= {"eval/arith/accuracy": float(np.clip(acc, 0, 1)),
                    "eval/arith/accuracy_greedy": float(np.clip(acc + 0.2, 0, 1))}
        if step:
            row |= {"reward/mean": float(np.clip(acc + rng.normal(0, 0.08), 0, 1)),
                    "clip/token_frac": float(clip * rng.uniform(0.7, 1.3)), "clip/seq_frac": float(rng.uniform(0, 0.3)),
                    "completion/len_mean": float(40 + rng.normal(0, 2)), "policy/entropy": float(0.3 + rng.normal(0, 0.02)),
                    "policy/kl_old": float(1e-4 * rng.uniform(0.5, 2)), "optim/grad_norm": float(rng.uniform(0.5, 2)),
                    "time/step_s": float(rng.uniform(0.7, 1.0))}
        rows.append(row)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    status = {"run_id": run.name, "status": "finished", "step": steps, "host": "test", "cpus": 2, "wall_s": 10.0}
    if collapse_at is not None:
        status["collapsed"] = {"step": collapse_at, "reason": "held-out accuracy collapsed"}
    (run / "run.json").write_text(json.dumps(status))
    return run


def fake_compare(root: Path, seeds: int = 3) -> list[Path]:
    """GRPO and GSPO over `seeds` seeds at one learning rate."""
    return [fake_run(root, algo, s) for algo in ("grpo", "gspo") for s in range(seeds)]


def fake_lr_sweep(root: Path, lrs=(1e-4, 3e-4, 7e-4), seeds: int = 3) -> list[Path]:
    """GRPO and GSPO at each learning rate; GRPO collapses in every seed at the highest, GSPO in one."""
    runs = []
    for lr in lrs:
        for algo in ("grpo", "gspo"):
            for s in range(seeds):
                top = lr == max(lrs)
                collapse = 6 if top and (algo == "grpo" or s == 0) else None
                runs.append(fake_run(root, algo, s, lr=lr, collapse_at=collapse))
    return runs
