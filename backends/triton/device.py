"""The Triton target's capability descriptor (`gdv.backends.capabilities.SCHEMA`): the GPU it
builds for, measured through torch when a CUDA GPU is present, otherwise taken from a table
for sm_90 and marked `"source": "table"`; the ops and dtypes it claims and why it refuses the
rest; how it executes."""

from __future__ import annotations

import functools
from typing import Any

SM90_TABLE: dict[str, Any] = {
    "device": "NVIDIA H200 (GH100, SXM), compute capability 9.0",
    "compute_capability": "9.0",
    "sm_count": 132,
    "shared_memory_per_sm_bytes": 233472,
    "shared_memory_per_block_optin_bytes": 232448,
    "registers_per_sm": 65536,
    "l2_bytes": 52428800,
    "memory_bytes": 141 * 10**9,
    "hbm_bandwidth_gbs": 4800.0,
    "peak_gflops": {"f32_fma": 66900.0, "f32_mul_add": 33450.0},
    "datasheet": "NVIDIA H200 Tensor Core GPU datasheet (FP32 67 TFLOPS, HBM3e 4.8 TB/s); "
    "CUDA C Programming Guide, compute capability 9.0 (228 KiB shared memory per SM, 227 KiB "
    "per block, 64K 32-bit registers per SM)",
}
"""What the descriptor says of the GPU where none is present (`"source": "table"`). FLOP/s
count a fused multiply-add as two; `f32_mul_add` (separate multiply and add, which gdv's
exact kernels issue) is half of it."""


def _machine_from(props: dict[str, Any], source: str) -> dict[str, Any]:
    return {
        "arch": f"sm_{props['compute_capability'].replace('.', '')}",
        "cpu": props["device"],
        "cores": int(props["sm_count"]),
        "caches": [
            {
                "level": 1,
                "type": "shared memory",
                "size_bytes": int(props["shared_memory_per_sm_bytes"]),
                "shared_by": 1,
            },
            {
                "level": 2,
                "type": "unified",
                "size_bytes": int(props["l2_bytes"]),
                "shared_by": int(props["sm_count"]),
            },
        ],
        "isa": [f"sm_{props['compute_capability'].replace('.', '')}", "ptx"],
        "simd": "warps of 32 lanes (cores = streaming multiprocessors)",
        "peak_gflops": dict(props["peak_gflops"]),
        "copy_bandwidth_gbs": float(props["hbm_bandwidth_gbs"]),
        **{k: v for k, v in props.items() if k not in ("peak_gflops", "hbm_bandwidth_gbs")},
        "hbm_bandwidth_gbs": float(props["hbm_bandwidth_gbs"]),
        "source": source,
    }


@functools.cache
def _measured() -> dict[str, Any]:
    """The present GPU: its properties from torch, its copy bandwidth and f32 FMA rate timed
    (a device-to-device copy of 1 GiB; an f32 matmul with TF32 off)."""
    import torch

    p = torch.cuda.get_device_properties(0)
    props: dict[str, Any] = {
        "device": p.name,
        "compute_capability": f"{p.major}.{p.minor}",
        "sm_count": p.multi_processor_count,
        "shared_memory_per_sm_bytes": int(getattr(p, "shared_memory_per_multiprocessor", 0)),
        "shared_memory_per_block_optin_bytes": int(getattr(p, "shared_memory_per_block_optin", 0)),
        "registers_per_sm": int(getattr(p, "regs_per_multiprocessor", 0)),
        "l2_bytes": int(getattr(p, "L2_cache_size", 0)),
        "memory_bytes": int(p.total_memory),
    }
    x = torch.empty(1 << 28, dtype=torch.float32, device="cuda")
    y = torch.empty_like(x)
    y.copy_(x)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        y.copy_(x)
    end.record()
    torch.cuda.synchronize()
    seconds = start.elapsed_time(end) / 1e3 / 5
    props["hbm_bandwidth_gbs"] = round(2 * x.numel() * 4 / seconds / 1e9, 1)  # read + write
    del x, y
    allow = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        n = 8192
        a = torch.randn(n, n, device="cuda")
        b = torch.randn(n, n, device="cuda")
        a @ b
        start.record()
        for _ in range(3):
            a @ b
        end.record()
        torch.cuda.synchronize()
        seconds = start.elapsed_time(end) / 1e3 / 3
    finally:
        torch.backends.cuda.matmul.allow_tf32 = allow
    fma = round(2 * n**3 / seconds / 1e9, 1)
    props["peak_gflops"] = {"f32_fma": fma, "f32_mul_add": round(fma / 2, 1)}
    return props


def descriptor(measure: bool = True, refresh: bool = False) -> dict[str, Any]:
    from gdv import __version__
    from gdv.backends.capabilities import CAPABILITY_SCHEMA, TARGETS
    from gdv.backends.triton.emit import TL, UNSUPPORTED_DTYPES
    from gdv.backends.triton.registry import BODY, HOST, UNSUPPORTED
    from gdv.backends.triton.runtime import gpu_available
    from gdv.ir.targets import TARGET_INFO

    try:
        import triton

        version, why = triton.__version__, ""
    except ImportError as e:
        version, why = "", f"the triton package is not installed (pip install 'gdv[gpu]'): {e}"
    gpu = not why and gpu_available()
    machine = _machine_from(SM90_TABLE, "table")
    if gpu and measure:
        if refresh:
            _measured.cache_clear()
        machine = _machine_from(_measured(), "measured")
    ulps = dict(TARGET_INFO["triton"].f32_ulps)
    return {
        "schema": CAPABILITY_SCHEMA,
        "name": "triton",
        "version": __version__,
        "description": TARGETS["triton"],
        "available": {"ok": not why, "reason": why},
        "ops": sorted(s.name for s in HOST),
        "unsupported_ops": {
            s.name: reason for s, reason in sorted(UNSUPPORTED.items(), key=lambda kv: kv[0].name)
        },
        "dtypes": sorted(str(d) for d in TL),
        "unsupported_dtypes": {str(d): r for d, r in UNSUPPORTED_DTYPES.items()},
        "fallback": "only with --allow-fallback (allow_fallback=True): an op the target cannot "
        "do runs on the reference backend (its operands copied to the host and back), and is "
        "recorded",
        "machine": machine,
        "compiler": {
            "command": "triton.compile (GPUTarget cuda sm_90, warp size 32)",
            "version": version,
            "flags": ["enable_fp_fusion=False", "enable_reflect_ftz=False"],
            "openmp": False,
        },
        "execution": {
            "engine": "cuda" if gpu else "triton interpreter (TRITON_INTERPRET=1, CPU tensors)",
            "build": "every kernel compiled to PTX and cubin for sm_90 by triton.compile, no "
            "GPU needed; hashes and sizes in the artifact",
            "kernels": "one program per tile of a kernel's out dims (the schedule's tile, "
            "rounded up to powers of two, masked); each lane folds its output's reduced "
            "positions sequentially in the IR's order, products included (separate multiply "
            "and add, k in order): no tl.dot, no tl.sum",
            "exactness": "bit-exact to the reference backend except the last bits of f32 "
            "transcendentals, which on a GPU are libdevice's (within these ulps: "
            + ", ".join(f"{k} {v:g}" for k, v in ulps.items())
            + "); under the interpreter they are the reference's own functions",
            "transcendentals": "f32 only (other dtypes are refused by name)",
            "narrow_floats": "f16 and bf16 values are held in f32 and each result rounded back "
            "at once (correctly rounded for add, sub, mul, div, sqrt); bf16 converts and "
            "rounds on the bits; f64 -> f16/bf16 through f32 rounded to odd (one rounding); "
            "i64 -> bf16 is refused (two roundings)",
            "kernel_body_ops": sorted(s.name for s in BODY),
        },
    }
