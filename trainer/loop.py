"""The one training loop shared by every algorithm.

    prompts -> engine: G completions each -> grader -> rewards [B, G] -> group advantages [N]
      -> old log-probs -> E epochs x M minibatches of algos.policy_loss -> metrics -> loggers
      -> every k steps: held-out eval; checkpoint

No branch here depends on the algorithm: `cfg.algo.name` picks a loss in gspo.algos and that is all.
Every random draw derives from (seed, step), so a resumed run continues as an uninterrupted one would.
"""

from __future__ import annotations

import copy
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

from gspo.algos import frac_zero_std_groups, mismatch_metrics
from gspo.conf.compose import config_to_yaml
from gspo.conf.errors import GspoError
from gspo.evals.sandbox import accept_weak
from gspo.trainer import distributed, fsdp
from gspo.trainer.advantages import check_algorithm, rollout_advantages
from gspo.trainer.collapse import CollapseDetector
from gspo.trainer.distributed import FollowerRun, NullLoggers, World
from gspo.trainer.engines import make_engine, require_engine
from gspo.trainer.evaluate import eval_benchmarks, eval_task, load_benches, task_eval_rows
from gspo.trainer.guards import NonFinite, check_finite, handle_nonfinite
from gspo.trainer.loggers import Loggers
from gspo.trainer.logprobs import compile_body
from gspo.trainer.models import pick_device
from gspo.trainer.moe import RoutingRecorder, find_routers
from gspo.trainer.policy import checked_precision, load_policy
from gspo.trainer.precision import Precision
from gspo.trainer.progress import Progress
from gspo.trainer.rollout import Rollout, concat_rollouts
from gspo.trainer.rundir import RunDir, default_run_id, read_jsonl
from gspo.trainer.seeds import step_seed
from gspo.trainer.state import load_checkpoint, make_optimizer, save_checkpoint, save_sharded_checkpoint
from gspo.trainer.task_types import Item, Task, prompt_text
from gspo.trainer.tasks import build_task
from gspo.trainer.update import Batch, old_logprobs, to_host, update


def train(cfg, log=print) -> Path:
    """Run (or resume) the training job described by `cfg`; returns the run directory."""
    accept_weak(cfg.eval.weak_sandbox)  # before any code is graded (the task's probe, rewards, evals)
    task = build_task(cfg.task)  # bad data fails here, before anything is written
    check_algorithm(cfg.algo, task)
    benches = load_benches(cfg)
    world, device = distributed.start(pick_device(cfg.device))  # [distributed] one process without torchrun
    clean = False
    try:
        distributed.check_layout(cfg.train, world, cfg.rollout)
        fsdp.check(cfg, world)
        precision_name = checked_precision(cfg, device)
        require_engine(cfg.rollout)
        cfg.run_id = distributed.broadcast(cfg.run_id or default_run_id(cfg.algo.name, cfg.seed), world)
        if world.main:
            run = RunDir.open(cfg.output_dir, cfg.run_id, resume=cfg.resume)
            distributed.clear_failures(run.path)
        else:  # [distributed] reads the run, writes nothing; rank 0 says everything
            run, log = FollowerRun(Path(cfg.output_dir) / cfg.run_id, world.rank), (lambda _message: None)
        try:
            path = _train(cfg, run, task, benches, (device, precision_name, world), log)
        finally:
            run.close()
        clean = True
        return path
    finally:
        distributed.stop(world, clean=clean)


def _train(cfg, run: RunDir, task: Task, benches: list, compute, log) -> Path:
    """The run itself, with `run` locked; `compute`: (device, precision name, world)."""
    device, precision_name, world = compute
    ckpt = run.latest_checkpoint(log, set_aside=True) if cfg.resume and world.main else None
    ckpt = distributed.broadcast(ckpt, world)  # [distributed] every rank loads rank 0's choice
    if cfg.resume:
        log(f"resume: from {ckpt.name}" if ckpt else f"resume: {run.path} has no intact checkpoint, starting at step 0")
    sharded = bool(cfg.train.fsdp)  # [FSDP] trainer/fsdp.py; fsdp.check has made sure there are ranks
    if ckpt and fsdp.is_sharded_checkpoint(ckpt) != sharded:
        raise GspoError(f"resume: {ckpt.name} was saved with train.fsdp={not sharded}; resume with the same setting")
    # a sharded checkpoint's weights are its shards: the model starts as the run did and loads them below
    # rank 0 first: a cold start or hub download is made once, the other ranks read the cache
    model, tokenizer = distributed.main_first(
        lambda: load_policy(cfg, log, path=str(ckpt) if ckpt and not sharded else None), world)
    if cfg.algo.routing_replay and not find_routers(model):
        raise GspoError(f"algo.routing_replay=true needs a Mixture-of-Experts model: {cfg.model.name} has no "
                        "top-k router modules")
    model.to(device)
    if cfg.train.compile:
        compile_body(model)
    bf16 = precision_name == "bf16"
    if sharded:  # bf16 becomes FSDP's mixed-precision policy over fp32 shards
        fsdp.shard(model, bf16=bf16)
        precision_name = "fp32"
    precision = Precision(model, precision_name, device)
    torch.manual_seed(cfg.seed)
    optimizer, scheduler = make_optimizer(precision.master, cfg.train)
    start = load_checkpoint(ckpt, optimizer, scheduler, precision, model) if ckpt else 0
    run.truncate_logs(start if ckpt else -1)  # from scratch: a step-0 row of a killed attempt goes too
    run.write_config(config_to_yaml(cfg))
    run.set_status("running", step=start, run_dir=str(run.path), **({"world_size": world.size} if world.size > 1 else {}))
    status, error, loggers = "failed", None, None
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        loggers = Loggers(run, cfg, OmegaConf.to_container(cfg, resolve=True)) if world.main else NullLoggers()
        engine = make_engine(cfg, model, tokenizer)
        ref_model = _reference(cfg, model, log, resumed=ckpt is not None,
                               shard=(lambda m: fsdp.shard(m, bf16=bf16)) if sharded else None)
        routing = RoutingRecorder(model, replay=cfg.algo.routing_replay)  # after the reference: policy only
        collapse = _collapse_detector(cfg, task, run)
        conf, policy = StepConfig.of(cfg), Policy(model, ref_model, engine, routing)
        optim = Optim(precision, optimizer, scheduler)
        # [distributed] rank 0 evaluates, the others wait in the next collective; under FSDP (whose forwards are
        # collectives) every rank evaluates and rank 0 alone writes
        evaluates = world.main or sharded
        with Progress(cfg.train.steps, start, enabled=cfg.logger.progress and world.main) as bar:
            say = bar.wrap(log)
            if start == 0 and evaluates:
                bar.phase("eval at step 0")
                row0 = _evaluate(cfg, engine, task, benches, 0, loggers, say)
                loggers.metrics(0, row0)
                _watch(collapse, cfg, run, 0, row0, say)
            for step in range(start + 1, cfg.train.steps + 1):
                bar.phase(None)
                try:
                    row = train_step(step, conf, policy, optim, task, loggers, world=world)
                except NonFinite as e:
                    row = handle_nonfinite(cfg, run, step, e, say)
                last = step == cfg.train.steps
                if evaluates and (last or (cfg.train.eval_every and step % cfg.train.eval_every == 0)):
                    bar.phase(f"eval at step {step}")
                    row |= _evaluate(cfg, engine, task, benches, step, loggers, say)
                loggers.metrics(step, row)
                stop = distributed.broadcast(world.main and _watch(collapse, cfg, run, step, row, say), world)
                last = last or stop
                save = last or (cfg.train.save_every and step % cfg.train.save_every == 0)
                if save and sharded:
                    save_sharded_checkpoint(run, step, model, tokenizer, optimizer, scheduler, precision, world,
                                            keep=cfg.train.keep_checkpoints, full=last)  # every rank
                elif save and world.main:
                    save_checkpoint(run, step, model, tokenizer, optimizer, scheduler, precision,
                                    keep=cfg.train.keep_checkpoints)
                run.set_status("running", step=step)
                bar.advance(row)
                if stop:
                    break
        status = "finished"
    except KeyboardInterrupt:
        status = "interrupted"
        log(f"interrupted: {run.path} is kept; continue with: gspo train resume={run.path}")
        raise
    except Exception as e:
        error = f"{type(e).__name__}: {e}".splitlines()[0]
        if not world.main:
            run.fail(error)  # [distributed] torchrun stops the other ranks next; rank 0 keeps this error
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
        status, error, extra = distributed.final_status(run, status, error, world)
        run.set_status(status, **({"error": error} if error else {}), **extra)
        if loggers is not None:
            note = loggers.close(0 if status == "finished" else 1)
            if note:
                log(note)
    return run.path


def _collapse_detector(cfg, task: Task, run: RunDir) -> CollapseDetector:
    """A detector that has seen the run's logged rows (a resumed run continues where it was)."""
    detector = CollapseDetector(cfg.train.collapse, f"eval/{task.name}/accuracy")
    for row in read_jsonl(run.path / "metrics.jsonl"):
        detector.observe(row)
    return detector


def _watch(detector: CollapseDetector, cfg, run: RunDir, step: int, row: dict, log) -> bool:
    """Record a collapse in run.json when this step reveals one; True if the run should stop here."""
    found = detector.observe({"step": step, **row})
    if found is None:
        return False
    run.set_status("running", collapsed={"step": found.step, "reason": found.reason})
    stop = cfg.train.stop_on_collapse
    log(f"step {step}: collapse detected: {found.reason}" + ("; stopping (train.stop_on_collapse)" if stop else ""))
    if stop:
        run.set_status("running", stopped="collapse")
    return stop


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def _reference(cfg, model, log, *, resumed: bool, shard=None):
    """The frozen initial policy for the KL term (None when kl_beta = 0). With LoRA it is the policy itself,
    scored with its adapters off. A resumed run's `model` holds the checkpoint's weights, so the reference
    is loaded afresh from where the run started; under FSDP it is loaded afresh and sharded like the policy
    (`shard`)."""
    if cfg.algo.kl_beta <= 0:
        return None
    if cfg.model.lora.r > 0:
        return model
    fresh = resumed or shard is not None
    ref = load_policy(cfg, log)[0].to(next(model.parameters()).device) if fresh else copy.deepcopy(model)
    ref.eval().requires_grad_(False)
    if shard is not None:
        shard(ref)
    return ref


def format_prompts(tokenizer, items: list[Item], *, chat: bool, repeat: int = 1) -> list[str]:
    """Prompt texts, each repeated `repeat` times; with `chat`, in the tokenizer's chat template with the
    item's system message, as `gspo eval` builds benchmark prompts."""
    texts = [prompt_text(tokenizer, it.prompt, it.system, chat=chat) for it in items]
    return [t for t in texts for _ in range(repeat)]


@dataclass(frozen=True)
class StepConfig:
    """The parts of the config one step reads (the config's own typed nodes: algo, train, rollout)."""

    algo: Any
    train: Any
    sampling: Any  # cfg.rollout
    seed: int
    chat: bool  # model.chat_template
    samples_per_step: int  # logger.samples_per_step

    @classmethod
    def of(cls, cfg) -> StepConfig:
        return cls(cfg.algo, cfg.train, cfg.rollout, cfg.seed, cfg.model.chat_template, cfg.logger.samples_per_step)


@dataclass(frozen=True)
class Policy:
    """What a step samples from and updates: the model, its frozen reference (None: no KL term), the
    rollout engine and, on MoE models, the routing recorder."""

    model: torch.nn.Module
    ref_model: torch.nn.Module | None
    engine: Any
    routing: RoutingRecorder | None = None


@dataclass(frozen=True)
class Optim:
    precision: Precision
    optimizer: torch.optim.Optimizer
    scheduler: Any


def train_step(step: int, conf: StepConfig, policy: Policy, optim: Optim, task: Task, loggers, *,
               world: World = World()) -> dict:
    """One rollout batch and its updates; returns the step's metrics row. Every tensor lives on the model's
    device; the vLLM engine's CPU rollout is moved there once. With several processes (`world`), this rank
    generates and grades its own groups, then every rank holds the whole batch and the scoring and update
    forwards are dealt out (trainer/distributed.py): the update and the row are the whole batch's."""
    precision, engine, algo, G = optim.precision, policy.engine, conf.algo, conf.train.group_size
    t0 = time.perf_counter()
    items = task.train_items(seed=conf.seed, step=step, n=conf.train.prompts_per_step)
    prompts = format_prompts(engine.tokenizer, items, chat=conf.chat, repeat=G)
    golds = [it.gold for it in items for _ in range(G)]
    groups = distributed.group_range(conf.train.prompts_per_step, world)  # [distributed] this rank's groups
    mine = slice(groups.start * G, groups.stop * G)
    # row i of the step samples with seed + i whichever rank generates it
    rollout = engine.generate(prompts[mine], seed=step_seed(conf.seed, step, "rollout") + mine.start).to(precision.device)
    t_gen = time.perf_counter()
    rewards = torch.tensor(task.rewards(rollout.texts, golds[mine]), device=precision.device)  # [N]
    rollout, rewards = _whole_batch(rollout, rewards, world, engine.tokenizer.pad_token_id)  # [distributed]
    t1 = time.perf_counter()
    try:
        check_finite("reward", rewards)
        advantages = rollout_advantages(algo, rewards, G, task=task, prompts=[it.prompt for it in items for _ in range(G)],
                                        rollout=rollout, tokenizer=engine.tokenizer)  # [N], or [N, T] per token
        old_logp, entropy, ref_logp = old_logprobs(policy.model, policy.ref_model, rollout, precision=precision,
                                                   algo=algo, train=conf.train, sampling=conf.sampling,
                                                   routing=policy.routing, world=world)
        lengths = rollout.completion_mask.sum(-1).long().tolist()  # [N] the update's bookkeeping, on the host
        batch = Batch(rollout, advantages, rollout.engine_logp if algo.old_logp_source == "engine" else old_logp,
                      ref_logp, lengths, policy.routing)
        check_finite("old log-prob", batch.old_logp[rollout.completion_mask.bool()])
        t_scored = time.perf_counter()
        metrics = to_host(update(policy.model, optim.optimizer, optim.scheduler, batch, precision=precision, algo=algo,
                                 train=conf.train, rollout=conf.sampling, seed=step_seed(conf.seed, step, "shuffle"),
                                 undoable=conf.train.on_nonfinite == "skip", world=world))
    except NonFinite as e:
        e.dump |= {"prompts": prompts, "completions": rollout.texts, "rewards": rewards.tolist()}
        raise
    finally:
        engine.sync_weights(policy.model)
    t2 = time.perf_counter()
    times = {"generate": t_gen - t0, "grade": t1 - t_gen, "old_logp": t_scored - t1, "updates": t2 - t_scored}
    row = step_row(task.name, G, rewards, rollout, entropy, metrics, times)
    if algo.old_logp_source == "engine" and rollout.engine_logp is not None:
        row |= to_host(mismatch_metrics(logp=old_logp, engine_logp=rollout.engine_logp, mask=rollout.completion_mask,
                                        clip_low=algo.clip_low, clip_high=algo.clip_high))
    loggers.samples(_samples(step, prompts, rollout, rewards, golds, conf.samples_per_step, task.grader))
    return row


def _whole_batch(rollout: Rollout, rewards: torch.Tensor, world: World, pad_id: int) -> tuple[Rollout, torch.Tensor]:
    """[distributed] Every rank's graded rows, in rank (= row) order, padded as one process pads its
    generation chunks (prompts left to the widest, completions right): the step's whole batch on every rank."""
    if world.size == 1:
        return rollout, rewards
    parts = distributed.gather_objects((rollout.to(torch.device("cpu")), rewards.cpu()), world)
    whole = concat_rollouts([r for r, _ in parts], pad_id).to(rewards.device)
    return whole, torch.cat([w for _, w in parts]).to(rewards.device)


def step_row(task_name: str, group_size: int, rewards, rollout: Rollout, entropy, update_metrics: dict,
             times: dict[str, float]) -> dict:
    """A step's metrics row: rewards, completion lengths, the policy's entropy, the update's metrics and
    the step's timings (`times`: seconds of generate, grade, old_logp, updates), read to the host here."""
    mask = rollout.completion_mask
    lengths = mask.sum(-1)
    step_s = sum(times.values())
    return {
        "reward/mean": rewards.mean().item(),
        "reward/std": rewards.std().item(),
        f"reward/{task_name}": rewards.mean().item(),
        "reward/frac_zero_std_groups": frac_zero_std_groups(rewards, group_size).item(),
        "completion/len_mean": lengths.mean().item(),
        "completion/len_max": lengths.max().item(),
        "completion/truncated_frac": rollout.truncated.float().mean().item(),
        "policy/entropy": ((entropy * mask).sum() / mask.sum().clamp(min=1)).item(),
        **update_metrics,
        "time/rollout_s": times["generate"] + times["grade"],
        "time/update_s": times["old_logp"] + times["updates"],
        "time/step_s": step_s,
        # the split of the step: sampling, grading, old (and reference) log-probs, the optimizer updates
        **{f"time/{k}_s": v for k, v in times.items()},
        "throughput/tokens_per_s": lengths.sum().item() / max(step_s, 1e-9),
    }


def _samples(step, prompts, rollout: Rollout, rewards, golds, k: int, grader: str) -> list[dict]:
    return [
        {"step": step, "prompt": prompts[i], "completion": rollout.texts[i], "gold": golds[i],
         "reward": float(rewards[i]), "truncated": bool(rollout.truncated[i]), "grader": grader}
        for i in range(min(k, len(prompts)))
    ]


def _evaluate(cfg, engine, task: Task, benches: list, step: int, loggers: Loggers, log) -> dict:
    """Held-out accuracy of the task (sampled at the training temperature, and greedy), then any
    configured benchmarks (`eval.benches`) through the same function as `gspo eval`."""
    prompts = format_prompts(engine.tokenizer, task.eval_items, chat=cfg.model.chat_template)
    task_metrics = eval_task(engine, task, prompts, seed=step_seed(cfg.seed, step, "eval"), greedy=cfg.train.eval_greedy)
    loggers.evals(task_eval_rows(task.name, task_metrics, temperature=cfg.rollout.temperature, n_problems=len(prompts),
                                 max_new_tokens=cfg.rollout.max_new_tokens, step=step, model=cfg.model.name,
                                 top_p=cfg.rollout.top_p, source="train"))
    bench_metrics, rows, samples = eval_benchmarks(cfg, engine, benches, step)
    loggers.evals(rows, samples)
    results = {task.name: task_metrics, **bench_metrics}
    row = {}
    for name, metrics in results.items():
        log(f"step {step}: " + ", ".join(f"eval/{name}/{k} {v:.3f}" for k, v in metrics.items()))
        row |= {f"eval/{name}/{k}": v for k, v in metrics.items()}
    return row
