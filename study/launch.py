"""The launcher and resource policy: which Hydra launcher a sweep runs under, how many of its jobs run at once and
with how many torch threads each, so parallel jobs do not oversubscribe the cores.

A command line that names a launcher (`hydra/launcher=joblib|submitit_local|basic`) is obeyed. Otherwise the
registered policies are asked in order (`register_policy`): the first to answer a number of jobs at once wins;
none answering runs the jobs one at a time (Hydra's basic launcher). A launcher running n jobs at once gives each
cores // n torch threads (`threads`). Adding a policy is one function and one `register_policy` line.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from gspo.conf.choice_check import group_files, near_hint
from gspo.conf.errors import GspoError
from gspo.study.plan import Plan, arm_config

PLUGINS = {"submitit": "hydra_submitit_launcher", "joblib": "hydra_joblib_launcher"}  # launcher name prefix -> plugin
GIB_PER_JOB = 2  # memory allowed per job run at once by default: a job of the embedded model peaks near 0.75 GiB RSS


@dataclass
class Machine:
    """What a policy decides from: the sweep's plan (its overrides, the preset's params, its jobs) and the machine
    (cores, memory). `config`: the first arm's composed config, composed once when a policy asks."""

    plan: Plan
    cores: int
    memory_gib: float

    @cached_property
    def config(self) -> DictConfig:
        return arm_config(self.plan)


Policy = Callable[[Machine], "int | None"]  # jobs at once, or None: no opinion
POLICIES: list[tuple[str, Policy]] = []


def register_policy(name: str, policy: Policy) -> None:
    """Add a launcher policy, asked after those registered before it."""
    if any(n == name for n, _ in POLICIES):
        raise ValueError(f"launcher policy {name} is registered already")
    POLICIES.append((name, policy))


def side_by_side_on_cpu(m: Machine) -> int | None:
    """The embedded model on CPU cores: as many jobs as cores (and memory at GIB_PER_JOB, and jobs) allow, one torch
    thread each. Measured on 2 cores (perf/jobs_vs_threads.py, results/time-to-answer): the default compare took
    1.2x less wall time as 2 jobs at 1 thread each than as 1 job at 2 threads, as the embedded model's small
    matmuls gain little from a second thread. A hub model's larger matmuls do gain, and its memory is the user's
    to plan, so it runs one at a time. A job with rollout.lag >= 1 runs two workers (the update and the next batch's
    sampler, trainer/step/lagged.py), so it counts for two cores (and two jobs' memory: it holds a copy of the policy)."""
    workers = 2 if lagged(m) else 1
    n = min(m.cores // workers, len(m.plan.jobs or []), int(m.memory_gib // (GIB_PER_JOB * workers)))
    if n < 2 or not plugin_installed(PLUGINS["joblib"]):
        return None
    if m.config.model.name != "tiny" or not _on_cpu(m.config.device):
        return None
    return n


def lagged(m: Machine) -> bool:
    """Whether any job of the sweep draws its rollouts behind (rollout.lag >= 1, from the command line or the preset)."""
    values = (m.plan.given("rollout.lag") or "0").split(",")
    return any(v.strip().isdigit() and int(v) > 0 for v in values)


register_policy("side_by_side_on_cpu", side_by_side_on_cpu)


def jobs_at_once(plan: Plan) -> int:
    """How many jobs of a sweep's plan run at once when the command line names no launcher: the first registered
    policy's answer, else 1."""
    if any(o.startswith("hydra/launcher=") for o in plan.overrides):
        return 1
    if (asked := given_jobs(list(plan.overrides))) is not None:  # hydra.launcher.n_jobs=N alone: N, as the user said
        return os.cpu_count() or 1 if asked == -1 else asked
    machine = Machine(plan, os.cpu_count() or 1, memory_gib())
    for _, policy in POLICIES:
        n = policy(machine)
        if n is not None:
            return max(1, int(n))
    return 1


def launcher_overrides(n: int) -> list[str]:
    """The Hydra overrides that run `n` jobs at once (none for one at a time)."""
    return ["hydra/launcher=joblib", f"hydra.launcher.n_jobs={n}"] if n > 1 else []


def memory_gib() -> float:
    """The machine's physical memory in GiB."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30


def _on_cpu(device: str) -> bool:
    if device == "auto":
        import torch

        return not torch.cuda.is_available()
    return device.startswith("cpu")


def threads(n_jobs: int) -> int:
    """Torch threads per job when a launcher runs `n_jobs` (>= 1) at once: the cores shared out."""
    cores = os.cpu_count() or 1
    return max(1, cores // min(n_jobs, cores))


def threads_per_job() -> int | None:
    """In a job: the torch threads its launcher's share of the cores gives it (None: the launcher says nothing).
    A Slurm task takes the CPUs Slurm allocated it (`slurm_threads`)."""
    if (n := slurm_threads()) is not None:
        return n
    n_jobs = launcher_jobs()
    return threads(n_jobs) if n_jobs else None


def slurm_threads(env: dict[str, str] | None = None) -> int | None:
    """In a task of a Slurm job (submitit's): the CPUs Slurm gave it, SLURM_CPUS_PER_TASK (--cpus-per-task), else
    the node's CPUs of the job shared by its tasks there (SLURM_JOB_CPUS_PER_NODE / SLURM_NTASKS_PER_NODE, Slurm's
    forms such as `4(x2)` read); None outside Slurm."""
    env = os.environ if env is None else env
    if env.get("SUBMITIT_EXECUTOR") != "slurm":
        return None
    if env.get("SLURM_CPUS_PER_TASK", "").isdigit():
        return max(1, int(env["SLURM_CPUS_PER_TASK"]))
    cpus = env.get("SLURM_JOB_CPUS_PER_NODE", "").split("(")[0].split(",")[0]
    tasks = (env.get("SLURM_NTASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE") or "1").split("(")[0].split(",")[0]
    if not (cpus.isdigit() and tasks.isdigit()):
        return None
    return max(1, int(cpus) // max(1, int(tasks)))


def launcher_jobs() -> int | None:
    """In a job: the jobs its launcher runs side by side (joblib's n_jobs; -1: one per core), None if it says none."""
    n_jobs = HydraConfig.get().launcher.get("n_jobs")
    return None if not n_jobs else (os.cpu_count() or 1) if n_jobs < 0 else n_jobs


def at_once() -> int:
    """In a job: how many of the sweep's jobs run side by side (1 under Hydra's basic launcher)."""
    return launcher_jobs() or 1


def plugin_installed(module: str) -> bool:
    return importlib.util.find_spec(f"hydra_plugins.{module}") is not None


HYDRA_LAUNCHERS = ("basic", "joblib", "submitit_local", "submitit_slurm")  # Hydra's own and its plugins'
JOBS = "hydra.launcher.n_jobs="


def check_launcher(overrides: list[str], *, at_once: bool = False) -> None:
    """The launcher a sweep names exists and its plugin is installed (ours in conf/hydra/launcher/ build on one);
    hydra.launcher.n_jobs= is a number of jobs at once that joblib runs (`at_once`: the launcher policy may pick
    joblib, so n_jobs alone sets its number). Each one line before the sweep's folder is written, not Hydra's many."""
    ours = group_files("hydra", "launcher")
    valid = [*HYDRA_LAUNCHERS, *sorted(ours)]
    names = [o.split("=", 1)[1] for o in overrides if o.startswith("hydra/launcher=")]
    for name in names:
        if name not in valid:
            raise GspoError(f"hydra/launcher={name}: no such launcher (available: {', '.join(valid)})"
                            f"{near_hint(name, valid)}")
    for name in names:
        base = next((p for p in PLUGINS if p in ours[name]), name) if name in ours else name  # ours: the one it builds on
        plugin = next((PLUGINS[p] for p in PLUGINS if base.startswith(p)), None)
        if plugin is not None and not plugin_installed(plugin):
            extra = plugin.removeprefix("hydra_").removesuffix("_launcher")
            raise GspoError(f"hydra/launcher={name} needs Hydra's {extra} launcher plugin, which is not installed: "
                            f"pip install 'gspo[{extra}]'")
    if (n := given_jobs(overrides)) is None:
        return
    launcher = names[-1] if names else None
    if launcher is not None and not launcher.startswith("joblib"):
        raise GspoError(f"{JOBS}{n}: n_jobs is the joblib launcher's setting; hydra/launcher={launcher} has none "
                        "(use hydra/launcher=joblib to run jobs side by side)")
    if launcher is None and not at_once:
        raise GspoError(f"{JOBS}{n}: n_jobs is the joblib launcher's setting; add hydra/launcher=joblib (gspo sweep "
                        "runs one job at a time under Hydra's basic launcher unless told)")


def given_jobs(overrides: list[str]) -> int | None:
    """The jobs at once a command line asks for with hydra.launcher.n_jobs=, as joblib reads it (-1: one per core),
    None if none; another value is one line."""
    given = [o.removeprefix(JOBS) for o in overrides if o.startswith(JOBS)]
    if not given:
        return None
    n = int(given[-1]) if re.fullmatch(r"[+-]?\d+", given[-1].strip()) else 0
    if n < 1 and n != -1:
        raise GspoError(f"{JOBS}{given[-1]}: must be a whole number of jobs run at once, >= 1 (or -1: one per core)")
    return n

