"""Pick the rollout engine named by `rollout.engine`. Every engine has `generate(prompts, *, seed,
greedy=False, max_new_tokens=None) -> Rollout`, a `tokenizer`, and `sync_weights(model)`, called after
each update so that the next rollout samples from the current policy."""

from __future__ import annotations

import importlib.util

from gspo.conf.errors import GspoError
from gspo.trainer.engines import vllm_engine
from gspo.trainer.engines.hf_engine import HFEngine
from gspo.trainer.engines.logp_origin import ENGINE, old_logp_origin
from gspo.trainer.model.models import DTYPES


def require_engine(sampling) -> None:
    """Fail before a run starts when the configured engine's library is missing, or the platform it runs on
    cannot honour its options (vLLM's sleep mode on the CPU build, ...); `sampling`: cfg.rollout."""
    if sampling.engine != "vllm":
        return
    if importlib.util.find_spec("vllm") is None:
        raise GspoError("rollout=vllm needs vLLM, which is not installed: pip install 'gspo[vllm]' (or use rollout=hf)")
    try:
        vllm_engine.check_platform(sampling)
    except ImportError as e:
        raise GspoError(f"rollout=vllm: vLLM is installed but does not import ({e})") from None


def make_engine(cfg, model, tokenizer):
    r = cfg.rollout
    if r.engine == "hf":
        return HFEngine(model, tokenizer, temperature=r.temperature, top_p=r.top_p, max_new_tokens=r.max_new_tokens,
                        batch_size=r.batch_size, want_logprobs=old_logp_origin(cfg.algo) == ENGINE,
                        autocast_dtype=DTYPES[r.dtype] if r.dtype != "auto" else None, sampler=r.sampler,
                        record_routing=cfg.algo.routing_replay == "rollout")
    if r.engine == "vllm":
        try:
            engine_class = vllm_engine.VLLMEngine  # resolved on first use: imports vLLM
        except ImportError as e:
            raise GspoError(f"rollout=vllm needs vLLM: pip install 'gspo[vllm]' ({e})") from None
        return engine_class(cfg, model, tokenizer)
    raise GspoError(f"rollout.engine={r.engine!r}: use hf or vllm")
