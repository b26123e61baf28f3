"""Data parallelism over the processes torchrun starts: who this process is, which groups it owns, and the
reductions that make a step's update and metrics those of one process running the whole batch.

    torchrun --nproc-per-node 2 -m gspo.cli.main train algo=gspo ...      (or: torchrun --no-python ... gspo train)

torchrun sets RANK, WORLD_SIZE, LOCAL_RANK and the rendezvous address; without them this is one process and
every function here is the identity. The contract, with B prompts of G completions per step and W ranks:
- rank r owns groups [r B/W, (r+1) B/W) of the step's prompts (a group is never split: its advantages need
  all G rewards), generates and grades them, with the step's seed offset by its first row, so (each engine
  sampling row i with seed + i) its rows are those a single process draws;
- the graded rows are then gathered: every rank holds the step's whole batch, padded as one process pads it;
- every forward after that is dealt out in the micro-batches one process would run (`dealt`): the scoring
  chunks of the batch (chunk k to rank k mod W), and each minibatch's micro-batches (the same shuffle on
  every rank), a contiguous block of ceil(K / W) per rank (round-robin under FSDP). A rank computes the
  loss of its micro-batches with the global minibatch's sequence and token counts as denominators, so the ranks' gradients add up to the one-process gradient, and one
  all_reduce(SUM) per optimizer step adds them (before clipping: the norm is the global batch's). torch's
  DistributedDataParallel averages instead (it divides by W) and needs every rank to run the same number
  of forwards, which dealing whole micro-batches does not promise, so the sum is taken here;
- what scoring computes per row (log-probs, entropy, MoE routing) is written into a zero tensor of the
  whole batch and summed over ranks (adding zeros is exact); metric parts add up (SUM), extremes take
  MIN / MAX. Each micro-batch is computed exactly as one process computes it, so the ranks' results
  differ from one process's only in the order their sums are added.
Rank 0 alone writes the run directory, the progress bar and W&B; a failing rank writes its error into
run.json before it exits (torchrun then stops the others) and rank 0 keeps that error.
"""

from __future__ import annotations

import gc
import os
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from gspo.conf.errors import GspoError
from gspo.trainer.parallel.world import World, world_from_env  # noqa: F401  (here as before: every rank reads them from this module)
from gspo.trainer.run.rundir import RunDir, atomic_write_text
from gspo.vocab.choices import OnNonfinite

COLLECTIVE_TIMEOUT = timedelta(hours=2)
FAILED_RANK = "failed_rank"  # <run>/failed_rank<r>.txt: the error of rank r, until rank 0 records it in run.json


def export_slurm_world() -> None:
    """In a Slurm job step of several tasks (the submitit launcher's nodes x tasks_per_node, conf/hydra/launcher/),
    set the variables torchrun would (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) from Slurm's,
    through submitit: every task is then a rank, as under torchrun. Each rank keeps every GPU visible and
    picks cuda:LOCAL_RANK (`start`)."""
    env = os.environ
    if "RANK" in env or env.get("SUBMITIT_EXECUTOR") != "slurm" or int(env.get("SLURM_NTASKS", 1)) < 2:
        return
    from submitit.helpers import TorchDistributedEnvironment

    TorchDistributedEnvironment().export(set_cuda_visible_devices=False)


def start(device: torch.device) -> tuple[World, torch.device]:
    """Join the job's process group (gloo on the CPU, nccl on CUDA); returns the world and this rank's device
    (cuda:LOCAL_RANK on a GPU machine)."""
    world = world_from_env()
    if world.size == 1:
        return world, device
    if device.type == "cuda":
        device = torch.device("cuda", world.local_rank)
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        # the other ranks wait in a collective while rank 0 alone evaluates (a long benchmark may take an hour);
        # a rank that dies is noticed by torchrun at once, not through this timeout
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", timeout=COLLECTIVE_TIMEOUT)
    return world, device


def stop(world: World, *, clean: bool) -> None:
    """Leave the job's process group so that no rank aborts at exit. After a clean run every rank first meets
    the others at a barrier (no collective of any rank is still in flight); then the run's garbage is collected
    while the interpreter is whole (FSDP's modules and hooks refer to each other, so only the collector frees
    them, and gloo's worker threads must not meet their last references during interpreter shutdown: "terminate
    called without an active exception"); then the group is destroyed. After a failure no barrier: a rank that
    died would leave the others waiting in it until torchrun stops the job."""
    if world.size > 1 and dist.is_initialized():
        if clean:
            dist.barrier()
        gc.collect()
        dist.destroy_process_group()


def check_layout(train, world: World, sampling=None) -> None:  # sampling: cfg.rollout
    """Refuse, in one line, a batch that cannot be shared by whole groups (or a rollout setting that cannot run
    on several ranks), before anything is written."""
    if world.size == 1:
        return
    b = train.prompts_per_step
    if world.size > b:
        raise GspoError(f"{world.size} processes but train.prompts_per_step={b} groups: each rank needs at least one "
                        f"whole group (a prompt's {train.group_size} completions never split); use at most {b} "
                        f"processes or raise train.prompts_per_step")
    if b % world.size:
        raise GspoError(f"train.prompts_per_step={b} groups do not divide across {world.size} processes: every rank "
                        f"takes the same number of whole groups; use a multiple of {world.size}")
    if sampling is not None and sampling.dynamic_sampling:
        raise GspoError("rollout.dynamic_sampling runs in one process only (each rank generates its own groups, so "
                        "which to keep and refill would be one rank's choice); use one process or turn it off")
    if train.on_nonfinite == OnNonfinite.SKIP:
        raise GspoError("train.on_nonfinite=skip runs in one process only (a skipped batch would be one rank's); "
                        "use train.on_nonfinite=stop with several processes")


def main_first(fn, world: World):
    """`fn()` on rank 0 first, then on the others (a barrier between): what fills a cache (the embedded model's
    cold start, a hub download) is built once, and the other ranks read it, as accelerate's
    main_process_first does."""
    if world.size == 1:
        return fn()
    value = fn() if world.main else None
    dist.barrier()
    return value if world.main else fn()


def broadcast(value, world: World):
    """Rank 0's `value` (any picklable object) on every rank."""
    if world.size == 1:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def group_range(n_groups: int, world: World) -> range:
    """The groups of a step's `n_groups` that this rank generates and grades."""
    per = n_groups // world.size
    return range(world.rank * per, (world.rank + 1) * per)


def mine(k: int, world: World, n: int | None = None) -> bool:
    """Whether this rank computes the k-th of a batch's forwards (scoring chunks or micro-batches): k mod W
    (round-robin, FSDP's rounds of W), or, given the count `n`, the r-th contiguous block of ceil(n / W).
    A rank's gradients accumulate its micro-batches in order before the one all_reduce, so contiguous blocks
    add up as (m0 + m1) + (m2 + m3), closer to one process's ((m0 + m1) + m2) + m3 than round-robin's
    (m0 + m2) + (m1 + m3); FSDP's reduce after every round of W gives (m0 + m1) + (m2 + m3) round-robin."""
    if n is None:
        return k % world.size == world.rank
    return k // -(-n // world.size) == world.rank


def dealt(n: int, world: World, *, blocks: bool = False, lockstep: bool = False) -> list[int | None]:
    """This rank's share of a batch's `n` forwards, as their indices: round-robin (`mine`), or contiguous
    blocks with `blocks`. With `lockstep` (FSDP, whose forwards are collectives) every rank takes the same
    number of turns, ceil(n / W), round-robin; a turn past the n forwards is None: a dummy of zero weight."""
    if lockstep:
        return [k if k < n else None for k in range(-(-n // world.size) * world.size) if mine(k, world)]
    return [k for k in range(n) if mine(k, world, n if blocks else None)]


def gather_objects(value, world: World) -> list:
    """Every rank's picklable `value`, in rank order (tensors travel on the CPU)."""
    if world.size == 1:
        return [value]
    parts: list = [None] * world.size
    dist.all_gather_object(parts, value)
    return parts


def sum_tensors(tensors: list[torch.Tensor], world: World) -> None:
    """Each tensor replaced, in place, by its sum over ranks; a rank that computed none of a tensor's
    entries holds zeros there, so a tensor whose entries each rank filled in part becomes the whole."""
    if world.size == 1:
        return
    for t in tensors:
        dist.all_reduce(t)


def sum_grads(params: list[torch.Tensor], world: World) -> None:
    """Replace each parameter's gradient by its sum over ranks (a rank with no rows contributes zeros)."""
    if world.size == 1:
        return
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch._utils._flatten_dense_tensors(grads)
    dist.all_reduce(flat)
    for p, g in zip(params, torch._utils._unflatten_dense_tensors(flat, grads), strict=True):
        p.grad = g


def reduce_parts(parts: dict[str, torch.Tensor], ops: dict[str, str], device: torch.device,
                 world: World, dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """Each rank's partial sums / extremes of a global minibatch -> the global ones. `ops` names the
    reduction ("sum", "min" or "max") of every metric any rank may have; the keys reduced are the union of
    the ranks' keys (a rank that computed no micro-batch of the minibatch has none, and contributes 0 to a
    sum, +inf to a min, -inf to a max). Every part is a 0-dim `dtype` tensor."""
    if world.size == 1:
        return parts
    present: list = [None] * world.size
    dist.all_gather_object(present, sorted(parts))
    keys = sorted({k for names in present for k in names})
    neutral = {"sum": 0.0, "min": float("inf"), "max": float("-inf")}
    out = {}
    for op, reduce_op in (("sum", dist.ReduceOp.SUM), ("min", dist.ReduceOp.MIN), ("max", dist.ReduceOp.MAX)):
        names = [k for k in keys if ops[k] == op]
        if not names:
            continue
        vals = torch.stack([parts[k] if k in parts else torch.tensor(neutral[op], dtype=dtype, device=device)
                            for k in names])
        dist.all_reduce(vals, op=reduce_op)
        out |= dict(zip(names, vals.unbind(), strict=True))
    return out


class FollowerRun:
    """What a rank other than 0 sees of the run directory: it reads it (checkpoints, the metrics a resumed
    run's collapse detector replays) and writes nothing, except its own error when it fails."""

    def __init__(self, path: Path, rank: int):
        self.path, self.rank = path, rank

    def __getattr__(self, name: str):
        if name in ("write_config", "set_status", "truncate_logs", "append", "write_json", "close"):
            return lambda *a, **k: None
        raise AttributeError(name)

    def fail(self, error: str) -> None:
        """Record this rank's error for rank 0 (`final_status`), which torchrun stops next, and in run.json in
        case rank 0 is gone first (under nccl, a watchdog may end it before it can write)."""
        message = f"rank {self.rank}: {error}"
        atomic_write_text(self.path / f"{FAILED_RANK}{self.rank}.txt", message + "\n")
        if (self.path / "run.json").exists():
            RunDir(self.path).set_status("failed", error=message, failed_rank=self.rank)


class NullLoggers:
    """The loggers of a rank other than 0: rank 0 alone writes metrics, samples and W&B."""

    def metrics(self, *a, **k) -> None: ...
    def evals(self, *a, **k) -> None: ...
    def eval_samples(self, *a, **k) -> None: ...
    def samples(self, *a, **k) -> None: ...
    def close(self, *a, **k) -> None: ...


def clear_failures(path: Path) -> None:
    """Rank 0, as a run (re)starts: failure records of an earlier attempt are not this one's."""
    for record in path.glob(f"{FAILED_RANK}*.txt"):
        record.unlink()


def final_status(run, status: str, error: str | None, world: World) -> tuple[str, str | None, dict]:
    """Rank 0's closing status and extra run.json fields: another rank's recorded failure wins over what rank 0
    saw of it (an interrupt from torchrun, or a broken connection in a collective)."""
    if world.size == 1 or not world.main:
        return status, error, {}
    records = sorted(run.path.glob(f"{FAILED_RANK}*.txt"))
    if status == "finished" or not records or (error or "").startswith("GspoError"):
        # a GspoError (bad input, the non-finite guard) is raised alike on every rank: rank 0's own says it
        for record in records:
            record.unlink()
        return status, error, {"failed_rank": None}
    first = records[0]
    message = first.read_text().strip()
    for record in records:
        record.unlink()
    return "failed", message, {"failed_rank": int(first.stem.removeprefix(FAILED_RANK))}
