"""What a device can do at best, for perf/trl_vs_gspo.py's per-arm lines: memory bandwidth (measured by a copy,
and the datasheet's where the GPU is known) for the weight-read floor of a decode step, and the dense peak
FLOP/s for the update's MFU (6 x parameters x tokens / seconds / peak; Kaplan et al. 2020's 6ND).

Datasheet figures (NVIDIA's product pages, dense, no sparsity): bandwidth in TB/s; peak in TFLOP/s for bf16
tensor cores and for plain fp32 (torch's default matmul precision, TF32 off).
"""

from __future__ import annotations

import time

DATASHEET = [  # (name fragment as torch.cuda.get_device_name reports it, TB/s, bf16 TFLOP/s, fp32 TFLOP/s)
    ("H200", 4.8, 989.4, 66.9),
    ("H100 NVL", 3.9, 835.0, 60.0),
    ("H100 PCIe", 2.0, 756.0, 51.0),
    ("H100", 3.35, 989.4, 66.9),  # SXM5 ("NVIDIA H100 80GB HBM3")
    ("A100-SXM4-80GB", 2.039, 312.0, 19.5),
    ("A100", 1.555, 312.0, 19.5),
]


def datasheet(device_name: str) -> dict | None:
    """The first DATASHEET row whose fragment is in `device_name`, as {"bandwidth": bytes/s, "bf16"/"fp32": FLOP/s}."""
    for fragment, tbps, bf16, fp32 in DATASHEET:
        if fragment in device_name:
            return {"name": fragment, "bandwidth": tbps * 1e12, "bf16": bf16 * 1e12, "fp32": fp32 * 1e12}
    return None


def measured_bandwidth(device, mib: int = 1024, repeats: int = 10) -> float:
    """Bytes/s of a device-to-device copy of `mib` MiB (read + write counted), best of `repeats`."""
    import torch

    x = torch.empty(mib * 2**20 // 4, dtype=torch.float32, device=device)
    y = torch.empty_like(x)
    best = float("inf")
    for _ in range(repeats + 1):
        if x.is_cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        y.copy_(x)
        if x.is_cuda:
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return 2 * x.numel() * 4 / best


def describe(device) -> dict:
    """The device's name, measured copy bandwidth, and datasheet row (None off the table, e.g. a CPU)."""
    import torch

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return {"name": name, "bandwidth_measured": measured_bandwidth(device, 1024 if device.type == "cuda" else 128),
            "datasheet": datasheet(name)}


def weight_floor_ms(params: int, bytes_per_param: int, bandwidth: float) -> float:
    """The least time a decode step can take: every weight read once from memory, in ms."""
    return params * bytes_per_param / bandwidth * 1e3


def mfu(params: int, tokens: float, seconds: float, peak: float | None) -> float | None:
    """Model FLOP utilisation of an update: 6 x params x tokens (forward and backward) per second over `peak`."""
    return None if not peak or seconds <= 0 else 6 * params * tokens / seconds / peak
