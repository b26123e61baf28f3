"""Generation-and-grading evals shared by `gspo train` (periodic) and `gspo eval`."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import OmegaConf

from gspo.conf.compose import compose_config
from gspo.conf.errors import GspoError
from gspo.evals.benchmarks import load_benchmark
from gspo.trainer.loggers import start_wandb, wandb_group, wandb_mode, write_evals
from gspo.trainer.models import load_pretrained
from gspo.trainer.policy import load_policy
from gspo.trainer.rollout import HFEngine
from gspo.trainer.rundir import RunDir
from gspo.trainer.task_types import Task


def eval_task(engine: HFEngine, task: Task, prompts: list[str], *, seed: int, greedy: bool = True) -> dict[str, float]:
    """Accuracy on the task's held-out items: sampled at the engine's temperature, and greedy."""
    golds = [it.gold for it in task.eval_items]
    out = {"accuracy": _accuracy(engine.generate(prompts, seed=seed).texts, golds, task)}
    if greedy:
        out["accuracy_greedy"] = _accuracy(engine.generate(prompts, seed=seed, greedy=True).texts, golds, task)
    return out


def eval_rows(benchmark: str, metrics: dict[str, float], **settings) -> list[dict]:
    """evals.jsonl rows, one per metric, each saying how it was made. `settings`: step, model, n_problems,
    k (samples per problem), temperature (0: greedy), top_p, max_new_tokens. Training evals and
    `gspo eval` write the same names: pass@1, avg@k, pass@k, n_problems (the benchmark's own score)."""
    return [{"benchmark": benchmark, "metric": m, "value": v, **settings} for m, v in metrics.items()]


def task_eval_rows(name: str, metrics: dict[str, float], *, temperature: float, **settings) -> list[dict]:
    """The held-out task eval in the benchmark vocabulary: its sampled accuracy is pass@1 at the training
    temperature, its greedy accuracy pass@1 at temperature 0 (metrics.jsonl keeps accuracy/accuracy_greedy)."""
    rows = eval_rows(name, {"pass@1": metrics["accuracy"]}, k=1, temperature=temperature, **settings)
    if "accuracy_greedy" in metrics:
        rows += eval_rows(name, {"pass@1": metrics["accuracy_greedy"]}, k=1, temperature=0.0, **settings)
    return rows


def _accuracy(texts: list[str], golds: list[str], task: Task) -> float:
    return sum(task.rewards(texts, golds)) / max(1, len(golds))


def _bench_prompts(tokenizer, problems, *, chat: bool, k: int) -> list[str]:
    texts = []
    for p in problems:
        if chat:
            messages = ([{"role": "system", "content": p.meta["system"]}] if p.meta.get("system") else [])
            messages.append({"role": "user", "content": p.prompt})
            text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        else:
            text = p.prompt
        texts.extend([text] * k)
    return texts


def eval_benchmarks(engine, benches: list, *, k: int, seed: int, chat: bool, workers: int, how: dict,
                    max_new_tokens: int | None = None, greedy: bool = False) -> tuple[dict, list[dict], list[dict]]:
    """The one benchmark eval of `gspo train` (periodic) and `gspo eval`: `engine` on each benchmark.

    Returns (metrics per benchmark name, evals.jsonl rows, eval_samples.jsonl rows); `how` (step, model,
    temperature, top_p, max_new_tokens) is stamped on every row, as `write_evals` writes them."""
    metrics, rows, samples = {}, [], []
    for bench in benches:
        metrics[bench.name], graded = eval_benchmark(engine, bench, k=k, seed=seed, chat=chat, workers=workers,
                                                     max_new_tokens=max_new_tokens, greedy=greedy)
        samples += [{"step": how.get("step"), **s} for s in graded]
        rows += eval_rows(bench.name, metrics[bench.name], n_problems=len(bench.problems), k=k, **how)
    return metrics, rows, samples


def eval_benchmark(engine, bench, *, k: int, seed: int, chat: bool, workers: int = 1,
                   max_new_tokens: int | None = None, greedy: bool = False) -> tuple[dict[str, float], list[dict]]:
    """Sample k completions per problem of `bench`, grade them with the benchmark's own grader.

    Returns (metrics, sample rows). The graders are the ones `gspo grade` and the training reward use.
    """
    prompts = _bench_prompts(engine.tokenizer, bench.problems, chat=chat, k=k)
    texts = engine.generate(prompts, seed=seed, max_new_tokens=max_new_tokens, greedy=greedy).texts
    verdicts, samples = [], []
    for i, problem in enumerate(bench.problems):
        responses = texts[i * k : (i + 1) * k]
        graded = bench.grade(problem, responses, workers=workers)
        verdicts.append(graded)
        extra = {"fn_name": problem.meta["fn_name"]} if problem.meta.get("fn_name") else {}
        samples.extend({"benchmark": bench.name, "id": problem.id, "sample": j, "response": r, "gold": problem.gold,
                        **extra, "correct": v.correct, "verdict": v.verdict}
                       for j, (r, v) in enumerate(zip(responses, graded, strict=True)))
    return bench.score(verdicts, k), samples


@dataclass
class EvalRequest:
    """What `gspo eval` was asked: a model (a run's checkpoint, a local path, a hub id or "tiny") and benchmarks."""

    benches: list[str]
    run: str | None = None
    model: str | None = None
    paths: dict[str, str] = field(default_factory=dict)
    k: int = 1
    limit: int | None = None
    temperature: float | None = None  # None: the run's rollout temperature, else 1.0; 0: greedy
    top_p: float = 1.0
    max_new_tokens: int | None = None  # None: the run's rollout.max_new_tokens, else 1024
    workers: int = 2
    seed: int = 0
    batch_size: int = 64
    output: str | None = None  # where evals.jsonl goes when no run is given
    wandb: str = "disabled"  # auto, online, offline or disabled: a W&B run of job_type "eval"


def run_eval(req: EvalRequest, log=print) -> Path:
    """Generate and grade; append rows to <dir>/evals.jsonl and samples to <dir>/eval_samples.jsonl."""
    if req.k < 1:
        raise GspoError(f"k={req.k}: need at least one sample per problem")
    options = _run_task_options(req.run)
    benches = [load_benchmark(b, path=req.paths.get(b), limit=req.limit, **options.get(b, {})) for b in req.benches]
    model, tokenizer, info = _eval_model(req, log)
    out_dir = Path(req.run) if req.run else Path(req.output or Path("results") / "evals" / _stamp(info["model"]))
    run = RunDir(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    greedy = req.temperature == 0
    settings = {"temperature": 0.0 if greedy else req.temperature or info["temperature"], "top_p": req.top_p,
                "max_new_tokens": req.max_new_tokens or info["max_new_tokens"]}
    engine = HFEngine(model, tokenizer, temperature=settings["temperature"] or info["temperature"], top_p=req.top_p,
                      max_new_tokens=settings["max_new_tokens"], batch_size=req.batch_size)
    tracker = _eval_wandb(req, out_dir, info)
    results, rows, samples = eval_benchmarks(engine, benches, k=req.k, seed=req.seed, chat=info["chat"],
                                             workers=req.workers, greedy=greedy,
                                             how={"step": info["step"], "model": info["model"], **settings})
    write_evals(run, rows, samples)
    for name, metrics in results.items():
        if tracker is not None:
            tracker.log({f"eval/{name}/{m}": v for m, v in metrics.items()})
        log(f"{name}: " + ", ".join(f"{m} {v:.4g}" for m, v in metrics.items()))
    if tracker is not None:
        tracker.finish()
    return out_dir


def _eval_wandb(req: EvalRequest, out_dir: Path, info: dict):
    """A W&B run for this eval, grouped with the training run it evaluates (None when disabled)."""
    mode = wandb_mode(req.wandb)
    if mode == "disabled":
        return None
    return start_wandb(mode, out_dir, project="gspo", job_type="eval", group=info.get("group"),
                       name=f"eval-{Path(info['model']).name}",
                       config={"model": info["model"], "step": info["step"], "benches": req.benches, "k": req.k})


def _run_task_options(run: str | None) -> dict[str, dict]:
    """For a run on the embedded task, `bench=arith` means that run's held-out problems."""
    config = Path(run) / "config.yaml" if run else None
    if config is None or not config.exists():
        return {}
    task = OmegaConf.load(config).task
    if task.kind != "arith":
        return {}
    return {"arith": {"min_digits": task.min_digits, "max_digits": task.max_digits, "ops": task.ops, "n": task.eval_size}}


def _eval_model(req: EvalRequest, log):
    """(model, tokenizer, info) for a run's latest checkpoint, a path or hub id, or the embedded "tiny"."""
    if req.run is not None and req.model is not None:
        raise GspoError("give one of run=<run dir> or model=<path, hub id or tiny>, not both")
    if req.run is None and req.model is None:
        log("no run= or model= given: evaluating the embedded tiny model (model=tiny)")
        req.model = "tiny"
    if req.run is not None:
        run = RunDir(Path(req.run))
        if not (run.path / "config.yaml").exists():
            raise GspoError(f"not a run directory (no config.yaml): {run.path}")
        ckpt = run.latest_checkpoint()
        if ckpt is None:
            raise GspoError(f"run {run.path} has no checkpoint yet")
        cfg = OmegaConf.load(run.path / "config.yaml")
        model, tok = load_policy(cfg, log, path=str(ckpt), merge=True)  # a LoRA adapter folded into the base
        step = int(json.loads((ckpt / "trainer_state.json").read_text())["step"])
        return model, tok, {"model": str(ckpt), "step": step, "chat": cfg.model.chat_template,
                            "group": wandb_group(cfg, run.path.name),
                            "temperature": cfg.rollout.temperature, "max_new_tokens": cfg.rollout.max_new_tokens}
    if req.model == "tiny":
        cfg = compose_config([])
        model, tok = load_policy(cfg, log)
        return model, tok, {"model": "tiny", "step": None, "chat": False, "temperature": 1.0,
                            "max_new_tokens": cfg.rollout.max_new_tokens}
    model, tok = load_pretrained(req.model)
    return model, tok, {"model": req.model, "step": None, "chat": tok.chat_template is not None,
                        "temperature": 1.0, "max_new_tokens": 1024}


def _stamp(model: str) -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{Path(model.rstrip('/')).name}"
