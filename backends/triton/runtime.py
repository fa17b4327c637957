"""Loading and running a Triton artifact: on a CUDA GPU when torch sees one, otherwise under the
Triton interpreter (`TRITON_INTERPRET=1`) on CPU tensors.

Triton decides at `@triton.jit` time whether a function is compiled or interpreted, so the
artifact's module is imported once per mode, with the variable set (or cleared) while it is
imported. Under the interpreter libdevice has no implementation: the transcendentals there are
the reference backend's functions (f64, rounded once to f32), so interpreter runs match the
reference bit for bit and a GPU run is within the target's ulp table.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import threading
from pathlib import Path
from types import ModuleType

import numpy as np

from gdv.ir.diagnostics import IRError

try:  # the sigmoid helper below is compiled by triton.jit, which reads these globals
    import triton.language as tl
except ImportError:  # pragma: no cover - without the gpu extra nothing here runs
    tl = None

CACHE_ENV = "GDV_TRITON_CACHE"
"""Where artifacts are written to be imported (default ~/.cache/gdv/triton)."""

_LOCK = threading.Lock()
_LOADED: dict[tuple[str, bool], ModuleType] = {}


def require_triton() -> ModuleType:
    """The triton package; an IRError saying how to install it otherwise."""
    try:
        import torch  # noqa: F401  (the artifacts' tensors)
        import triton
    except ImportError as e:
        raise IRError(
            f"target triton needs the triton and torch packages (pip install 'gdv[gpu]'): {e}"
        ) from None
    return triton


def gpu_available() -> bool:
    """Whether torch sees a CUDA GPU (then artifacts run there)."""
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def mode() -> str:
    """`cuda` (a GPU is present) or `interpreter` (TRITON_INTERPRET=1 on CPU tensors)."""
    return "cuda" if gpu_available() else "interpreter"


def cache_dir() -> Path:
    d = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "gdv" / "triton")
    d.mkdir(parents=True, exist_ok=True)
    return d


def load(text: str, interpreted: bool) -> ModuleType:
    """The artifact `text` imported as a module, its kernels interpreted or compiled."""
    require_triton()
    digest = hashlib.sha256(text.encode()).hexdigest()[:24]
    key = (digest, interpreted)
    with _LOCK:
        if key in _LOADED:
            return _LOADED[key]
        path = cache_dir() / f"gdv_triton_{digest}.py"
        if not path.exists() or path.read_text() != text:
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(text)
            os.replace(tmp, path)
        name = f"gdv_triton_{digest}_{'interp' if interpreted else 'jit'}"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        old = os.environ.get("TRITON_INTERPRET")
        os.environ["TRITON_INTERPRET"] = "1" if interpreted else "0"
        try:
            sys.modules[name] = module  # triton reads a jit function's source through it
            spec.loader.exec_module(module)
        finally:
            if old is None:
                del os.environ["TRITON_INTERPRET"]
            else:
                os.environ["TRITON_INTERPRET"] = old
        _LOADED[key] = module
        return module


def interpreting() -> bool:
    """Whether the module being imported now gets interpreted kernels."""
    import triton

    return bool(triton.knobs.runtime.interpret)


def _reference_shim(name: str):
    """`name` on an interpreter tensor, computed by the reference backend's kernel (f64,
    rounded once to f32)."""
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    from gdv.backends.reference import KERNELS, Context
    from gdv.ir.core import Op
    from gdv.ir.dtypes import DType
    from gdv.ir.ops import REGISTRY as OPS
    from gdv.ir.types import TensorType

    spec = OPS[name]

    def fn(*xs):
        arrays = [np.asarray(x.handle.data, dtype=np.float32) for x in xs]
        shape = np.broadcast_shapes(*(a.shape for a in arrays))
        arrays = [np.broadcast_to(a, shape) for a in arrays]
        op = Op("r", name, [f"a{i}" for i in range(len(xs))], {}, TensorType(DType.F32, shape))
        with np.errstate(all="ignore"):
            out = np.asarray(KERNELS[spec](op, arrays, Context()), dtype=np.float32)
        return tl.core.tensor(TensorHandle(out, xs[0].handle.dtype), xs[0].type)

    return fn


def _sigmoid_f32(x):
    # 1/(1+e^-x) for x >= 0 and e^x/(1+e^x) below: exp never overflows where the result is
    # tiny, so subnormal results keep their bits (IR_SPEC: sigmoid is one op)
    e = _LIBDEVICE.exp(-tl.abs(x))  # bound by math_functions
    d = 1.0 + e
    return tl.where(x >= 0.0, tl.div_rn(1.0, d), tl.div_rn(e, d))


_LIBDEVICE = None


def math_functions() -> tuple:
    """The artifact's transcendentals, in `MATH_NAMES` order: libdevice's (sigmoid: its expf) for a
    compile, the reference's under the interpreter."""
    from gdv.backends.triton.elementwise import MATH_NAMES

    if interpreting():
        return tuple(_reference_shim(n) for n in MATH_NAMES)
    global _LIBDEVICE
    import triton
    from triton.language.extra import libdevice

    _LIBDEVICE = libdevice
    sigmoid = triton.jit(_sigmoid_f32)
    lib = {n: getattr(libdevice, n) for n in MATH_NAMES if n != "sigmoid"}
    return tuple(sigmoid if n == "sigmoid" else lib[n] for n in MATH_NAMES)


_CONSTANTS: dict = {}


def tensor(data: tuple[str, str, tuple[int, ...]], device):
    """A value kept in the artifact (hex bytes, IR dtype, shape) as a torch tensor, made once
    per device (no kernel writes to an operand; a CUDA graph's capture copies nothing)."""
    from gdv.backends.triton import to_torch
    from gdv.ir.dtypes import DType

    key = (data, str(device))
    if key not in _CONSTANTS:
        raw, dtype, shape = data
        arr = np.frombuffer(bytes.fromhex(raw), dtype=DType(dtype).np).reshape(shape)
        _CONSTANTS[key] = to_torch(arr, device)
    return _CONSTANTS[key]
