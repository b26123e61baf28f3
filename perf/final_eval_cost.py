"""The compute a larger final held-out eval adds (issue 45): one run's final checkpoint evaluated on its held-out
problems at k = eval_k and at k = final_eval_k, interleaved, `--rounds` times each; process CPU seconds (less
moved by other processes than wall time on a shared machine) and wall seconds, with the load average.

    python perf/final_eval_cost.py <run dir> --ks 4 16 --rounds 2
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from omegaconf import OmegaConf

from gspo.conf.resume import saved_config
from gspo.trainer.engines.registry import make_engine
from gspo.trainer.evaluate import eval_task
from gspo.trainer.policy import load_policy
from gspo.trainer.run.rundir import RunDir
from gspo.trainer.run.seeds import step_seed
from gspo.trainer.step.sampling import format_prompts
from gspo.trainer.tasks.registry import build_task


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--ks", type=int, nargs="+", default=[4, 16])
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    cfg = saved_config(args.run, "the run")
    ckpt = RunDir(args.run).latest_checkpoint()
    model, tokenizer = load_policy(cfg, print, path=str(ckpt))
    engine = make_engine(cfg, model, tokenizer)
    task = build_task(cfg.task)
    prompts = format_prompts(tokenizer, task.eval_items, chat=cfg.model.chat_template)
    step = int(ckpt.name.split("_")[-1])
    print(f"{args.run} at {ckpt.name}: {len(prompts)} problems, {OmegaConf.select(cfg, 'rollout.max_new_tokens')} "
          f"new tokens at most, torch threads {os.environ.get('OMP_NUM_THREADS', 'default')}")
    for r in range(args.rounds):
        for k in args.ks:
            load, cpu, wall = os.getloadavg()[0], time.process_time(), time.perf_counter()
            out = eval_task(engine, task, prompts, seed=step_seed(cfg.seed, step, "eval"), greedy=True, k=k)
            print(f"round {r} k={k:>2}: cpu {time.process_time() - cpu:7.1f} s, wall {time.perf_counter() - wall:7.1f} s, "
                  f"accuracy {out.metrics['accuracy']:.4f}, load {load:.1f} -> {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
