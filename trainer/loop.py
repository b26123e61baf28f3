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
from pathlib import Path
from shlex import quote

import torch
from omegaconf import OmegaConf

from gspo.algos import frac_zero_std_groups, mismatch_metrics
from gspo.conf.compose import config_to_yaml
from gspo.conf.errors import GspoError, interrupt_said
from gspo.evals.sandbox import accept_weak
from gspo.trainer.assets import check_offline, fetch_command
from gspo.trainer.engines.logp_origin import ENGINE, old_logp_origin
from gspo.trainer.engines.registry import engine_kind, make_engine
from gspo.trainer.engines.rollout import Rollout
from gspo.trainer.evaluate import eval_benchmarks, eval_task, load_benches, task_eval_rows
from gspo.trainer.model.logprobs import compile_body
from gspo.trainer.model.models import cache_root, pick_device
from gspo.trainer.model.precision import Precision
from gspo.trainer.parallel import distributed, fsdp
from gspo.trainer.parallel.distributed import FollowerRun, NullLoggers, World
from gspo.trainer.parallel.moe import RoutingRecorder
from gspo.trainer.policy import known_start, load_policy, start_of
from gspo.trainer.preflight import check_run
from gspo.trainer.run.collapse import CollapseDetector
from gspo.trainer.run.guards import NonFinite, check_finite, handle_nonfinite
from gspo.trainer.run.loggers import Loggers, check_wandb_folder
from gspo.trainer.run.progress import Progress
from gspo.trainer.run.rebuild import rebuild_status, replayed_detector
from gspo.trainer.run.rundir import (
    ESTIMATOR_CARD,
    SET_ASIDE,
    RunDir,
    atomic_write_text,
    checkpoint_step,
    default_run_id,
    missing_steps,
    read_jsonl,
)
from gspo.trainer.run.seeds import step_seed
from gspo.trainer.state import load_checkpoint, make_optimizer, save_checkpoint, save_sharded_checkpoint
from gspo.trainer.step.advantages import corrected, rollout_advantages
from gspo.trainer.step.context import StepContext
from gspo.trainer.step.explain import estimator_card
from gspo.trainer.step.lagged import LaggedBatches, lag_metrics
from gspo.trainer.step.reduction import to_host
from gspo.trainer.step.sampling import Sampled, format_prompts, sample_batch
from gspo.trainer.step.scoring import old_logprobs
from gspo.trainer.step.update import Batch, run_updates
from gspo.trainer.tasks.registry import build_task
from gspo.trainer.tasks.task_types import Task
from gspo.vocab.choices import OnNonfinite, Replay, TrainPrecision
from gspo.vocab.metrics import (
    ENTROPY,
    EVAL,
    EVAL_ACCURACY,
    FRAC_ZERO_STD,
    LEN_MAX,
    LEN_MEAN,
    REWARD_MEAN,
    REWARD_STD,
    REWARD_TASK,
    TIME_PHASE,
    TIME_ROLLOUT,
    TIME_STEP,
    TIME_UPDATE,
    TOKENS_PER_S,
    TRUNCATED_FRAC,
)


def train(cfg, log=print) -> Path:
    """Run (or resume) the training job described by `cfg`; returns the run directory."""
    accept_weak(cfg.eval.weak_sandbox)  # before any code is graded (the task's probe, rewards, evals)
    check_offline(cfg, fetch_command(cfg))  # offline: every missing hub asset in one line, before any loads
    task = build_task(cfg.task)  # bad data fails here, before anything is written
    benches = load_benches(cfg)
    world, device = distributed.start(pick_device(cfg.device))  # [distributed] one process without torchrun
    clean = False
    try:
        precision_name = check_run(cfg, task, world, device)  # every component's rules, before anything is written
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
    world = compute[2]
    if cfg.resume and world.main:
        rebuild_status(run, cfg, EVAL.format(cfg.task.name, EVAL_ACCURACY), log,  # a damaged run.json, its facts kept
                       start=lambda: known_start(cfg))
        check_stopped(run, cfg.train.past_stop)  # before the model loads
        check_wandb_folder(run.path, cfg.logger.wandb)
    ckpt, unrebuilt = _resume_point(run, log) if cfg.resume and world.main else (None, [])
    ckpt = distributed.broadcast(ckpt, world)  # [distributed] every rank loads rank 0's choice
    sharded = bool(cfg.train.fsdp)  # [FSDP] trainer/parallel/fsdp.py; fsdp.check has made sure there are ranks
    if ckpt and fsdp.is_sharded_checkpoint(ckpt) != sharded:
        raise GspoError(f"resume: {ckpt.name} was saved with train.fsdp={not sharded}; resume with the same setting")
    model, tokenizer, precision, bf16 = _policy(cfg, ckpt, compute, log)
    torch.manual_seed(cfg.seed)
    optimizer, scheduler = make_optimizer(precision.master, cfg.train)
    start = load_checkpoint(ckpt, optimizer, scheduler, precision, model) if ckpt else 0
    _open_run(cfg, run, ckpt, start, world, unrebuilt, log, None if ckpt else start_of(cfg, model))
    status, error, loggers, ctx = "failed", None, None, None
    previous = {sig: signal.signal(sig, _raise_interrupt) for sig in ENDING_SIGNALS  # an ignored one stays ignored:
                if signal.getsignal(sig) != signal.SIG_IGN}  # `nohup gspo train ...` asked to outlive its terminal
    try:
        loggers = Loggers(run, cfg, OmegaConf.to_container(cfg, resolve=True), log=log) if world.main else NullLoggers()
        engine = make_engine(cfg, model, tokenizer)
        ref_model = _reference(cfg, model, log, resumed=ckpt is not None,
                               shard=(lambda m: fsdp.shard(m, bf16=bf16)) if sharded else None)
        replay = cfg.algo.routing_replay  # none, trainer (R2) or rollout (R3): whose experts are compared and replayed
        routing = RoutingRecorder(model, replay=replay != Replay.NONE,
                                  source=Replay.ROLLOUT if replay == Replay.ROLLOUT else Replay.TRAINER)
        ctx = StepContext.of(cfg, model=model, precision=precision, optimizer=optimizer, scheduler=scheduler,
                             ref_model=ref_model, engine=engine, routing=routing, world=world)
        if cfg.rollout.lag:
            ctx = ctx.but(lagged=_lagged(cfg, ctx, task, tokenizer, ckpt, start, log))
        _steps(cfg, run, ctx, (task, benches), loggers, start, tokenizer, log)
        status = "finished"
    except (KeyboardInterrupt, SystemExit) as e:  # SystemExit: a Slurm job preempted (submitit requeues it, then exits)
        status = "interrupted"
        log(f"interrupted: {run.path} is kept; continue with: gspo train {quote(f'resume={run.path}')}")
        interrupt_said(e, mark=True)
        raise
    except Exception as e:
        error = f"{type(e).__name__}: {e}".splitlines()[0]
        if not world.main:
            run.fail(error)  # [distributed] torchrun stops the other ranks next; rank 0 keeps this error
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if ctx is not None and ctx.lagged is not None:
            ctx.lagged.close()
        status, error, extra = distributed.final_status(run, status, error, world)
        try:
            run.set_status(status, **({"error": error} if error else {}), **extra)
        except OSError as e:  # the disk that failed the run fails this write too: readers show it as dead
            log(f"could not record status {status} in {run.path / 'run.json'}: {e.strerror}")
        if loggers is not None:
            note = loggers.close(0 if status == "finished" else 1)
            if note:
                log(note)
    return run.path


def _lagged(cfg, ctx: StepContext, task: Task, tokenizer, ckpt: Path | None, start: int, log) -> LaggedBatches:
    """rollout.lag = k >= 1: the batches drawn k updates behind by a copy of the policy, with a resumed run's pending
    batches read back from its checkpoint."""
    k = cfg.rollout.lag
    lagged = LaggedBatches(ctx, task, lambda m: engine_kind(cfg.rollout.engine).build(cfg, m, tokenizer, want_logprobs=True), k)
    if ckpt:
        lagged.load(ckpt, start)
    log(f"rollout.lag={k}: the batch of step t is drawn by the weights of step t-{k} (the policy after t-{k + 1} updates) "
        f"while step t updates; steps 1..{k + 1} train on batches the start model drew (lag/updates_behind "
        f"0..{k - 1} before step {k + 1})" if not ckpt else f"rollout.lag={k}: the pending batches of steps {start + 1}.."
        f"{start + k} read back from {ckpt.name}")
    return lagged


def _policy(cfg, ckpt: Path | None, compute, log) -> tuple:
    """(model, tokenizer, Precision, bf16) on the run's device: loaded (rank 0 first: a cold start or hub
    download is made once, the other ranks read the cache), compiled and sharded as configured. A sharded
    checkpoint's weights are its shards: the model starts as the run did and load_checkpoint loads them."""
    device, precision_name, world = compute
    sharded = bool(cfg.train.fsdp)
    model, tokenizer = distributed.main_first(
        lambda: load_policy(cfg, log, path=str(ckpt) if ckpt and not sharded else None), world)
    model.to(device)
    if cfg.train.compile:
        compile_body(model, cache_root(cfg.model.tiny.cache_dir))
    bf16 = precision_name == TrainPrecision.BF16
    if sharded:  # bf16 becomes FSDP's mixed-precision policy over fp32 shards
        fsdp.shard(model, bf16=bf16)
        precision_name = "fp32"
    return model, tokenizer, Precision(model, precision_name, device), bf16


def _open_run(cfg, run: RunDir, ckpt: Path | None, start: int, world: World, unrebuilt: list[int], log,
              origin: dict | None) -> None:
    """Logs cut back to the restart point (rows set aside, never lost), the config written, status running
    (with the weights a fresh run starts from, `origin`: a resumed run keeps what its first attempt recorded)."""
    aside = run.truncate_logs(start if ckpt else -1)  # from scratch: a step-0 row of a killed attempt goes too
    if aside:
        log(f"resume: {'rows after step ' + str(start) if ckpt else 'the rows of the earlier attempt'} kept aside in "
            f"{run.path / SET_ASIDE}/ ({', '.join(f'{n} of {name}' for name, n in aside.items())}); the run logs "
            "those steps again as it redoes them")
    saved = copy.deepcopy(cfg)
    saved.train.past_stop = False  # an action of this resume, not a setting: the next stop stops the run again
    run.write_config(config_to_yaml(saved))
    atomic_write_text(run.path / ESTIMATOR_CARD, estimator_card(cfg, world_size=world.size))  # `gspo explain`'s card
    run.set_status("running", step=start, run_dir=str(run.path), **({"world_size": world.size} if world.size > 1 else {}),
                   **({"unreadable_steps": unrebuilt} if unrebuilt else {}), **({"start": origin} if origin else {}),
                   **(_past_stop(run, cfg) if world.main else {}))  # [distributed] only rank 0 reads run.json


def check_stopped(run: RunDir, past_stop: bool) -> None:
    """A run a rule stopped (run.json `stopped`: train.stop_on_collapse, a non-finite value) and whose stop was
    recorded whole (finished or failed) stays stopped on a bare resume: one line naming the stop and the option
    that trains on past it. A run killed before its stop was recorded whole redoes its last steps as any resume."""
    info = run.status()
    stopped = info.get("stopped")
    if not stopped or past_stop or info.get("status") not in ("finished", "failed"):
        return
    why = (info.get("collapsed") or {}).get("reason") if stopped == "collapse" else info.get("error")
    raise GspoError(f"run {run.path} stopped at step {info.get('step')} ({stopped}{': ' + why if why else ''}); a bare "
                    "resume leaves it stopped: add train.past_stop=true to train on past the stop")


def _past_stop(run: RunDir, cfg) -> dict:
    """run.json's fields for a resume that trains on past a stop: `stopped` cleared, the stop kept in `past_stops`."""
    info = run.status()
    if not (cfg.resume and cfg.train.past_stop and info.get("stopped")):
        return {}
    return {"stopped": None, "past_stops": [*info.get("past_stops", []), {"stopped": info["stopped"], "step": info.get("step")}]}


def _steps(cfg, run: RunDir, ctx: StepContext, work: tuple, loggers, start: int, tokenizer, log) -> None:
    """Steps start+1.. of the run, with the step-0 eval of a fresh one; `work`: (task, benchmarks). Stops at
    train.steps, or at a collapse with train.stop_on_collapse."""
    task, benches = work
    world, sharded = ctx.world, bool(cfg.train.fsdp)
    collapse = _collapse_detector(cfg, task, run)
    # [distributed] rank 0 evaluates, the others wait in the next collective; under FSDP (whose forwards are
    # collectives) every rank evaluates and rank 0 alone writes
    evaluates = world.main or sharded
    with Progress(cfg.train.steps, start, enabled=cfg.logger.progress and world.main) as bar:
        say = bar.wrap(log)
        if start == 0 and evaluates:
            bar.phase("eval at step 0")
            row0 = _evaluate(cfg, ctx.engine, task, benches, 0, loggers, say, final=cfg.train.steps == 0)
            loggers.metrics(0, row0)
            _watch(collapse, cfg, run, 0, row0, say)
        for step in range(start + 1, cfg.train.steps + 1):
            bar.phase(None)
            try:
                row = train_step(step, ctx, task, loggers)
            except NonFinite as e:
                row = handle_nonfinite(cfg, run, step, e, say)
            last = step == cfg.train.steps
            evaluated = evaluates and (last or bool(cfg.train.eval_every and step % cfg.train.eval_every == 0))
            if evaluated:
                bar.phase(f"eval at step {step}")
                row |= _evaluate(cfg, ctx.engine, task, benches, step, loggers, say, final=last)
            stop = distributed.broadcast(world.main and _watch(collapse, cfg, run, step, row, say), world)
            # a run stopped early ends with a final eval; when the rule read the step's intermediate one, the
            # held-out task is evaluated again at final_eval_k (a second row of the step, the last, which the
            # report reads) and the benchmarks are not
            if stop and evaluates and not last and (not evaluated or cfg.train.final_eval_k != cfg.train.eval_k):
                bar.phase(f"eval at step {step} (stopped early)")
                row |= _evaluate(cfg, ctx.engine, task, [] if evaluated else benches, step, loggers, say, final=True)
            loggers.metrics(step, row)
            last = last or stop
            if last or (cfg.train.save_every and step % cfg.train.save_every == 0):
                _save(cfg, run, step, ctx, tokenizer, full=last)
            run.set_status("running", step=step)
            bar.advance(row)
            if stop:
                break


def _save(cfg, run: RunDir, step: int, ctx: StepContext, tokenizer, *, full: bool) -> None:
    """A checkpoint of step `step`: sharded by every rank under FSDP (`full`: also the whole weights), else by rank 0."""
    parts = (ctx.model, tokenizer, ctx.optimizer, ctx.scheduler, ctx.precision)
    if cfg.train.fsdp:
        save_sharded_checkpoint(run, step, *parts, ctx.world, keep=cfg.train.keep_checkpoints, full=full)
    elif ctx.world.main:
        save_checkpoint(run, step, *parts, keep=cfg.train.keep_checkpoints,
                        extra=ctx.lagged.save if ctx.lagged is not None else None)


def _resume_point(run: RunDir, log) -> tuple[Path | None, list[int]]:
    """The checkpoint a resume starts from, and the steps whose metrics rows stay missing. The newest intact
    checkpoint, unless a step it covers has no readable row (torn by a kill, damaged): then the newest intact
    checkpoint before that step, so the run redoes the step and logs its row again (the newer checkpoints are
    set aside as superseded-step_N). When no kept checkpoint is that old, the missing rows are said and
    recorded in run.json (unreadable_steps), and the run goes on from the newest."""
    ckpt = run.latest_checkpoint(log, set_aside=True)
    if ckpt is None:
        log(f"resume: {run.path} has no intact checkpoint, starting at step 0")
        return None, []
    missing = missing_steps(read_jsonl(run.path / "metrics.jsonl"), checkpoint_step(ckpt))
    if missing:
        earlier = run.latest_checkpoint(log, set_aside=True, before=missing[0])
        if earlier is not None:
            superseded = run.set_aside_checkpoints(after=checkpoint_step(earlier))
            log(f"resume: metrics.jsonl has no readable row for step(s) {_steps_text(missing)}; rebuilding them from "
                f"{earlier.name} ({', '.join(superseded)} set aside as superseded-*)")
            return earlier, []
        log(f"resume: metrics.jsonl has no readable row for step(s) {_steps_text(missing)} and no kept checkpoint "
            f"precedes them: they stay missing (run.json unreadable_steps); resuming from {ckpt.name}")
        return ckpt, missing
    log(f"resume: from {ckpt.name}")
    return ckpt, []


def _steps_text(steps: list[int]) -> str:
    return ", ".join(map(str, steps[:10])) + (f" and {len(steps) - 10} more" if len(steps) > 10 else "")


def _collapse_detector(cfg, task: Task, run: RunDir) -> CollapseDetector:
    """A detector that has seen the run's logged rows (a resumed run continues where it was)."""
    return replayed_detector(run, cfg, EVAL.format(task.name, EVAL_ACCURACY), read_jsonl(run.path / "metrics.jsonl"))


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


# a scheduler's kill and a closed terminal (SIGHUP: the ssh session or the window that ran it went away) end a run
# as Ctrl-C does: recorded interrupted, resumable, exit 128 + the signal; unless the run was started with the signal
# ignored (nohup ignores SIGHUP): that choice is the user's, and the run outlives its terminal as asked
ENDING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


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


def train_step(step: int, ctx: StepContext, task: Task, loggers) -> dict:
    """One rollout batch and its updates; returns the step's metrics row. Every tensor lives on the model's
    device; the vLLM engine's CPU rollout is moved there once. With several processes (`ctx.world`), this rank
    generates and grades its own groups, then every rank holds the whole batch and the scoring and update
    forwards are dealt out (trainer/parallel/distributed.py): the update and the row are the whole batch's."""
    engine, algo, G = ctx.engine, ctx.algo, ctx.train.group_size
    t0 = time.perf_counter()
    # prompts drawn, sampled, graded, shaped (and, with dynamic sampling, uninformative groups replaced); under a lag,
    # drawn earlier by older weights (trainer/step/lagged.py) while the next is drawn beside this step's update
    sampled, version, waited = (ctx.lagged.take(step) if ctx.lagged is not None else
                                (sample_batch(step, ctx, engine, task, ctx.precision.device, ctx.world), None, 0.0))
    rollout, rewards, items, prompts = sampled.rollout, sampled.rewards, sampled.items, sampled.prompts
    golds = [it.gold for it in items for _ in range(G)]
    t1 = time.perf_counter()
    try:
        check_finite("reward", rewards)
        advantages = rollout_advantages(algo, rewards, G, task=task, prompts=[it.prompt for it in items for _ in range(G)],
                                        rollout=rollout, tokenizer=engine.tokenizer, golds=golds,
                                        task_rewards=sampled.task_rewards)  # [N], or [N, T] per token
        old_logp, entropy, ref_logp = old_logprobs(ctx, rollout)
        lengths = rollout.completion_mask.sum(-1).long().tolist()  # [N] the update's bookkeeping, on the host
        prompt = rollout.attention_mask[:, : rollout.input_ids.shape[1] - rollout.n_completion]
        pad_left = (prompt.shape[1] - prompt.sum(-1)).long().tolist()  # [N] (left-padded prompts)
        # a mismatch correction scales the advantages; the loss's old log-probs are the sampler's or the trainer's
        advantages, loss_old_logp, correction = corrected(algo, advantages, old_logp, rollout)
        batch = Batch(rollout, advantages, loss_old_logp, ref_logp, lengths, ctx.routing, pad_left)
        check_finite("old log-prob", batch.old_logp[rollout.completion_mask.bool()])
        t_scored = time.perf_counter()
        metrics = to_host(run_updates(ctx, batch, seed=step_seed(ctx.seed, step, "shuffle"),
                                      undoable=ctx.train.on_nonfinite == OnNonfinite.SKIP))
    except NonFinite as e:
        e.dump |= {"prompts": prompts, "completions": rollout.texts, "rewards": rewards.tolist()}
        raise
    finally:
        engine.sync_weights(ctx.model)
    t2 = time.perf_counter()
    times = {**sampled.times, "old_logp": t_scored - t1, "updates": t2 - t_scored}  # generate, grade: every round's
    if version is not None:  # under a lag, generating overlapped the update: the step's time is the wall time
        times |= {"wait": waited, "wall": t2 - t0}
    row = step_row(task.name, G, sampled, entropy, metrics | to_host(correction), times)
    if (old_logp_origin(algo) == ENGINE or version is not None) and rollout.engine_logp is not None:
        row |= to_host(mismatch_metrics(logp=old_logp, engine_logp=rollout.engine_logp, mask=rollout.completion_mask,
                                        clip_low=algo.clip_low, clip_high=algo.clip_high))
    if version is not None:
        row |= to_host(lag_metrics(step - 1 - version, old_logp, rollout))
    loggers.samples(_samples(step, prompts, rollout, sampled.task_rewards, golds, ctx.samples_per_step, task.grader))
    return row


def step_row(task_name: str, group_size: int, sampled: Sampled, entropy, update_metrics: dict,
             times: dict[str, float]) -> dict:
    """A step's metrics row: the task's rewards (reward/frac_zero_std_groups: of the rewards the advantages
    saw), completion lengths, the policy's entropy, the sampling options' metrics, the update's metrics and
    the step's timings (`times`: seconds of generate, grade, old_logp, updates; under a lag also wait, the time the
    step waited for its batch, and wall, the step's wall time, which generate and grade overlapped), read to the host
    here."""
    rollout, rewards = sampled.rollout, sampled.task_rewards
    mask = rollout.completion_mask
    lengths = mask.sum(-1)
    times = dict(times)
    step_s = times.pop("wall", None) or sum(times.values())
    return {
        REWARD_MEAN: rewards.mean().item(),
        REWARD_STD: rewards.std().item(),
        REWARD_TASK.format(task_name): rewards.mean().item(),
        FRAC_ZERO_STD: frac_zero_std_groups(sampled.rewards, group_size).item(),
        LEN_MEAN: lengths.mean().item(),
        LEN_MAX: lengths.max().item(),
        TRUNCATED_FRAC: rollout.truncated.float().mean().item(),
        ENTROPY: ((entropy * mask).sum() / mask.sum().clamp(min=1)).item(),
        **sampled.metrics,
        **update_metrics,
        TIME_ROLLOUT: times["generate"] + times["grade"],
        TIME_UPDATE: times["old_logp"] + times["updates"],
        TIME_STEP: step_s,
        # the split of the step: sampling, grading, old (and reference) log-probs, the optimizer updates
        **{TIME_PHASE.format(k): v for k, v in times.items()},
        TOKENS_PER_S: lengths.sum().item() / max(step_s, 1e-9),
    }


def _samples(step, prompts, rollout: Rollout, rewards, golds, k: int, grader: str) -> list[dict]:
    return [
        {"step": step, "prompt": prompts[i], "completion": rollout.texts[i], "gold": golds[i],
         "reward": float(rewards[i]), "truncated": bool(rollout.truncated[i]), "grader": grader}
        for i in range(min(k, len(prompts)))
    ]


def _evaluate(cfg, engine, task: Task, benches: list, step: int, loggers: Loggers, log, *, final: bool) -> dict:
    """Held-out accuracy of the task (sampled at the training temperature, train.eval_k samples per problem, or
    train.final_eval_k at the run's last eval, the one a report reads; and greedy), then any configured
    benchmarks (`eval.benches`) through the same function as `gspo eval`."""
    prompts = format_prompts(engine.tokenizer, task.eval_items, chat=cfg.model.chat_template)
    held_out = eval_task(engine, task, prompts, seed=step_seed(cfg.seed, step, "eval"), greedy=cfg.train.eval_greedy,
                         k=cfg.train.final_eval_k if final else cfg.train.eval_k)
    loggers.evals(task_eval_rows(task.name, held_out, temperature=cfg.rollout.temperature, n_problems=len(prompts),
                                 max_new_tokens=cfg.rollout.max_new_tokens, step=step, model=cfg.model.name,
                                 top_p=cfg.rollout.top_p, source="train"))
    bench_metrics, rows, samples = eval_benchmarks(cfg, engine, benches, step)
    loggers.evals(rows, samples)
    results = {task.name: held_out.metrics, **bench_metrics}
    row = {TIME_PHASE.format("eval"): held_out.seconds}  # the held-out task eval's cost (a report sets it beside its noise)
    for name, metrics in results.items():
        log(f"step {step}: " + ", ".join(f"{EVAL.format(name, k)} {v:.3f}" for k, v in metrics.items()))
        row |= {EVAL.format(name, k): v for k, v in metrics.items()}
    return row
