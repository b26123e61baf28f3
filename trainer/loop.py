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
from contextlib import nullcontext
from pathlib import Path

import torch
from omegaconf import OmegaConf

from gspo.algos import frac_zero_std_groups, mismatch_metrics
from gspo.conf.compose import config_to_yaml
from gspo.conf.errors import GspoError
from gspo.trainer.advantages import check_algorithm, rollout_advantages
from gspo.trainer.collapse import CollapseDetector
from gspo.trainer.engines import make_engine, require_engine
from gspo.trainer.evaluate import eval_benchmarks, eval_task, load_benches, task_eval_rows
from gspo.trainer.guards import NonFinite, check_finite, handle_nonfinite
from gspo.trainer.loggers import Loggers
from gspo.trainer.logprobs import compile_body, completion_logprobs
from gspo.trainer.lora import adapters_disabled
from gspo.trainer.models import pick_device
from gspo.trainer.moe import RoutingRecorder, find_routers
from gspo.trainer.policy import checked_precision, load_policy
from gspo.trainer.precision import Precision
from gspo.trainer.progress import Progress
from gspo.trainer.rollout import Rollout
from gspo.trainer.rundir import RunDir, default_run_id, read_jsonl
from gspo.trainer.seeds import step_seed
from gspo.trainer.state import load_checkpoint, make_optimizer, save_checkpoint
from gspo.trainer.task_types import Item, Task
from gspo.trainer.tasks import build_task
from gspo.trainer.update import Batch, to_host, update


def train(cfg, log=print) -> Path:
    """Run (or resume) the training job described by `cfg`; returns the run directory."""
    task = build_task(cfg.task)  # bad data fails here, before anything is written
    check_algorithm(cfg.algo, task)
    benches = load_benches(cfg)
    device = pick_device(cfg.device)
    precision_name = checked_precision(cfg, device)
    require_engine(cfg.rollout)
    cfg.run_id = cfg.run_id or default_run_id(cfg.algo.name, cfg.seed)
    run = RunDir.open(cfg.output_dir, cfg.run_id, resume=cfg.resume)
    try:
        return _train(cfg, run, task, benches, (device, precision_name), log)
    finally:
        run.close()


def _train(cfg, run: RunDir, task: Task, benches: list, compute, log) -> Path:
    """The run itself, with `run` locked; `compute`: (device, precision name)."""
    device, precision_name = compute
    ckpt = run.latest_checkpoint(log, set_aside=True) if cfg.resume else None
    if cfg.resume:
        log(f"resume: from {ckpt.name}" if ckpt else f"resume: {run.path} has no intact checkpoint, starting at step 0")
    model, tokenizer = load_policy(cfg, log, path=str(ckpt) if ckpt else None)
    if cfg.algo.routing_replay and not find_routers(model):
        raise GspoError(f"algo.routing_replay=true needs a Mixture-of-Experts model: {cfg.model.name} has no "
                        "top-k router modules")
    model.to(device)
    if cfg.train.compile:
        compile_body(model)
    precision = Precision(model, precision_name, device)
    torch.manual_seed(cfg.seed)
    optimizer, scheduler = make_optimizer(precision.master, cfg.train)
    start = load_checkpoint(ckpt, optimizer, scheduler, precision) if ckpt else 0
    run.truncate_logs(start if ckpt else -1)  # from scratch: a step-0 row of a killed attempt goes too
    run.write_config(config_to_yaml(cfg))
    run.set_status("running", step=start, run_dir=str(run.path))
    status, error, loggers = "failed", None, None
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        loggers = Loggers(run, cfg, OmegaConf.to_container(cfg, resolve=True))
        engine = make_engine(cfg, model, tokenizer)
        ref_model = _reference(cfg, model, log, resumed=ckpt is not None)
        routing = RoutingRecorder(model, replay=cfg.algo.routing_replay)  # after the reference: policy only
        collapse = _collapse_detector(cfg, task, run)
        if start == 0:
            row0 = _evaluate(cfg, engine, task, benches, 0, loggers, log)
            loggers.metrics(0, row0)
            _watch(collapse, cfg, run, 0, row0, log)
        with Progress(cfg.train.steps, start, enabled=cfg.logger.progress) as bar:
            say = bar.wrap(log)
            for step in range(start + 1, cfg.train.steps + 1):
                try:
                    row = train_step(cfg, step, model, ref_model, engine, task, (precision, optimizer, scheduler),
                                     loggers, routing)
                except NonFinite as e:
                    row = handle_nonfinite(cfg, run, step, e, say)
                last = step == cfg.train.steps
                if last or (cfg.train.eval_every and step % cfg.train.eval_every == 0):
                    row |= _evaluate(cfg, engine, task, benches, step, loggers, say)
                loggers.metrics(step, row)
                stop = _watch(collapse, cfg, run, step, row, say)
                last = last or stop
                if last or (cfg.train.save_every and step % cfg.train.save_every == 0):
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
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
        run.set_status(status, **({"error": error} if error else {}))
        if loggers is not None:
            loggers.close(0 if status == "finished" else 1)
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


def _reference(cfg, model, log, *, resumed: bool):
    """The frozen initial policy for the KL term (None when kl_beta = 0). With LoRA it is the policy itself,
    scored with its adapters off. A resumed run's `model` holds the checkpoint's weights, so the reference
    is loaded afresh from where the run started."""
    if cfg.algo.kl_beta <= 0:
        return None
    if cfg.model.lora.r > 0:
        return model
    ref = load_policy(cfg, log)[0].to(next(model.parameters()).device) if resumed else copy.deepcopy(model)
    ref.eval().requires_grad_(False)
    return ref


def format_prompts(tokenizer, items: list[Item], *, chat: bool, repeat: int = 1) -> list[str]:
    """Prompt texts, each repeated `repeat` times; with `chat`, in the tokenizer's chat template with the
    item's system message, as `gspo eval` builds benchmark prompts."""
    texts = [
        tokenizer.apply_chat_template([*([{"role": "system", "content": it.system}] if it.system else []),
                                       {"role": "user", "content": it.prompt}],
                                      tokenize=False, add_generation_prompt=True) if chat else it.prompt
        for it in items
    ]
    return [t for t in texts for _ in range(repeat)]


def train_step(cfg, step, model, ref_model, engine, task: Task, optim, loggers,
               routing: RoutingRecorder | None = None) -> dict:
    """One rollout batch and its updates; returns the step's metrics row. `optim`: (precision, optimizer,
    scheduler). Every tensor lives on the model's device; the vLLM engine's CPU rollout is moved there once."""
    precision, optimizer, scheduler = optim
    t0 = time.perf_counter()
    t, G = cfg.train, cfg.train.group_size
    items = task.train_items(seed=cfg.seed, step=step, n=t.prompts_per_step)
    prompts = format_prompts(engine.tokenizer, items, chat=cfg.model.chat_template, repeat=G)
    rollout = engine.generate(prompts, seed=step_seed(cfg.seed, step, "rollout")).to(precision.device)
    t_gen = time.perf_counter()
    golds = [it.gold for it in items for _ in range(G)]
    rewards = torch.tensor(task.rewards(rollout.texts, golds), device=precision.device)  # [N]
    t1 = time.perf_counter()
    try:
        check_finite("reward", rewards)
        advantages = rollout_advantages(cfg.algo, rewards, G, task=task, prompts=[it.prompt for it in items for _ in range(G)],
                                        rollout=rollout, tokenizer=engine.tokenizer)  # [N], or [N, T] per token
        sampled = _sampler_scores(cfg, precision, rollout, routing)
        old_logp, entropy = sampled or _score(model, rollout, cfg, precision, with_entropy=True, routing=routing)
        ref_logp = None
        if ref_model is not None:
            with adapters_disabled(ref_model):
                ref_logp = _score(ref_model, rollout, cfg, precision)[0]
        lengths = rollout.completion_mask.sum(-1).long().tolist()  # [N] the update's bookkeeping, on the host
        batch = Batch(rollout, advantages, rollout.engine_logp if cfg.algo.old_logp_source == "engine" else old_logp,
                      ref_logp, lengths, routing)
        check_finite("old log-prob", batch.old_logp[rollout.completion_mask.bool()])
        t_scored = time.perf_counter()
        metrics = to_host(update(model, optimizer, scheduler, batch, precision=precision, algo=cfg.algo, train=t,
                                 rollout=cfg.rollout, seed=step_seed(cfg.seed, step, "shuffle"),
                                 undoable=t.on_nonfinite == "skip"))
    except NonFinite as e:
        e.dump |= {"prompts": prompts, "completions": rollout.texts, "rewards": rewards.tolist()}
        raise
    finally:
        engine.sync_weights(model)
    t2 = time.perf_counter()
    mask = rollout.completion_mask
    lengths = mask.sum(-1)
    row = {
        "reward/mean": rewards.mean().item(),
        "reward/std": rewards.std().item(),
        f"reward/{task.name}": rewards.mean().item(),
        "reward/frac_zero_std_groups": frac_zero_std_groups(rewards, G).item(),
        "completion/len_mean": lengths.mean().item(),
        "completion/len_max": lengths.max().item(),
        "completion/truncated_frac": rollout.truncated.float().mean().item(),
        "policy/entropy": ((entropy * mask).sum() / mask.sum().clamp(min=1)).item(),
        **metrics,
        "time/rollout_s": t1 - t0,
        "time/update_s": t2 - t1,
        "time/step_s": t2 - t0,
        # the split of the step: sampling, grading, old (and reference) log-probs, the optimizer updates
        "time/generate_s": t_gen - t0,
        "time/grade_s": t1 - t_gen,
        "time/old_logp_s": t_scored - t1,
        "time/updates_s": t2 - t_scored,
        "throughput/tokens_per_s": lengths.sum().item() / max(t2 - t0, 1e-9),
    }
    if cfg.algo.old_logp_source == "engine" and rollout.engine_logp is not None:
        row |= to_host(mismatch_metrics(logp=old_logp, engine_logp=rollout.engine_logp, mask=mask,
                                        clip_low=cfg.algo.clip_low, clip_high=cfg.algo.clip_high))
    loggers.samples(_samples(step, prompts, rollout, rewards, golds, cfg.logger.samples_per_step))
    return row


def _sampler_scores(cfg, precision: Precision, rollout: Rollout, routing: RoutingRecorder | None):
    """(old log-probs, entropy) [N, T] as the sampler computed them while it drew the tokens, where that is
    the old policy's own to fp tolerance (algo.old_logp_source=auto): the lean hf sampler on the trained
    model, sampling and scoring both in fp32, and no MoE routers to record. None: score with a forward."""
    exact = (cfg.algo.old_logp_source == "auto" and rollout.engine_entropy is not None
             and cfg.rollout.engine == "hf" and cfg.rollout.sampler == "lean" and cfg.rollout.dtype == "auto"
             and precision.dtype == torch.float32 and not (routing is not None and routing.routers))
    return (rollout.engine_logp, rollout.engine_entropy) if exact else None


@torch.no_grad()
def _score(model, rollout: Rollout, cfg, precision: Precision, *, with_entropy: bool = False,
           routing: RoutingRecorder | None = None):
    """Log-probs (and entropy) of the sampled tokens under `model`, in row chunks to bound memory; with
    `routing`, the experts each token was sent to are recorded for the update (MoE models)."""
    rows = cfg.train.micro_batch_size or max(1, rollout.input_ids.shape[0] // cfg.train.minibatches)
    if routing is not None:
        routing.start_batch(rollout.attention_mask)
    logps, ents = [], []
    for s in range(0, rollout.input_ids.shape[0], rows):
        with precision.autocast(), routing.recording(slice(s, s + rows)) if routing is not None else nullcontext():
            lp, ent = completion_logprobs(model, rollout.input_ids[s : s + rows], rollout.attention_mask[s : s + rows],
                                          rollout.n_completion, temperature=cfg.rollout.temperature,
                                          top_p=cfg.rollout.top_p, chunk=cfg.train.logprob_chunk,
                                          with_entropy=with_entropy)
        logps.append(lp * rollout.completion_mask[s : s + rows])
        ents.append(ent)
    return torch.cat(logps), (torch.cat(ents) if with_entropy else None)


def _samples(step, prompts, rollout: Rollout, rewards, golds, k: int) -> list[dict]:
    return [
        {"step": step, "prompt": prompts[i], "completion": rollout.texts[i], "gold": golds[i],
         "reward": float(rewards[i]), "truncated": bool(rollout.truncated[i])}
        for i in range(min(k, len(prompts)))
    ]


def _evaluate(cfg, engine, task: Task, benches: list, step: int, loggers: Loggers, log) -> dict:
    """Held-out accuracy of the task (sampled at the training temperature, and greedy), then any
    configured benchmarks (`eval.benches`) through the same function as `gspo eval`."""
    prompts = format_prompts(engine.tokenizer, task.eval_items, chat=cfg.model.chat_template)
    task_metrics = eval_task(engine, task, prompts, seed=step_seed(cfg.seed, step, "eval"), greedy=cfg.train.eval_greedy)
    loggers.evals(task_eval_rows(task.name, task_metrics, temperature=cfg.rollout.temperature, n_problems=len(prompts),
                                 max_new_tokens=cfg.rollout.max_new_tokens, step=step, model=cfg.model.name,
                                 top_p=cfg.rollout.top_p))
    bench_metrics, rows, samples = eval_benchmarks(cfg, engine, benches, step)
    loggers.evals(rows, samples)
    results = {task.name: task_metrics, **bench_metrics}
    row = {}
    for name, metrics in results.items():
        log(f"step {step}: " + ", ".join(f"eval/{name}/{k} {v:.3f}" for k, v in metrics.items()))
        row |= {f"eval/{name}/{k}": v for k, v in metrics.items()}
    return row
