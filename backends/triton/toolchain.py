"""Building a Triton artifact for a GPU that need not be present: every kernel compiled by
`triton.compile` for a `GPUTarget` (CUDA sm_90 by default) to PTX and a cubin, fp fusion off."""

from __future__ import annotations

import hashlib
import re
from typing import Any

from gdv.backends.triton.emit import KernelInfo
from gdv.backends.triton.runtime import load, require_triton
from gdv.ir.diagnostics import IRError

ARCH = 90
"""The compute capability built for (sm_90: H100, H200)."""
OPTIONS = {"enable_fp_fusion": False, "enable_reflect_ftz": False}
"""Every compile: no multiply-add contraction (IR_SPEC.md section 3)."""


def flags() -> list[str]:
    return [f"{k}={v}" for k, v in OPTIONS.items()] + [f"target=cuda:sm_{ARCH}", "warp_size=32"]


def version() -> str:
    return require_triton().__version__


def compile_kernels(text: str, kernels: list[KernelInfo], arch: int = ARCH) -> list[dict]:
    """Compile each kernel of the artifact `text` for CUDA `sm_<arch>`; per kernel its name,
    launch, and the sha256 and size of its PTX and cubin (and whether the PTX holds a fused
    multiply-add outside the math library)."""
    triton = require_triton()
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    module = load(text, interpreted=False)
    target = GPUTarget("cuda", arch, 32)
    out: list[dict[str, Any]] = []
    for info in kernels:
        src = ASTSource(
            fn=getattr(module, info.name),
            signature=dict(info.signature),
            constexprs={"LANES": info.lanes, **info.constexprs},
        )
        try:
            compiled = triton.compile(
                src, target=target, options={**OPTIONS, "num_warps": info.num_warps}
            )
        except Exception as e:  # noqa: BLE001 - reported as the kernel's build error
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise IRError(
                f"target triton: triton could not compile {info.name} ({info.note}): {first}"
            ) from None
        ptx = compiled.asm["ptx"]
        ptx = ptx.encode() if isinstance(ptx, str) else ptx
        if info.constexprs.get("DOT") and re.search(rb"\b(wgmma|mma)\.", ptx):
            # the order `contract = "fma"` names holds for Triton's FMA lowering of tl.dot only
            raise IRError(
                f"target triton: {info.name} ({info.note}): tl.dot was lowered to tensor-core "
                "mma instructions, not to fused multiply-adds over k in order"
            )
        cubin = compiled.asm["cubin"]
        out.append(
            {
                "kernel": info.name,
                "note": info.note,
                "arch": f"sm_{arch}",
                "grid": info.grid,
                "lanes": info.lanes,
                "num_warps": info.num_warps,
                "ptx_sha256": hashlib.sha256(ptx).hexdigest(),
                "ptx_bytes": len(ptx),
                "cubin_sha256": hashlib.sha256(cubin).hexdigest(),
                "cubin_bytes": len(cubin),
                "fma_in_ptx": bool(re.search(rb"\bfma\.rn\.f32\b", ptx)),
                "dot": bool(info.constexprs.get("DOT")),
                # libdevice's own functions use fused multiply-adds inside (their ulp bound
                # covers them); contraction of the program's ops is off in every compile
                "libdevice": _calls_libdevice(getattr(module, info.name)),
                "shared_bytes": int(getattr(compiled.metadata, "shared", 0) or 0),
            }
        )
    return out


def _calls_libdevice(kernel) -> bool:
    """Whether a generated kernel calls one of the bound transcendentals (`_exp`, ...)."""
    import inspect

    from gdv.backends.triton.elementwise import MATH_NAMES

    fn = getattr(kernel, "fn", kernel)
    try:
        text = inspect.getsource(fn)
    except (OSError, TypeError):
        return True  # unknown: not claimed free of libdevice
    return any(re.search(rf"\b_{n}\(", text) for n in MATH_NAMES)
