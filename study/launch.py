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
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from importlib import resources

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from gspo.conf.compose import compose_config
from gspo.conf.errors import GspoError
from gspo.conf.overrides import first_job, planned_jobs

PLUGINS = {"submitit": "hydra_submitit_launcher", "joblib": "hydra_joblib_launcher"}  # launcher name prefix -> plugin
GIB_PER_JOB = 2  # memory allowed per job run at once by default: a job of the embedded model peaks near 0.75 GiB RSS


@dataclass
class Machine:
    """What a policy decides from: the sweep (its overrides, the preset's params, its planned jobs) and the machine
    (cores, memory). `config`: the first job's composed config, composed once when a policy asks."""

    overrides: list[str]
    params: dict[str, str]
    jobs: int
    cores: int
    memory_gib: float

    @cached_property
    def config(self) -> DictConfig:
        return compose_config(first_job([*(f"{k}={v}" for k, v in self.params.items()), *self.overrides]))


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
    n = min(m.cores // workers, m.jobs, int(m.memory_gib // (GIB_PER_JOB * workers)))
    if n < 2 or not plugin_installed(PLUGINS["joblib"]):
        return None
    if m.config.model.name != "tiny" or not _on_cpu(m.config.device):
        return None
    return n


def lagged(m: Machine) -> bool:
    """Whether any job of the sweep draws its rollouts behind (rollout.lag >= 1, from the command line or the preset)."""
    said = [o.split("=", 1)[1] for o in m.overrides if o.split("=", 1)[0].lstrip("+") == "rollout.lag"]
    values = (said[-1] if said else m.params.get("rollout.lag", "0")).split(",")
    return any(v.strip().isdigit() and int(v) > 0 for v in values)


register_policy("side_by_side_on_cpu", side_by_side_on_cpu)


def jobs_at_once(overrides: list[str], params: dict[str, str] | None = None) -> int:
    """How many jobs of a sweep run at once when the command line names no launcher: the first registered policy's
    answer, else 1."""
    if any(o.startswith("hydra/launcher=") for o in overrides):
        return 1
    machine = Machine(overrides, params or {}, len(planned_jobs(overrides, params) or []), os.cpu_count() or 1,
                      memory_gib())
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
    """In a job: the torch threads its launcher's share of the cores gives it (None: the launcher says nothing)."""
    n_jobs = launcher_jobs()
    return threads(n_jobs) if n_jobs else None


def launcher_jobs() -> int | None:
    """In a job: the jobs its launcher runs side by side (joblib's n_jobs; -1: one per core), None if it says none."""
    n_jobs = HydraConfig.get().launcher.get("n_jobs")
    return None if not n_jobs else (os.cpu_count() or 1) if n_jobs < 0 else n_jobs


def at_once() -> int:
    """In a job: how many of the sweep's jobs run side by side (1 under Hydra's basic launcher)."""
    return launcher_jobs() or 1


def plugin_installed(module: str) -> bool:
    return importlib.util.find_spec(f"hydra_plugins.{module}") is not None


def check_launcher(overrides: list[str]) -> None:
    """A `hydra/launcher=` whose Hydra plugin is missing (ours in conf/hydra/launcher/ build on one): one line,
    before Hydra's own many-line error."""
    for name in [o.split("=", 1)[1] for o in overrides if o.startswith("hydra/launcher=")]:
        ours = resources.files("gspo.conf").joinpath("hydra", "launcher", f"{name}.yaml")
        base = name
        if ours.is_file():
            base = next((p for p in PLUGINS if p in ours.read_text()), name)
        plugin = next((PLUGINS[p] for p in PLUGINS if base.startswith(p)), None)
        if plugin is not None and not plugin_installed(plugin):
            extra = plugin.removeprefix("hydra_").removesuffix("_launcher")
            raise GspoError(f"hydra/launcher={name} needs Hydra's {extra} launcher plugin, which is not installed: "
                            f"pip install 'gspo[{extra}]'")
