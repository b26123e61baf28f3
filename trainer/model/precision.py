"""Mixed precision: fp32 master weights and optimizer state, autocast forwards, a loss scale for fp16.

    model.dtype      storage: what the model's parameters are kept in (float32, bfloat16, float16)
    train.precision  compute: what forwards run in under autocast (fp32, bf16, fp16; auto follows storage)

The optimizer always steps fp32 tensors (Micikevicius et al. 2018, arXiv 1710.03740). A float32 model
is its own master copy. A half-precision model gets an fp32 copy of its trainable parameters: gradients
are copied up, clipped and stepped there, and the weights copied back down. bfloat16 keeps 8 significant
bits, so AdamW applied to bf16 weights at lr 1e-6 rounds most updates away (1 + 2^-9 == 1 in bf16); the
master accumulates them until they add up to a change the stored weights can hold.
fp16 adds a dynamic loss scale (torch.amp.GradScaler): its 5 exponent bits underflow small gradients.
Log-probs that enter a ratio are computed in fp32 whatever the precision (trainer/model/logprobs.py).
"""

from __future__ import annotations

import contextlib

import torch
import torch.distributed

from gspo.conf.errors import GspoError
from gspo.vocab.choices import TrainPrecision

PRECISIONS = {TrainPrecision.FP32: torch.float32, TrainPrecision.BF16: torch.bfloat16, TrainPrecision.FP16: torch.float16}
_AUTO = {dtype: name for name, dtype in PRECISIONS.items()}


def resolve_precision(precision: str, storage: torch.dtype) -> str:
    """`auto` -> the precision matching the storage dtype; anything else as given."""
    return _AUTO[storage] if precision == TrainPrecision.AUTO else precision


def check_precision(precision: str, storage: torch.dtype, device: torch.device) -> None:
    """One-line GspoError for a combination that cannot run as asked."""
    if precision == TrainPrecision.FP32 and storage != torch.float32:
        raise GspoError(f"train.precision=fp32 with model.dtype={str(storage).removeprefix('torch.')}: half-precision "
                        f"weights compute in half precision; use model.dtype=float32, or train.precision=auto")
    if precision == TrainPrecision.FP32:
        return
    if device.type == "cuda" and precision == TrainPrecision.BF16 and not torch.cuda.is_bf16_supported():
        raise GspoError(f"train.precision=bf16: {torch.cuda.get_device_name(device)} cannot run bfloat16; "
                        f"use train.precision=fp16 or fp32")
    if not torch.amp.is_autocast_available(device.type):
        raise GspoError(f"train.precision={precision}: no autocast on device {device.type!r}; use train.precision=fp32")


def clip_grads(params: list[torch.Tensor], max_norm: float) -> torch.Tensor:
    """Scale the gradients of `params` to a global L2 norm of at most `max_norm` (as
    torch.nn.utils.clip_grad_norm_: coefficient max_norm / (norm + 1e-6), capped at 1); returns the norm
    before clipping (fp32, 0-dim). Squares are summed in float64, per tensor and then over tensors, so the
    norm of the same gradients split into shards another way (FSDP's, trainer/parallel/fsdp.py) agrees to ~1e-15; a
    sharded gradient (DTensor) adds its local shard, and one all_reduce adds the ranks' shards."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(())
    local = [g.to_local() if hasattr(g, "to_local") else g for g in grads]
    squares = [torch.linalg.vector_norm(g.detach(), dtype=torch.float64) ** 2 for g in local]
    sharded = [s for s, g in zip(squares, grads, strict=True) if hasattr(g, "to_local")]
    whole = [s for s, g in zip(squares, grads, strict=True) if not hasattr(g, "to_local")]
    total = squares[0].new_zeros(())
    if sharded:
        total = torch.stack(sharded).sum()
        torch.distributed.all_reduce(total)  # every shard of every sharded gradient, once
    if whole:
        total = total + torch.stack(whole).sum()
    norm = total.sqrt()
    coef = (max_norm / (norm + 1e-6)).clamp(max=1.0)
    torch._foreach_mul_(local, coef.to(local[0].dtype))
    return norm.float()


class Precision:
    """Autocast, backward and optimizer step for one model at one compute precision."""

    def __init__(self, model: torch.nn.Module, precision: str, device: torch.device):
        self.dtype, self.device = PRECISIONS[precision], device
        self.params = [p for p in model.parameters() if p.requires_grad]
        half = any(p.dtype != torch.float32 for p in self.params)
        # the optimizer's tensors: the parameters themselves, or fp32 copies of them
        self.master = [p.detach().float().clone() for p in self.params] if half else self.params
        self.scaler = torch.amp.GradScaler(device.type) if self.dtype == torch.float16 else None

    @property
    def separate_master(self) -> bool:
        return self.master is not self.params

    def autocast(self):
        if self.dtype == torch.float32:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)

    def backward(self, loss: torch.Tensor) -> None:
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def step(self, optimizer: torch.optim.Optimizer, max_grad_norm: float, guard=None) -> torch.Tensor:
        """Clip and apply the accumulated gradients; returns the gradient norm before clipping. `guard(norm)`
        runs before anything is stepped and may raise to stop it; under fp16 it gets None, since the loss
        scale skips an overflowed step by itself."""
        if self.separate_master:
            for m, p in zip(self.master, self.params, strict=True):
                m.grad, p.grad = (None if p.grad is None else p.grad.float()), None
        if self.scaler is not None:
            self.scaler.unscale_(optimizer)
        norm = clip_grads(self.master, max_grad_norm)
        if guard is not None:
            try:
                guard(norm if self.scaler is None else None)
            except BaseException:
                if self.scaler is not None:
                    self.scaler.update()  # closes this step's unscale_, so the next step may unscale again
                raise
        if self.scaler is not None:
            self.scaler.step(optimizer)  # skipped when the scaled gradients overflowed
            self.scaler.update()
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if self.separate_master:
            with torch.no_grad():
                torch._foreach_copy_(self.params, self.master)
        return norm

    def state_dict(self) -> dict:
        """What a checkpoint needs beyond the model's stored weights: the masters and the loss scale."""
        return {"master": self.master if self.separate_master else None,
                "scaler": self.scaler.state_dict() if self.scaler is not None else None}

    def load_state_dict(self, state: dict) -> None:
        if self.separate_master and state.get("master") is not None:
            with torch.no_grad():
                torch._foreach_copy_(self.master, [m.to(self.device) for m in state["master"]])
        if self.scaler is not None and state.get("scaler") is not None:
            self.scaler.load_state_dict(state["scaler"])
