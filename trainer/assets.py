"""The Hugging Face hub assets a config needs (its model and tokenizer, its task's dataset, its benchmarks): named
from the config and the registries alone, checked against the local caches without loading anything, and
fetched ahead of a run by loading each as the run will (`gspo fetch`).

Offline (HF_HUB_OFFLINE=1, which `gspo` sets itself when the hub's host does not resolve), a run that lacks
some asset fails before it loads any, in one line naming them all with the command that fetches them, instead
of one asset per attempt after seconds of loading each. Imports no torch: the check runs before it is loaded.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gspo.conf.errors import GspoError
from gspo.evals.benchmarks.registry import hub_dataset, load_benchmark
from gspo.trainer.tasks.registry import bench_options, build_task, task_kind

MODEL = "model"
DATASET = "dataset"
# What a causal LM's repository holds that from_pretrained reads (weights, config, tokenizer), not its other files
MODEL_FILES = ["*.json", "*.safetensors", "*.txt", "*.model", "*.tiktoken", "*.py"]


@dataclass(frozen=True)
class HubAsset:
    """One repository of the hub a config reads: `kind` model or dataset, `repo_id`, and `role`, the config
    key that asks for it (`model.name`, `task.dataset`, `eval.benches aime24`)."""

    kind: str
    repo_id: str
    role: str
    load: Callable[[], object] = field(compare=False, repr=False, default=lambda: None)  # loads it as a run does

    def words(self) -> str:
        return f"{self.role} {self.repo_id}"


def hub_assets(cfg) -> list[HubAsset]:
    """The hub repositories `cfg` reads, in the order a run loads them: task dataset, benchmarks, model."""
    assets = []
    dataset = task_kind(cfg.task.kind).hub_dataset(cfg.task)
    if dataset:
        assets.append(HubAsset(DATASET, dataset, "task.dataset", lambda: _build_task(cfg)))
    for name in cfg.eval.benches:
        options = bench_options(cfg, name)
        repo = hub_dataset(name, path=cfg.eval.paths.get(name), **options)
        if repo:
            assets.append(HubAsset(DATASET, repo, f"eval.benches {name}", lambda n=name, o=options: _load_bench(n, o)))
    name = cfg.model.name
    if name != "tiny" and not name.startswith((".", "/", "~")) and not Path(name).expanduser().exists():
        assets.append(HubAsset(MODEL, name, "model.name", lambda: _download_model(name)))
    return assets


def offline() -> bool:
    """Whether the hub libraries work from the cache alone (HF_HUB_OFFLINE, read as huggingface_hub reads it)."""
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def missing(assets: list[HubAsset]) -> list[HubAsset]:
    """The assets the local caches lack: a model without its config.json or weights in the hub cache; a dataset
    in neither the hub cache nor `datasets`' own (where an offline load_dataset finds it)."""
    return [a for a in assets if not (_model_cached(a.repo_id) if a.kind == MODEL else _dataset_cached(a.repo_id))]


def check_offline(cfg_or_assets, fetch_command: str) -> None:
    """Offline, one GspoError line naming every asset the caches lack and `fetch_command`; online, nothing."""
    if not offline():
        return
    assets = cfg_or_assets if isinstance(cfg_or_assets, list) else hub_assets(cfg_or_assets)
    lacking = missing(assets)
    if lacking:
        raise GspoError(f"offline (HF_HUB_OFFLINE=1) and not in the Hugging Face cache: "
                        f"{', '.join(a.words() for a in lacking)}; fetch {'it' if len(lacking) == 1 else 'them'} "
                        f"first, with the network: {fetch_command}")


def fetch_command(cfg) -> str:
    """A `gspo fetch` command for `cfg`'s assets alone, for where the user's own command line is not at hand
    (a sweep's job): the model, the task's dataset and the benchmarks by their keys."""
    parts = ["gspo fetch", f"task={cfg.task.name}" if cfg.task.kind == cfg.task.name else f"task.kind={cfg.task.kind}"]
    if cfg.task.dataset:
        parts.append(f"task.dataset={cfg.task.dataset}")
    if cfg.eval.benches:
        parts.append(f"eval.benches=[{','.join(cfg.eval.benches)}]")
    if cfg.model.name != "tiny":
        parts.append(f"model=hf model.name={cfg.model.name}")
    return " ".join(parts)


def fetch(assets: list[HubAsset], log: Callable[[str], None]) -> None:
    """Load each asset as a run would, with the network, so that the caches then hold what an offline run reads."""
    if offline():
        lacking = missing(assets)
        which = (f"this config needs {len(lacking)} not cached: {', '.join(a.words() for a in lacking)}" if lacking
                 else f"all {len(assets)} this config needs are cached already, so its runs work offline as they are")
        raise GspoError("gspo fetch downloads from the Hugging Face hub, and HF_HUB_OFFLINE is set (or the hub's host "
                        f"{_host()} does not resolve): unset it, on a machine with the network; {which}")
    for i, asset in enumerate(assets, 1):
        start = time.time()
        log(f"fetch {i}/{len(assets)}: {asset.words()} ...")
        asset.load()
        log(f"fetch {i}/{len(assets)}: {asset.words()} cached ({time.time() - start:.0f} s)")


def _host() -> str:
    from urllib.parse import urlparse

    return urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or "huggingface.co"


def _model_cached(repo_id: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    def has(name: str) -> bool:
        return isinstance(try_to_load_from_cache(repo_id, name), str)

    return has("config.json") and (has("model.safetensors") or has("model.safetensors.index.json"))


def _dataset_cached(repo_id: str) -> bool:
    """In the hub cache (datasets--org--name with a snapshot) or in `datasets`' Arrow cache (org___name), where
    `load_dataset` looks offline; either is read without importing `datasets`."""
    from huggingface_hub import constants

    snapshots = Path(constants.HF_HUB_CACHE) / f"datasets--{repo_id.replace('/', '--')}" / "snapshots"
    if snapshots.is_dir() and any(snapshots.iterdir()):
        return True
    arrow = Path(os.environ.get("HF_DATASETS_CACHE") or Path(constants.HF_HOME) / "datasets")
    wanted = repo_id.replace("/", "___").lower()
    return arrow.is_dir() and any(p.name.lower() == wanted and any(p.iterdir()) for p in arrow.iterdir() if p.is_dir())


def _build_task(cfg) -> None:
    build_task(cfg.task)


def _load_bench(name: str, options: dict) -> None:
    load_benchmark(name, **options)


def _download_model(repo_id: str) -> None:
    from huggingface_hub import snapshot_download

    try:
        snapshot_download(repo_id, allow_patterns=MODEL_FILES)
    except Exception as e:  # the hub's errors are long and several; one line names the repository and the cause
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise GspoError(f"cannot fetch model {repo_id!r} from the Hugging Face hub ({type(e).__name__}: {reason})") from None
