"""Generation-and-grading evals shared by `gspo train` (periodic) and `gspo eval`."""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from omegaconf import OmegaConf

from gspo.conf.errors import GspoError
from gspo.evals.benchmarks import load_benchmark
from gspo.evals.benchmarks.types import is_count
from gspo.evals.sandbox import accept_weak
from gspo.trainer.engines.hf_engine import HFEngine
from gspo.trainer.engines.registry import make_engine
from gspo.trainer.model.models import pick_device
from gspo.trainer.parallel import fsdp
from gspo.trainer.policy import load_policy
from gspo.trainer.run.loggers import Loggers
from gspo.trainer.run.progress import Progress
from gspo.trainer.run.rundir import RunDir, checkpoint_problem, checkpoint_step
from gspo.trainer.run.seeds import step_seed
from gspo.trainer.tasks.registry import bench_options
from gspo.trainer.tasks.task_types import Task, prompt_text


@dataclass(frozen=True)
class TaskEval:
    """One held-out eval of the task: its metrics (accuracy: the mean over `k` samples per problem, avg@k, at
    the engine's temperature; accuracy_greedy), and per problem, in the order of the task's eval items, how
    many of its k samples were right (`correct`) and whether the greedy answer was (`correct_greedy`): what a
    report needs to pair two runs by problem and to split the accuracy's variance into eval sampling and
    training seed. `problems`: a fingerprint of the problems (prompts and answers), equal for equal sets.
    `outcomes` [n problems][k]: each sample's reward (1 right, 0 wrong; partial credit by its value), sample j
    of problem i drawn with the eval seed + i * k + j, so two runs of one seed, step and k draw sample (i, j)
    from the same uniforms (common random numbers: a report pairs their difference sample by sample)."""

    metrics: dict[str, float]
    k: int
    correct: list[int]
    correct_greedy: list[int] | None
    problems: str
    seconds: float  # generating and grading, sampled and greedy
    outcomes: list[list[float]] | None = None


def eval_task(engine: HFEngine, task: Task, prompts: list[str], *, seed: int, greedy: bool = True,
              k: int = 1) -> TaskEval:
    """Accuracy on the task's held-out items: k samples each at the engine's temperature (avg@k; prompt i's
    j-th sample draws as row i * k + j of one batch, so k = 1 is the single-sample eval), and greedy."""
    start = time.perf_counter()
    golds = [it.gold for it in task.eval_items]
    texts = engine.generate([p for p in prompts for _ in range(k)], seed=seed).texts
    right = task.rewards(texts, [g for g in golds for _ in range(k)])
    # [n problems][k] per-sample rewards, ints where whole (the file stays compact); [n problems]: samples
    # right out of k (a reward of 1 is right; partial credit counts by its value)
    outcomes = [[int(r) if float(r).is_integer() else float(r) for r in right[i * k:(i + 1) * k]]
                for i in range(len(golds))]
    correct = [int(round(sum(o))) for o in outcomes]
    metrics = {"accuracy": sum(right) / max(1, len(right))}
    correct_greedy = None
    if greedy:
        right_greedy = task.rewards(engine.generate(prompts, seed=seed, greedy=True).texts, golds)
        correct_greedy = [int(round(r)) for r in right_greedy]
        metrics["accuracy_greedy"] = sum(right_greedy) / max(1, len(golds))
    return TaskEval(metrics, k, correct, correct_greedy, problems_fingerprint(prompts, golds),
                    time.perf_counter() - start, outcomes)


def problems_fingerprint(prompts: list[str], golds: list[str]) -> str:
    """sha256 (first 16 hex digits) of the problems, prompts and answers in order."""
    digest = hashlib.sha256(json.dumps([prompts, golds]).encode())
    return digest.hexdigest()[:16]


def eval_rows(benchmark: str, metrics: dict[str, float], *, source: str, **settings) -> list[dict]:
    """evals.jsonl rows, one per metric, each saying how it was made and what it is over. `settings`: step,
    model, k (samples per problem), temperature (0: greedy), top_p, max_new_tokens, n_problems. Training
    evals and `gspo eval` write the same names: pass@1, avg@k, pass@k. The counts of the score (n_problems:
    problems graded, n_skipped...) are fields of each row, not rows; `source`: "train" (a periodic eval of
    the run) or "gspo eval"; `time`: when the eval ended (UTC, ISO 8601)."""
    counts = {m: int(v) for m, v in metrics.items() if is_count(m)}
    when = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return [{"benchmark": benchmark, "metric": m, "value": v, **settings, **counts, "source": source, "time": when}
            for m, v in metrics.items() if not is_count(m)]


def task_eval_rows(name: str, result: TaskEval, *, temperature: float, **settings) -> list[dict]:
    """The held-out task eval in the benchmark vocabulary: its sampled accuracy is pass@1 at the training
    temperature estimated from k samples per problem (avg@k), its greedy accuracy pass@1 at temperature 0
    (metrics.jsonl keeps accuracy/accuracy_greedy). Each row carries its per-problem outcomes (`correct`:
    samples right of k, per problem) and the problems' fingerprint (`problems`), for a paired report; the
    sampled row also each sample's reward (`outcomes`, [n problems][k], in draw order: TaskEval)."""
    per = {"problems": result.problems}
    sampled = {"outcomes": result.outcomes} if result.outcomes is not None else {}
    rows = eval_rows(name, {"pass@1": result.metrics["accuracy"]}, k=result.k, temperature=temperature,
                     **settings, **per, correct=result.correct, **sampled)
    if result.correct_greedy is not None:
        rows += eval_rows(name, {"pass@1": result.metrics["accuracy_greedy"]}, k=1, temperature=0.0, **settings,
                          **per, correct=result.correct_greedy)
    return rows


def _bench_prompts(tokenizer, problems, *, chat: bool, k: int) -> list[str]:
    texts = [prompt_text(tokenizer, p.prompt, p.meta.get("system"), chat=chat) for p in problems]
    return [t for t in texts for _ in range(k)]


def load_benches(cfg) -> list:
    """The benchmarks of `eval.benches` (a file of `eval.paths` instead of the hub, the first `eval.limit`
    problems); a task may shape a benchmark (trainer/tasks.bench_options: `arith` is the held-out set of
    the config's own arith task: digits, ops, size)."""
    benches = []
    for name in cfg.eval.benches:
        benches.append(load_benchmark(name, path=cfg.eval.paths.get(name), limit=cfg.eval.limit,
                                      **bench_options(cfg, name)))
    return benches


def eval_benchmarks(cfg, engine, benches: list, step: int | None, progress: bool = False,
                    source: str = "train") -> tuple[dict, list[dict], list[dict]]:
    """The one benchmark eval of `gspo train` (periodic) and `gspo eval`: `engine` on each benchmark, as
    `cfg.eval` and `cfg.rollout` say, drawing from (seed, step) as the run's periodic eval at `step` does.

    Returns (metrics per benchmark name, evals.jsonl rows, eval_samples.jsonl rows); every row says how
    it was made: step, model, temperature (0: greedy), top_p, max_new_tokens, k, n_problems; every sample
    row its step, `source` and `time`, those of its benchmark's rows. `progress`: a
    bar per benchmark, problems done / total (not inside the training bar, which says "eval" itself)."""
    greedy = cfg.eval.greedy
    how = {"step": step, "model": cfg.model.name, "temperature": 0.0 if greedy else cfg.rollout.temperature,
           "top_p": cfg.rollout.top_p, "max_new_tokens": cfg.eval.max_new_tokens or cfg.rollout.max_new_tokens}
    seed = step_seed(cfg.seed, step or 0, "eval")
    if benches and cfg.model.chat_template and engine.tokenizer.chat_template is None:
        raise GspoError(f"model.chat_template=true but {cfg.model.name}'s tokenizer has no chat template: "
                        "set model.chat_template=false")
    metrics, rows, samples = {}, [], []
    for bench in benches:
        with Progress(len(bench.problems), enabled=progress, label=f"eval {bench.name}", stats=lambda _: "problems") as bar:
            metrics[bench.name], graded = eval_benchmark(
                engine, bench, k=cfg.eval.k, seed=seed, chat=cfg.model.chat_template, workers=cfg.eval.workers,
                max_new_tokens=how["max_new_tokens"], greedy=greedy, chunk=cfg.rollout.batch_size, done=bar.advance)
        rows += eval_rows(bench.name, metrics[bench.name], source=source, k=cfg.eval.k, **how)
        samples += [{"step": step, **s, "source": source, "time": rows[-1]["time"]} for s in graded]
    return metrics, rows, samples


def eval_benchmark(engine, bench, *, k: int, seed: int, chat: bool, workers: int = 1,
                   max_new_tokens: int | None = None, greedy: bool = False, chunk: int | None = None,
                   done=None) -> tuple[dict[str, float], list[dict]]:
    """Sample k completions per problem of `bench`, grade them with the benchmark's own grader.

    Returns (metrics, sample rows). The graders are the ones `gspo grade` and the training reward use.
    Problems are generated and graded `chunk` completions at a time (the engines' own batch, so the same
    batches; prompt i draws with seed + i either way), `done(by=n)` told after each chunk's n problems.
    """
    prompts = _bench_prompts(engine.tokenizer, bench.problems, chat=chat, k=k)
    per_chunk = max(1, (chunk or len(prompts)) // k)  # whole problems
    verdicts, samples = [], []
    for first in range(0, len(bench.problems), per_chunk):
        problems = bench.problems[first : first + per_chunk]
        texts = engine.generate(prompts[first * k : (first + len(problems)) * k], seed=seed + first * k,
                                max_new_tokens=max_new_tokens, greedy=greedy).texts
        verdicts_, samples_ = _grade_chunk(bench, problems, texts, k, workers)
        verdicts += verdicts_
        samples += samples_
        if done is not None:
            done(by=len(problems))
    return bench.score(verdicts, k), samples


def _grade_chunk(bench, problems: list, texts: list[str], k: int, workers: int) -> tuple[list, list[dict]]:
    verdicts, samples = [], []
    for i, problem in enumerate(problems):
        responses = texts[i * k : (i + 1) * k]
        graded = bench.grade(problem, responses, workers=workers)
        verdicts.append(graded)
        extra = {"fn_name": problem.meta["fn_name"]} if problem.meta.get("fn_name") else {}
        samples.extend({"benchmark": bench.name, "id": problem.id, "sample": j, "response": r, "gold": problem.gold,
                        **extra, "correct": v.correct, "verdict": v.verdict}
                       for j, (r, v) in enumerate(zip(responses, graded, strict=True)))
    return verdicts, samples


def run_eval(cfg, log=print) -> Path:
    """`gspo eval`: the model of `cfg` (or a checkpoint of `eval.run`, under that run's config) on
    `eval.benches`; rows appended to <dir>/evals.jsonl and samples to <dir>/eval_samples.jsonl through the
    run's loggers, <dir> being `eval.output`, else the run's own folder (whose lock the eval holds, as any
    writer of a run does: a run still training is refused), else results/evals/<time>-<model>. Returns <dir>."""
    accept_weak(cfg.eval.weak_sandbox)
    if not cfg.eval.benches:
        # a run of the embedded task is evaluated on its own benchmark, which needs no download (aime24 does)
        own = "arith" if cfg.eval.run is not None and cfg.task.kind == "arith" else "aime24"
        raise GspoError(f"no benchmark given: eval.benches=[{own}] (or several: eval.benches=[{own},livecodebench])")
    benches = load_benches(cfg)
    ckpt = eval_checkpoint(cfg) if cfg.eval.run is not None else None
    out = _eval_output(cfg)
    try:
        model, tokenizer, step = _eval_model(cfg, ckpt, log)
        model.to(pick_device(cfg.device))
        engine = make_engine(cfg, model, tokenizer)
        loggers = Loggers(out, cfg, OmegaConf.to_container(cfg, resolve=True), job_type="eval")
        try:
            results, rows, samples = eval_benchmarks(cfg, engine, benches, step, progress=cfg.logger.progress,
                                                     source="gspo eval")
            loggers.evals(rows, samples)
        finally:
            note = loggers.close()
    finally:
        out.close()
    for name, metrics in results.items():
        log(f"{name}: " + ", ".join(f"{m} {v:.4g}" for m, v in metrics.items()))
    if note:
        log(note)
    return out.path


def _eval_output(cfg) -> RunDir:
    """Where the eval's rows go, checked before the model loads: `eval.output` (created), else the run of
    `eval.run`, locked (refused while its trainer or another eval writes it, or when it is not writable:
    both say eval.output=), else a new folder under results/evals/."""
    if cfg.eval.output is not None or cfg.eval.run is None:
        path = Path(cfg.eval.output or Path("results") / "evals" / _stamp(cfg.model.name)).expanduser()
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise GspoError(f"eval.output={path}: cannot create it ({e.strerror}); pass a writable folder") from None
        if not os.access(path, os.W_OK | os.X_OK):
            raise GspoError(f"eval.output={path} is not writable; pass a writable folder")
        return RunDir(path)
    path = Path(cfg.eval.run).expanduser()
    if not os.access(path, os.W_OK | os.X_OK):
        raise GspoError(f"run {path} is not writable (read-only or another user's): write this eval's rows "
                        "elsewhere with eval.output=<folder>")
    try:
        return RunDir.open(str(path.parent), path.name, resume=True)
    except GspoError as e:
        raise GspoError(f"{e} (to evaluate it meanwhile, write the rows elsewhere: eval.output=<folder>)") from None


def eval_checkpoint(cfg) -> Path:
    """The checkpoint of `eval.run` to evaluate: step `eval.step`, else the newest, which must be intact (a
    damaged newest one is refused, naming the newest intact one, rather than evaluated or passed over)."""
    run = RunDir(Path(cfg.eval.run).expanduser())
    folders = run.step_folders()
    if cfg.eval.step is not None:
        chosen = [f for f in folders if checkpoint_step(f) == cfg.eval.step]
        if not chosen:
            kept = ", ".join(str(checkpoint_step(f)) for f in folders) or "none"
            raise GspoError(f"eval.step={cfg.eval.step}: run {run.path} has no checkpoint of that step (kept: {kept})")
        problem = checkpoint_problem(chosen[0])
        if problem is not None:
            raise GspoError(f"eval.step={cfg.eval.step}: {chosen[0]} is not intact ({problem})")
        return chosen[0]
    if not folders:
        raise GspoError(f"run {run.path} has no checkpoint yet")
    problem = checkpoint_problem(folders[-1])
    if problem is not None:
        intact = run.latest_checkpoint()
        hint = (f"evaluate the newest intact one with eval.step={checkpoint_step(intact)}" if intact is not None
                else "no checkpoint of the run is intact")
        raise GspoError(f"the run's newest checkpoint {folders[-1]} is not intact ({problem}): {hint}")
    return folders[-1]


def _eval_model(cfg, ckpt: Path | None, log):
    """(model, tokenizer, step) for the checkpoint `ckpt` of `eval.run`, else `cfg.model` (step None)."""
    if ckpt is None:
        if cfg.model.name == "tiny":
            log("evaluating the embedded tiny model (model=tiny); another: model=hf model.name=<path or hub id>")
        return *load_policy(cfg, log), None
    if fsdp.is_sharded_checkpoint(ckpt) and not (ckpt / "model.safetensors").exists():
        raise GspoError(f"{ckpt} holds FSDP shards only: gspo export-hf {ckpt} <folder>, then "
                        "gspo eval model=hf model.name=<folder>")
    step = int(json.loads((ckpt / "trainer_state.json").read_text())["step"])
    log(f"evaluating {ckpt} (step {step})")
    model, tokenizer = load_policy(cfg, log, path=str(ckpt), merge=True)  # a LoRA adapter folded into the base
    return model, tokenizer, step


def _stamp(model: str) -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{Path(model.rstrip('/')).name}"
