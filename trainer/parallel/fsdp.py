"""FSDP2 (`train.fsdp=true`): the policy's parameters, gradients and optimizer state sharded across the ranks
with PyTorch's own `torch.distributed.fsdp.fully_shard`, for models whose weights and AdamW state do not fit
one device; checkpoints in torch.distributed.checkpoint (DCP) shards, and their conversion to a Hugging
Face folder (`gspo export-hf`).

What changes against plain data parallelism (trainer/parallel/distributed.py), and why:
- every decoder layer and the root are `fully_shard`ed: a forward all-gathers a layer's weights, a backward
  reduce-scatters its gradients; so every rank must run the same number of forwards and backwards. The
  update and the scoring deal out the same micro-batches, and a rank with fewer takes a dummy turn (a
  forward and backward of zero weight: `distributed.dealt`); generation runs in lock step, every rank decoding until all
  ranks' rows have ended (`all_done`), as transformers' `synced_gpus` does; under FSDP every rank runs the
  evaluation too (rank 0 alone writes it);
- FSDP2 averages the gradients over ranks and the sum is wanted (each rank's loss already carries the
  global denominators), so each loss is scaled by W before its backward; the average of W x the parts is
  their sum (exact in binary floating point for W a power of two; gloo has no pre-scaled sum);
- `train.precision=bf16` becomes FSDP2's MixedPrecisionPolicy (bf16 compute, fp32 shards and gradient
  reduction), not autocast; fp16 is refused (its loss scaling would need a sharded scaler);
- a checkpoint holds DCP shards (`dcp/`: model and optimizer, written by every rank) that resume on the same
  number of ranks, plus the config and tokenizer; the run's final checkpoint also holds the full weights
  (`model.safetensors`, gathered to rank 0), so `gspo eval eval.run=<run>` reads it directly, and
  `gspo export-hf <checkpoint> <folder>` converts any other one, offline, in one process.
"""

from __future__ import annotations

import shutil
import tempfile
import types
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard, register_fsdp_forward_method
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from gspo.conf.errors import GspoError
from gspo.trainer.model.logprobs import SHARDED_ENTRY, completion_logprobs_of
from gspo.vocab.choices import ModelDtype, TrainPrecision

SHARDS = "dcp"  # a sharded checkpoint's DCP folder


def check(cfg, world) -> None:
    """Refuse, in one line, what FSDP here does not run: several things it would take to do right."""
    if not cfg.train.fsdp:
        return
    if world.size < 2:
        raise GspoError("train.fsdp=true shards the model across processes: launch it under torchrun with at least "
                        "2 (torchrun --nproc-per-node N -m gspo.cli.main train ...)")
    if cfg.model.lora.r > 0:
        raise GspoError("train.fsdp=true with LoRA (model.lora.r > 0): the adapters are small enough for plain data "
                        "parallelism; use train.fsdp=false")
    if cfg.train.precision == TrainPrecision.FP16:
        raise GspoError("train.fsdp=true with train.precision=fp16: fp16 needs a sharded loss scaler; use bf16 or fp32")
    if cfg.model.dtype != ModelDtype.FLOAT32:
        raise GspoError(f"train.fsdp=true with model.dtype={cfg.model.dtype}: FSDP keeps the shards in float32 and "
                        "computes in train.precision; use model.dtype=float32")
    if cfg.train.compile:
        raise GspoError("train.fsdp=true with train.compile=true is not supported; use train.compile=false")


def layer_classes(model) -> tuple[type, ...]:
    """The model's repeated blocks (transformers names them in `_no_split_modules`), each sharded on its own."""
    names = set(getattr(model, "_no_split_modules", None) or [])
    classes = {type(m) for m in model.modules() if type(m).__name__ in names}
    if not classes:
        raise GspoError(f"train.fsdp=true: {type(model).__name__} names no decoder layer class (_no_split_modules)")
    return tuple(classes)


def shard(model, *, bf16: bool) -> None:
    """`fully_shard` every decoder layer, then the root (in place: the parameters become DTensor shards)."""
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16 else MixedPrecisionPolicy()
    blocks = layer_classes(model)
    for module in list(model.modules()):
        if isinstance(module, blocks):
            fully_shard(module, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    # the log-prob computation calls the body and the output layer itself: run it inside the root's hooks
    setattr(model, SHARDED_ENTRY, types.MethodType(_sharded_logprobs, model))
    register_fsdp_forward_method(model, SHARDED_ENTRY)


def _sharded_logprobs(model, *args, **kwargs):
    """completion_logprobs_of, returning fresh tensors (FSDP's backward hook sits on the outputs, and a view
    would lose it to a later in-place op)."""
    logp, entropy = completion_logprobs_of(model, *args, **kwargs)
    return logp.clone(), (entropy.clone() if entropy is not None else None)


def is_sharded(model) -> bool:
    return isinstance(model, FSDPModule)


def reshard(model) -> None:
    """After forwards without a backward (generation, scoring), the root's weights stay gathered: free them."""
    if is_sharded(model):
        model.reshard()


def all_done(done: bool) -> bool:
    """Whether every rank's `done` is true (one all_reduce): lock-step decoding under FSDP."""
    flag = torch.tensor([1 if done else 0], dtype=torch.int32,
                        device=torch.device("cuda", torch.cuda.current_device())
                        if dist.get_backend() == "nccl" else torch.device("cpu"))
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    return bool(flag.item())


def _state(model, optimizer):
    model_state, optim_state = get_state_dict(model, optimizer)
    return {"model": model_state, "optim": optim_state}


def save_shards(folder: Path, model, optimizer) -> None:
    """Every rank writes its shards of the model and the optimizer into `folder` (collective)."""
    dcp.save(_state(model, optimizer), checkpoint_id=str(folder))


def load_shards(folder: Path, model, optimizer) -> None:
    """Every rank reads its shards from `folder` into the sharded model and its optimizer (collective)."""
    state = _state(model, optimizer)
    dcp.load(state, checkpoint_id=str(folder))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])


def full_weights(model) -> dict[str, torch.Tensor]:
    """The whole model's weights on rank 0's CPU (collective; other ranks get an empty dict), less the copies
    of tied weights (an output layer tied to the embeddings), as save_pretrained writes a model."""
    weights = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    tied = getattr(model, "all_tied_weights_keys", None) or {}
    return {k: v for k, v in weights.items() if k not in tied}


def is_sharded_checkpoint(folder: Path) -> bool:
    return (Path(folder) / SHARDS).is_dir()


def export_hf(checkpoint: Path, out: Path) -> Path:
    """A sharded checkpoint folder -> a Hugging Face folder (config, weights, tokenizer) that `gspo eval
    model=hf model.name=<out>` and transformers read; one process, no process group
    (torch.distributed.checkpoint.format_utils.dcp_to_torch_save)."""
    checkpoint, out = Path(checkpoint), Path(out)
    if not is_sharded_checkpoint(checkpoint):
        raise GspoError(f"{checkpoint} is not a sharded checkpoint (no {SHARDS}/ folder): it is a Hugging Face folder "
                        "already")
    if out.exists() and any(out.iterdir()):
        raise GspoError(f"{out} exists and is not empty: give a new folder")
    with tempfile.TemporaryDirectory(dir=out.parent if out.parent.exists() else None) as tmp:
        whole = Path(tmp) / "state.pt"
        dcp_to_torch_save(str(checkpoint / SHARDS), str(whole))
        weights = torch.load(whole, weights_only=True)["model"]
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(checkpoint))
    missing, unexpected = model.load_state_dict(weights, strict=False)
    tied = set(getattr(model, "all_tied_weights_keys", None) or {})  # copies of other weights, as in full_weights
    if set(missing) - tied or unexpected:
        raise GspoError(f"{checkpoint}: its shards do not match the model of its config.json "
                        f"(missing {sorted(set(missing) - tied)[:3]}, unexpected {sorted(unexpected)[:3]})")
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(checkpoint).save_pretrained(out)
    if (checkpoint / "generation_config.json").exists():
        shutil.copy(checkpoint / "generation_config.json", out / "generation_config.json")
    return out
