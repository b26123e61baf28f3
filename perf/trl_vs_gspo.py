"""Benchmark: gspo's training loop against Hugging Face TRL's GRPOTrainer at identical work.

Both arms load the embedded cold-start model (trainer/coldstart.py, built once and cached), train it on the
same prompts of the arith task in the same order (B per rollout batch, G completions each), with the same
reward function, the same number of new tokens, M optimizer steps per rollout batch (each on 1/M of the
batch), AdamW at the same learning rate, fp32 on the CPU with the same number of threads, and no KL term.
Each arm runs in its own process (so its startup and peak RSS are its own); arms alternate, and each
process's first rollout batch is a warm-up that is not counted.

    pip install -e '.[bench]'
    python perf/trl_vs_gspo.py                          # GRPO and GSPO, 5 repeats, B=16 G=8 T=64 M=4
    python perf/trl_vs_gspo.py --algos gspo --repeats 7 --batches 3
    python perf/trl_vs_gspo.py --scaling --arms gspo    # s per rollout batch as G, B and T double
    python perf/trl_vs_gspo.py --device cuda --model qwen3-0.6b-random --repeats 3   # on a GPU
    python perf/trl_vs_gspo.py --device cuda --model qwen3-0.6b-random --precision bf16 --arms gspo,trl,trl-static \
        --algos gspo --repeats 2 --batches 2 --threads 8 --max-new-tokens 512      # perf/gpu_check.sh's

`--precision bf16`: gspo stores bf16 weights and keeps fp32 master weights (model.dtype=bfloat16,
train.precision=bf16), TRL keeps fp32 weights under bf16 autocast (GRPOConfig bf16=True); fp32 by default.
Arm `trl-static` is TRL at its best Hugging Face setting, `cache_implementation="static"` (transformers then
compiles its decode step); `trl` is its default dynamic cache.

`--model qwen3-0.6b-random` trains a randomly initialised model of Qwen3-0.6B's shape (built in-process, no
hub; a character tokenizer padded to Qwen3's vocabulary) instead of the embedded cold start: its samples are
noise and its rewards 0, but the arithmetic of generation and update is that of the real model.

Printed per arm: seconds per rollout batch and per optimizer step, the split (generation, grading, old
log-probs, update, overhead), generated tokens/s, peak RSS, startup, the first (warm-up) batch's seconds (where a compile is paid); then
per arm ms per decode step (generation / the batch's longest completion), generated tokens/s of generation alone,
the weight-read floor of a decode step (parameters x bytes per stored weight / bandwidth, both the measured copy
bandwidth and the datasheet's, perf/device_figures.py) and the update's MFU (6 x parameters x the batch's prompt and
completion tokens / update seconds / the datasheet's dense peak at the precision); then the ratios TRL / gspo (median
of the per-repeat ratios). The work check compares the prompts (a hash of every rollout's prompt list in
order), the number of completions and their mean length.
"""

from __future__ import annotations

import time

T_START = time.perf_counter()  # before the heavy imports: startup counts them

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

from device_figures import describe, mfu, weight_floor_ms  # noqa: E402  (perf/, beside this script)

PHASES = ("generation", "grading", "old_logp", "update", "overhead")
ARMS = ("gspo", "trl", "trl-static")  # trl-static: TRL with cache_implementation="static"


def _prompt_hash(prompts: list[str]) -> str:
    return hashlib.sha256("\x00".join(prompts).encode()).hexdigest()[:12]


def _overrides(args) -> list[str]:
    return [f"algo={args.algo}", "logger=local", f"train.prompts_per_step={args.prompts}",
            f"train.group_size={args.group}", f"rollout.max_new_tokens={args.max_new_tokens}",
            f"train.minibatches={args.updates}", f"train.lr={args.lr}",
            f"train.steps={args.warmup + args.batches}",
            *(["model.dtype=bfloat16", "train.precision=bf16"] if args.precision == "bf16" else []),
            *args.gspo_override]


def _prompt_tokens(tokenizer, prompts: list[str], group: int) -> int:
    """Tokens of a rollout batch's prompts, each repeated `group` times (the update's forward reads them all)."""
    return group * sum(len(ids) for ids in tokenizer(prompts, add_special_tokens=False).input_ids)


def plan(args) -> dict:
    """What both arms need to do the same work: the model folder, the prompts and golds of every rollout
    batch (from gspo's task, steps 1..n), the algorithm's clip range."""
    from gspo.conf.compose import compose_config
    from gspo.trainer.coldstart import cold_start_path
    from gspo.trainer.policy import tiny_spec
    from gspo.trainer.tasks.registry import build_task

    cfg = compose_config(_overrides(args))
    # the cold start is keyed by rollout.max_new_tokens too: every length of the scaling table uses the
    # default's model (64), the one the comparison uses
    spec = tiny_spec(compose_config([*_overrides(args), "rollout.max_new_tokens=64"]))
    task = build_task(cfg.task)
    if args.model == "qwen3-0.6b-random":
        from gspo.evals.arith import ALPHABET
        from gspo.trainer.model.models import save_random_qwen3_0_6b

        model = str(save_random_qwen3_0_6b(Path(args.tmp) / "qwen3-0.6b-random", ALPHABET, dtype="float32"))
    else:
        model = str(cold_start_path(spec, cfg.model.tiny.cache_dir, log=lambda _: None))
    steps = [task.train_items(seed=cfg.seed, step=s, n=args.prompts) for s in range(1, args.warmup + args.batches + 1)]
    return {"model": model,
            "prompts": [[it.prompt for it in items] for items in steps],
            "golds": [[it.gold for it in items] for items in steps],
            "clip_low": cfg.algo.clip_low, "clip_high": cfg.algo.clip_high}


def run_gspo(args, work: dict) -> dict:
    """gspo's own train_step on the embedded model, one call per rollout batch."""
    import torch

    torch.set_num_threads(args.threads)
    from gspo.conf.compose import compose_config
    from gspo.trainer.engines.registry import make_engine
    from gspo.trainer.loop import format_prompts, train_step
    from gspo.trainer.model.logprobs import compile_body
    from gspo.trainer.model.models import cache_root, load_pretrained
    from gspo.trainer.model.precision import Precision, resolve_precision
    from gspo.trainer.state import make_optimizer
    from gspo.trainer.step.context import StepContext
    from gspo.trainer.tasks.registry import build_task
    from gspo.vocab.metrics import LEN_MAX, LEN_MEAN, REWARD_MEAN, TIME_PHASE

    cfg = compose_config(_overrides(args))
    model, tokenizer = load_pretrained(work["model"], dtype=cfg.model.dtype)  # what load_policy loads for tiny
    model.eval()
    device = torch.device(args.device)
    model.to(device)
    if cfg.train.compile:  # as the trainer's _policy does: the compile lands in the first (warm-up) batch
        compile_body(model, cache_root(cfg.model.tiny.cache_dir))
    storage = next(model.parameters()).dtype
    precision = Precision(model, resolve_precision(cfg.train.precision, storage), device)
    torch.manual_seed(cfg.seed)
    optimizer, scheduler = make_optimizer(precision.master, cfg.train)
    engine = make_engine(cfg, model, tokenizer)
    if args.full_length:  # no id ends a completion: each runs to max_new_tokens (the scaling table's length rows)
        engine.eos_ids = [-1]
    task = build_task(cfg.task)
    ctx = StepContext.of(cfg, model=model, precision=precision, optimizer=optimizer, scheduler=scheduler, engine=engine)

    class NoSamples:  # train_step hands a few samples per step to the run's loggers; the benchmark keeps none
        def samples(self, rows):
            pass

    startup = time.perf_counter() - T_START
    batches = []
    for step in range(1, args.warmup + args.batches + 1):
        items = task.train_items(seed=cfg.seed, step=step, n=args.prompts)
        t0, c0 = time.perf_counter(), time.process_time()
        row = train_step(step, ctx, task, NoSamples())
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        phase = {k: row[TIME_PHASE.format(k)] for k in ("generate", "grade", "old_logp", "updates")}
        split = {"generation": phase["generate"], "grading": phase["grade"], "old_logp": phase["old_logp"],
                 "update": phase["updates"]}
        split["overhead"] = wall - sum(split.values())
        batches.append({"wall": wall, "cpu": cpu, **split, "prompts": _prompt_hash(format_prompts(tokenizer, items, chat=False)),
                        "completions": args.prompts * args.group,
                        "tokens": row[LEN_MEAN] * args.prompts * args.group, "len_max": row[LEN_MAX],
                        "prompt_tokens": _prompt_tokens(tokenizer, [it.prompt for it in items], args.group),
                        "len_mean": row[LEN_MEAN], "reward": row[REWARD_MEAN]})
    config = {"algo": cfg.algo.name, "clip": [cfg.algo.clip_low, cfg.algo.clip_high],
              "aggregation": cfg.algo.options.get("aggregation", "sequence mean (GSPO)"), "adv": f"(r - mean) / (std + {cfg.algo.adv_eps})",
              "kl_beta": cfg.algo.kl_beta, "old_logp": cfg.algo.old_logp_source,
              "minibatches": cfg.train.minibatches, "epochs": cfg.train.epochs, "lr": cfg.train.lr,
              "betas": list(cfg.train.adam_betas), "max_grad_norm": cfg.train.max_grad_norm,
              "temperature": cfg.rollout.temperature, "top_p": cfg.rollout.top_p,
              "engine": cfg.rollout.engine, "kv_cache": cfg.rollout.kv_cache, "compile": cfg.train.get("compile", None),
              "model.dtype": cfg.model.dtype,
              "train.precision": resolve_precision(cfg.train.precision, storage)}
    return {"startup": startup, "batches": batches, "config": config, **_weights(model)}


def _weights(model) -> dict:
    """Parameters (tied embeddings once) and bytes per stored weight: the decode step's weight-read floor."""
    params = list(model.parameters())
    return {"params": sum(p.numel() for p in params), "weight_bytes": params[0].element_size()}


def run_trl(args, work: dict) -> dict:
    """TRL's GRPOTrainer with the settings that make its work gspo's (see `config` in the output)."""
    import torch

    torch.set_num_threads(args.threads)
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from gspo.evals.arith import grade_arith

    rows = [{"prompt": p, "gold": g} for ps, gs in zip(work["prompts"], work["golds"], strict=True)
            for p, g in zip(ps, gs, strict=True)]
    n_batches = args.warmup + args.batches
    model = AutoModelForCausalLM.from_pretrained(work["model"], dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(work["model"])
    seen: list[dict] = []
    timers: dict[str, float] = dict.fromkeys(PHASES, 0.0)

    def reward(prompts, completions, gold, completion_ids, **_):
        seen.append({"prompts": _prompt_hash(list(prompts)[:: args.group]),  # each prompt comes G times
                     "completions": len(completions),
                     "tokens": sum(len(c) for c in completion_ids), "len_max": max(len(c) for c in completion_ids),
                     "prompt_tokens": _prompt_tokens(tokenizer, list(prompts)[:: args.group], args.group)})
        return [float(grade_arith(c, g)) for c, g in zip(completions, gold, strict=True)]

    n = args.prompts * args.group
    # the best Hugging Face setting: a static cache, whose decode step transformers compiles (TRL >= 1.x has the
    # field; older versions take it through generation_kwargs)
    static = {}
    if args.arm == "trl-static":
        fields = {f.name for f in dataclasses.fields(GRPOConfig)}
        static = ({"cache_implementation": "static"} if "cache_implementation" in fields
                  else {"generation_kwargs": {"cache_implementation": "static"}})
    config = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="trl-bench-"), report_to="none", save_strategy="no",
        use_cpu=args.device == "cpu",
        bf16=args.precision == "bf16", fp16=False, seed=0, **static, max_steps=n_batches * args.updates, logging_steps=args.updates,
        disable_tqdm=True, dataloader_num_workers=0, shuffle_dataset=False, disable_dropout=True,
        num_generations=args.group, per_device_train_batch_size=n // args.updates, gradient_accumulation_steps=1,
        steps_per_generation=args.updates, num_iterations=1, max_completion_length=args.max_new_tokens,
        temperature=1.0, top_p=1.0, top_k=0, learning_rate=args.lr, lr_scheduler_type="constant", warmup_steps=0,
        weight_decay=0.0, adam_beta1=0.9, adam_beta2=0.99, max_grad_norm=1.0, beta=0.0,
        epsilon=work["clip_low"], epsilon_high=work["clip_high"], loss_type="grpo", scale_rewards="group",
        importance_sampling_level="sequence" if args.algo == "gspo" else "token", log_completions=False,
    )

    def timed(method: str, phase: str, only=lambda: True):
        """Wrap GRPOTrainer.<method> so its wall time adds to timers[phase] (when `only()` holds after it)."""
        def wrapper(self, *a, **k):
            t0 = time.perf_counter()
            try:
                return getattr(GRPOTrainer, method)(self, *a, **k)
            finally:
                if only():
                    timers[phase] = timers.get(phase, 0.0) + time.perf_counter() - t0
        return wrapper

    Timed = type("Timed", (GRPOTrainer,), {
        "_generate": timed("_generate", "generation"),
        "_calculate_rewards": timed("_calculate_rewards", "grading"),
        # without grad it is the old-log-prob pass; with grad it is the update's forward
        "_get_per_token_logps_and_entropies": timed("_get_per_token_logps_and_entropies", "old_logp",
                                                    only=lambda: not torch.is_grad_enabled()),
        "_generate_and_score_completions": timed("_generate_and_score_completions", "scoring"),
    })

    batches: list[dict] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            if state.global_step % args.updates == 0:
                timers.update(dict.fromkeys([*PHASES, "scoring"], 0.0))
                timers["t0"], timers["c0"] = time.perf_counter(), time.process_time()

        def on_step_end(self, a, state, control, **kw):
            if state.global_step % args.updates == 0:
                wall, cpu = time.perf_counter() - timers["t0"], time.process_time() - timers["c0"]
                split = {k: timers[k] for k in ("generation", "grading", "old_logp")}
                split["overhead"] = timers["scoring"] - sum(split.values())  # advantages, tokenising, bookkeeping
                split["update"] = wall - timers["scoring"]  # forwards, backwards, optimizer steps, Trainer's loop
                batches.append({"wall": wall, "cpu": cpu, **split})

    trainer = Timed(model=model, processing_class=tokenizer, reward_funcs=reward, args=config,
                    train_dataset=Dataset.from_list(rows), callbacks=[Clock()])
    startup = time.perf_counter() - T_START
    trainer.train()
    for b, s in zip(batches, seen, strict=True):
        b |= {**s, "len_mean": s["tokens"] / s["completions"]}
    cfg = {"GRPOConfig": {k: getattr(config, k) for k in (
        "num_generations", "per_device_train_batch_size", "gradient_accumulation_steps", "steps_per_generation",
        "num_iterations", "max_completion_length", "temperature", "top_p", "top_k", "learning_rate",
        "lr_scheduler_type", "adam_beta1", "adam_beta2", "max_grad_norm", "beta", "epsilon", "epsilon_high",
        "loss_type", "scale_rewards", "importance_sampling_level", "shuffle_dataset", "disable_dropout", "bf16")},
        "cache": static or "dynamic (default)"}
    return {"startup": startup, "batches": batches, "config": cfg, **_weights(model)}


def child(args) -> None:
    work = json.loads(open(args.work).read())
    out = (run_gspo if args.arm == "gspo" else run_trl)(args, work)
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("RESULT " + json.dumps(out))


WORK_KEYS = ("prompts", "group", "max_new_tokens", "updates", "lr", "threads", "device", "precision")  # the work


def add_work_args(ap: argparse.ArgumentParser) -> None:
    """The work of one rollout batch, as both arms (and perf/compile_payback.py) take it."""
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--updates", type=int, default=4, help="optimizer steps per rollout batch")
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="cpu or cuda (both arms)")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"],
                    help="bf16: gspo bf16 weights + fp32 master; TRL bf16=True (autocast)")


def child_flags(args, keys: tuple[str, ...] = WORK_KEYS) -> list[str]:
    """`args`' values of `keys` as a child process's command-line flags."""
    return [f"--{k.replace('_', '-')}={getattr(args, k)}" for k in keys]


def spawn(args, arm: str, algo: str, work_file: str, extra: list[str], env: dict[str, str] | None = None) -> dict:
    """One arm's process (`env`: variables set for it besides the thread counts); its RESULT line."""
    cmd = [sys.executable, __file__, "--arm", arm, "--algo", algo, "--work", work_file, *extra]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "TOKENIZERS_PARALLELISM": "false", **(env or {})}
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
    if out.returncode or not lines:
        sys.exit(f"{arm} arm failed (exit {out.returncode}): {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(lines[-1][len("RESULT "):])


def summarise(res: dict, warmup: int, updates: int) -> dict:
    """Means over a process's measured batches (its first `warmup` ones are dropped)."""
    kept = res["batches"][warmup:]
    mean = {k: statistics.fmean(b[k] for b in kept)
            for k in ("wall", "cpu", *PHASES, "len_mean", "tokens", "len_max", "prompt_tokens")}
    return {**mean, "per_update": mean["wall"] / updates, "tokens_per_s": mean["tokens"] / mean["wall"],
            "ms_per_decode_step": 1e3 * mean["generation"] / max(mean["len_max"], 1),
            "generated_per_s": mean["tokens"] / mean["generation"], "params": res["params"],
            "weight_bytes": res["weight_bytes"],
            "prompts": [b["prompts"] for b in res["batches"]], "completions": [b["completions"] for b in kept],
            "peak_rss_mb": res["peak_rss_mb"], "startup": res["startup"],
            "first": res["batches"][0]["wall"]}  # the first (warm-up) batch: a compile's cost is paid there


def _med(rows: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def compare(args, algo: str, work_file: str, work: dict) -> dict:
    extra = child_flags(args, (*WORK_KEYS, "warmup", "batches"))
    extra += [f"--gspo-override={o}" for o in args.gspo_override]
    runs: dict[str, list[dict]] = {a: [] for a in args.arms}
    configs = {}
    for r in range(args.repeats):
        order = args.arms if r % 2 == 0 else args.arms[::-1]
        for arm in order:
            res = spawn(args, arm, algo, work_file, extra)
            configs[arm] = res["config"]
            runs[arm].append(summarise(res, args.warmup, args.updates))
            s = runs[arm][-1]
            print(f"  repeat {r + 1} {arm:>4}: {s['wall']:.3f} s per rollout batch, {s['cpu']:.3f} CPU s (load {os.getloadavg()[0]:.1f})",
                  flush=True)
    return {"algo": algo, "runs": runs, "configs": configs}


def device_lines(args, runs: dict[str, list[dict]], device: dict) -> None:
    """Per arm: ms per decode step, generated tokens/s of generation, the weight-read floor, the update's MFU."""
    sheet = device["datasheet"]
    measured = device["bandwidth_measured"]
    peak = sheet[args.precision] if sheet else None
    print(f"  device {device['name']}: copy bandwidth {measured / 1e9:,.0f} GB/s measured"
          + (f", {sheet['bandwidth'] / 1e12:.2f} TB/s datasheet ({sheet['name']}); dense {args.precision} peak "
             f"{peak / 1e12:,.0f} TFLOP/s datasheet" if sheet else "; no datasheet row (MFU not computed)"))
    print(f"  {'arm':>10} {'ms/decode step':>15} {'gen tok/s':>10} {'floor ms (meas.)':>17} {'floor ms (sheet)':>17} "
          f"{'update MFU':>11} {'params':>12}")
    for arm, rows in runs.items():
        params, wbytes = rows[0]["params"], rows[0]["weight_bytes"]
        tokens = _med(rows, "prompt_tokens") + _med(rows, "tokens")
        util = mfu(params, tokens, _med(rows, "update"), peak)
        floor_sheet = f"{weight_floor_ms(params, wbytes, sheet['bandwidth']):17.3f}" if sheet else f"{'-':>17}"
        print(f"  {arm:>10} {_med(rows, 'ms_per_decode_step'):15.2f} {_med(rows, 'generated_per_s'):10,.0f} "
              f"{weight_floor_ms(params, wbytes, measured):17.3f} {floor_sheet} "
              f"{f'{util:.1%}' if util is not None else '-':>11} {params:12,d}")


def report(args, result: dict, work: dict, device: dict) -> None:
    runs, algo = result["runs"], result["algo"]
    print(f"\n== {algo.upper()}: B={args.prompts} prompts x G={args.group}, {args.max_new_tokens} new tokens, "
          f"{args.updates} optimizer steps per rollout batch, lr {args.lr}, {args.precision}, {args.threads} threads; "
          f"{args.repeats} alternating repeats x {args.batches} rollout batches (+{args.warmup} warm-up) ==")
    for arm, cfg in result["configs"].items():
        print(f"  {arm} config: {json.dumps(cfg)}")
    head = f"  {'arm':>4} {'s/batch':>8} {'cpu s':>7} {'s/step':>7} " + " ".join(f"{p:>10}" for p in PHASES) + \
        f" {'tok/s':>7} {'RSS MiB':>8} {'startup':>8} {'first':>7} {'len':>6}"
    print(head)
    for arm, rows in runs.items():
        print(f"  {arm:>4} {_med(rows, 'wall'):8.3f} {_med(rows, 'cpu'):7.3f} {_med(rows, 'per_update'):7.3f} "
              + " ".join(f"{_med(rows, p):10.3f}" for p in PHASES)
              + f" {_med(rows, 'tokens_per_s'):7.0f} {max(r['peak_rss_mb'] for r in rows):8.0f}"
              f" {_med(rows, 'startup'):8.1f} {_med(rows, 'first'):7.2f} {_med(rows, 'len_mean'):6.1f}")
    device_lines(args, runs, device)
    for trl in [a for a in runs if a.startswith("trl") and "gspo" in runs]:
        ratio = statistics.median(t["wall"] / g["wall"] for t, g in zip(runs[trl], runs["gspo"], strict=True))
        cpu = statistics.median(t["cpu"] / g["cpu"] for t, g in zip(runs[trl], runs["gspo"], strict=True))
        rss = max(r["peak_rss_mb"] for r in runs["gspo"]) / max(r["peak_rss_mb"] for r in runs[trl])
        same_prompts = all(r["prompts"] == [_prompt_hash(p) for p in work["prompts"]]
                           for rows in runs.values() for r in rows)
        same_count = {c for rows in runs.values() for r in rows for c in r["completions"]} == {args.prompts * args.group}
        lens = {a: _med(rows, "len_mean") for a, rows in runs.items()}
        similar = abs(lens[trl] - lens["gspo"]) <= 0.1 * max(lens.values())
        each = ", ".join(f"{t['wall'] / g['wall']:.2f}" for t, g in zip(runs[trl], runs["gspo"], strict=True))
        print(f"  ratio {trl}/gspo, s per rollout batch (median of {args.repeats} repeats): {ratio:.2f}; "
              f"per repeat: {each}")
        print(f"  ratio {trl}/gspo, process CPU seconds per rollout batch (median; robust to other load): {cpu:.2f}")
        print(f"  peak RSS gspo/{trl}: {rss:.2f}")
        print(f"  same work: prompts {'identical' if same_prompts else 'DIFFER'}, completions per batch "
              f"{'identical' if same_count else 'DIFFER'} ({args.prompts * args.group}), mean length "
              f"gspo {lens['gspo']:.1f} vs {trl} {lens[trl]:.1f} ({'similar' if similar else 'NOT similar'})")
        key = "" if trl == "trl" else f"_{trl.removeprefix('trl-')}"  # ratio (default TRL), ratio_static, ...
        result[f"cpu_ratio{key}"], result[f"ratio{key}"], result[f"rss_ratio{key}"] = cpu, ratio, rss
        result[f"same_work{key}"] = same_prompts and same_count and similar


def scaling(args, work_dir: str) -> None:
    """s per rollout batch (gspo) as G, B and the response length double from the base config."""
    grid = [("group", [2, 4, 8, 16]), ("prompts", [4, 8, 16, 32]), ("max_new_tokens", [32, 64, 128, 256])]
    print(f"\n== scaling, gspo {args.algos[0]}: s per rollout batch, base B={args.prompts} G={args.group} "
          f"T={args.max_new_tokens} M={args.updates}; median of {args.repeats} processes x {args.batches} batches ==")
    print(f"  {'varied':>15} {'value':>6} {'s/batch':>8} {'x prev':>7} {'cpu s':>7} {'x prev':>7} {'len':>6} {'tok/s':>7}")
    for key, values in [(k, v) for k, v in grid if k in args.scaling_keys.split(",")]:
        prev = None
        for v in values:
            sub = argparse.Namespace(**{**vars(args), key: v})
            work = plan(argparse.Namespace(**{**vars(sub), "algo": args.algos[0]}))
            path = os.path.join(work_dir, f"work-{key}-{v}.json")
            with open(path, "w") as f:
                json.dump(work, f)
            extra = child_flags(sub, (*WORK_KEYS, "warmup", "batches"))
            extra += [f"--gspo-override={o}" for o in args.gspo_override]
            extra += ["--full-length"] if key == "max_new_tokens" else []  # the model's answers end at ~44 tokens
            rows = [summarise(spawn(sub, "gspo", args.algos[0], path, extra), args.warmup, args.updates)
                    for _ in range(args.repeats)]
            wall = _med(rows, "wall")
            cpu = _med(rows, "cpu")
            growth = f"{wall / prev[0]:7.2f}" if prev else f"{'':>7}"
            cgrowth = f"{cpu / prev[1]:7.2f}" if prev else f"{'':>7}"
            print(f"  {key:>15} {v:6d} {wall:8.3f} {growth} {cpu:7.3f} {cgrowth} {_med(rows, 'len_mean'):6.1f} "
                  f"{_med(rows, 'tokens_per_s'):7.0f}", flush=True)
            prev = (wall, cpu)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--algos", default="grpo,gspo", help="comma-separated: grpo, gspo")
    ap.add_argument("--arms", default="gspo,trl", help="comma-separated: gspo, trl, trl-static")
    ap.add_argument("--repeats", type=int, default=5, help="alternating processes per arm")
    ap.add_argument("--batches", type=int, default=3, help="measured rollout batches per process")
    ap.add_argument("--warmup", type=int, default=1, help="rollout batches per process not counted")
    add_work_args(ap)
    ap.add_argument("--gspo-override", action="append", default=[], help="extra gspo config override")
    ap.add_argument("--scaling", action="store_true", help="print the scaling table instead (gspo arm)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--scaling-keys", default="group,prompts,max_new_tokens", help="--scaling: the factors to double")
    ap.add_argument("--full-length", action="store_true",
                    help="gspo arm: ignore end-of-sequence so every completion runs to max_new_tokens")
    ap.add_argument("--model", default="embedded", choices=["embedded", "qwen3-0.6b-random"],
                    help="the embedded cold start, or a randomly initialised model of Qwen3-0.6B's shape")
    ap.add_argument("--tmp", help=argparse.SUPPRESS)
    ap.add_argument("--arm", help=argparse.SUPPRESS)
    ap.add_argument("--algo", help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.arm:
        child(args)
        return
    args.algos, args.arms = args.algos.split(","), args.arms.split(",")
    if bad := [a for a in args.arms if a not in ARMS] + [a for a in args.algos if a not in ("grpo", "gspo")]:
        ap.error(f"unknown arm or algo: {', '.join(bad)}")
    if args.prompts * args.group % args.updates:
        ap.error("--prompts x --group must divide into --updates optimizer steps")
    import torch

    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"torch {torch.__version__}, python {platform.python_version()}; load average at start "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    device = describe(torch.device(args.device))  # before the arms: their processes have the device to themselves
    if args.device == "cuda":
        torch.cuda.empty_cache()
    if any(a.startswith("trl") for a in args.arms):
        import transformers
        import trl

        print(f"trl {trl.__version__}, transformers {transformers.__version__}")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        args.tmp = tmp
        if args.scaling:
            scaling(args, tmp)
            return
        for algo in args.algos:
            work = plan(argparse.Namespace(**{**vars(args), "algo": algo}))
            path = os.path.join(tmp, f"work-{algo}.json")
            with open(path, "w") as f:
                json.dump(work, f)
            result = compare(args, algo, path, work)
            report(args, result, work, device)
            results.append(result)
    print(f"load average at end {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
