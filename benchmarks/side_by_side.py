"""gdv's C target beside numpy, PyTorch eager, torch.compile (inductor, CPU) and onnxruntime, in
one process, on the same inputs (issue 5, item 3).

    python benchmarks/side_by_side.py [--quick] [--only NAME ...] [--out FILE]

Workloads: the examples as written (examples/mlp.gdv, attention.gdv, layernorm_gelu.gdv,
conv_block.gdv), then larger ones: a 1024^3 f32 matmul, an MLP, layer_norm+GELU, softmax, a
causal attention block and a conv+bias+relu+maxpool block. Each is written once as gdv IR,
once in numpy and once as a torch module (exported to ONNX for onnxruntime with
`torch.onnx.export(dynamo=False)`). Before timing, every engine's output is compared with
gdv's (the largest absolute difference is reported; a difference above 1e-3 relative to the
output's scale marks the row). The engines then take three turns each, one after another,
each turn a third of a second of back-to-back calls after 0.2 s of quiet (so no engine's idle
threads still spin; at least 5 runs in all, at most 2000): a burst of load from elsewhere on a
shared machine lands in one of several windows of each engine. The median is reported,
and `gdv/peer` is gdv's median divided by the peer's (below 1: gdv is faster). Results go to
`benchmarks/side_by_side.json` with the machine's capability descriptor. Engines that are not
installed or fail are reported as such, never silently dropped. Timings are this machine's, on
all its cores; none of this is a unit test.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import statistics
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# torch.compile's inductor compiles in a pool of worker processes by default; they stay alive
# and kept the 2-core Zen 4 host busy enough that every engine timed after the first
# torch.compile lost: `--only mobilenet_block conv_block`, conv_block's gdv-c 0.870 ms and
# onnxruntime 0.518 with the pool, 0.314 and 0.323 with one compile thread (2026-12-05). The
# setting only changes how inductor compiles, not the code it makes.
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

HERE = Path(__file__).resolve().parent


@dataclass
class Workload:
    name: str
    what: str
    ir: str
    inputs: dict[str, np.ndarray]
    numpy_fn: Callable[..., np.ndarray]
    torch_module: Callable[[], object]  # builds an nn.Module taking the inputs in order
    flops: float


def _rng_inputs(shapes: dict[str, tuple[tuple[int, ...], float, float]], seed: int = 0):
    rng = np.random.default_rng(seed)
    return {
        k: rng.uniform(lo, hi, size=shape).astype(np.float32)
        for k, (shape, lo, hi) in shapes.items()
    }


def _ty(shape: tuple[int, ...]) -> str:
    return f"f32[{','.join(map(str, shape))}]"


def _params(shapes: dict[str, tuple[tuple[int, ...], float, float]]) -> str:
    return ", ".join(
        f"%{k}: {_ty(s)} {{range = [{lo!r}, {hi!r}]}}" for k, (s, lo, hi) in shapes.items()
    )


# --- workloads --------------------------------------------------------------------------------


def matmul(n: int = 1024) -> Workload:
    shapes = {"a": ((n, n), -1.0, 1.0), "b": ((n, n), -1.0, 1.0)}
    ir = (
        f"func @main({_params(shapes)}) -> f32[{n},{n}] {{\n"
        f"  %0 = matmul(%a, %b) : f32[{n},{n}]\n  return %0\n}}\n"
    )

    def torch_module():
        import torch

        class M(torch.nn.Module):
            def forward(self, a, b):
                return a @ b

        return M()

    return Workload(
        "matmul", f"{n}x{n}x{n} f32", ir, _rng_inputs(shapes), np.matmul, torch_module, 2 * n**3
    )


def mlp(batch: int = 256, d_in: int = 784, hidden: int = 1024, d_out: int = 10) -> Workload:
    shapes = {
        "x": ((batch, d_in), -1.0, 1.0),
        "w1": ((d_in, hidden), -0.05, 0.05),
        "b1": ((hidden,), -0.1, 0.1),
        "w2": ((hidden, d_out), -0.05, 0.05),
        "b2": ((d_out,), -0.1, 0.1),
    }
    ir = f"""func @main({_params(shapes)}) -> f32[{batch},{d_out}] {{
  %0 = matmul(%x, %w1) : f32[{batch},{hidden}]
  %1 = broadcast(%b1) {{dims = [1]}} : f32[{batch},{hidden}]
  %2 = add(%0, %1) : f32[{batch},{hidden}]
  %3 = relu(%2) : f32[{batch},{hidden}]
  %4 = matmul(%3, %w2) : f32[{batch},{d_out}]
  %5 = broadcast(%b2) {{dims = [1]}} : f32[{batch},{d_out}]
  %6 = add(%4, %5) : f32[{batch},{d_out}]
  return %6
}}
"""

    def np_fn(x, w1, b1, w2, b2):
        return np.maximum(x @ w1 + b1, 0) @ w2 + b2

    def torch_module():
        import torch

        class M(torch.nn.Module):
            def forward(self, x, w1, b1, w2, b2):
                return torch.relu(x @ w1 + b1) @ w2 + b2

        return M()

    flops = 2 * batch * (d_in * hidden + hidden * d_out)
    return Workload(
        "mlp",
        f"{batch}x{d_in} -> {hidden} relu -> {d_out}",
        ir,
        _rng_inputs(shapes),
        np_fn,
        torch_module,
        flops,
    )


def _np_layer_norm(x, gamma, beta, eps=1e-5):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + np.float32(eps)) * gamma + beta


def _np_gelu_tanh(x):
    c = np.float32(math.sqrt(2.0 / math.pi))
    return np.float32(0.5) * x * (1 + np.tanh(c * (x + np.float32(0.044715) * x**3)))


def layernorm_gelu(rows: int = 4096, d: int = 1024) -> Workload:
    shapes = {
        "x": ((rows, d), -3.0, 3.0),
        "gamma": ((d,), 0.5, 1.5),
        "beta": ((d,), -0.1, 0.1),
    }
    ir = f"""func @main({_params(shapes)}) -> f32[{rows},{d}] {{
  %h = layer_norm(%x, %gamma, %beta) {{axes = [1], eps = 1e-05}} : f32[{rows},{d}]
  %g = gelu(%h) {{approximate = "tanh"}} : f32[{rows},{d}]
  return %g
}}
"""

    def np_fn(x, gamma, beta):
        return _np_gelu_tanh(_np_layer_norm(x, gamma, beta))

    def torch_module():
        import torch

        class M(torch.nn.Module):
            def forward(self, x, gamma, beta):
                h = torch.nn.functional.layer_norm(x, (d,), gamma, beta, 1e-5)
                return torch.nn.functional.gelu(h, approximate="tanh")

        return M()

    return Workload(
        "layernorm_gelu",
        f"gelu(layer_norm(x)), x {rows}x{d}",
        ir,
        _rng_inputs(shapes),
        np_fn,
        torch_module,
        0.0,
    )


def softmax(rows: int = 4096, d: int = 1024) -> Workload:
    shapes = {"x": ((rows, d), -8.0, 8.0)}
    ir = f"""func @main({_params(shapes)}) -> f32[{rows},{d}] {{
  %p = softmax(%x) {{axis = 1}} : f32[{rows},{d}]
  return %p
}}
"""

    def np_fn(x):
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    def torch_module():
        import torch

        class M(torch.nn.Module):
            def forward(self, x):
                return torch.softmax(x, dim=-1)

        return M()

    return Workload(
        "softmax", f"rows of {rows}x{d}", ir, _rng_inputs(shapes), np_fn, torch_module, 0.0
    )


def attention(seq: int = 128, d: int = 256, heads: int = 4) -> Workload:
    dh = d // heads
    s = {
        "x": ((seq, d), -2.0, 2.0),
        "gamma": ((d,), 0.5, 1.5),
        "beta": ((d,), -0.1, 0.1),
        "wq": ((d, d), -0.0625, 0.0625),
        "wk": ((d, d), -0.0625, 0.0625),
        "wv": ((d, d), -0.0625, 0.0625),
        "wo": ((d, d), -0.0625, 0.0625),
    }
    scale = 1.0 / math.sqrt(dh)
    ir = f"""func @main({_params(s)}) -> f32[{seq},{d}] {{
  %h = layer_norm(%x, %gamma, %beta) {{axes = [1], eps = 1e-05}} : f32[{seq},{d}]
  %q = matmul(%h, %wq) : f32[{seq},{d}]
  %k = matmul(%h, %wk) : f32[{seq},{d}]
  %v = matmul(%h, %wv) : f32[{seq},{d}]
  %q3 = reshape(%q) : f32[{seq},{heads},{dh}]
  %qh = transpose(%q3) {{perm = [1, 0, 2]}} : f32[{heads},{seq},{dh}]
  %k3 = reshape(%k) : f32[{seq},{heads},{dh}]
  %kt = transpose(%k3) {{perm = [1, 2, 0]}} : f32[{heads},{dh},{seq}]
  %v3 = reshape(%v) : f32[{seq},{heads},{dh}]
  %vh = transpose(%v3) {{perm = [1, 0, 2]}} : f32[{heads},{seq},{dh}]
  %sc = matmul(%qh, %kt) : f32[{heads},{seq},{seq}]
  %scale = constant() {{value = {scale!r}}} : f32[{heads},{seq},{seq}]
  %ss = mul(%sc, %scale) : f32[{heads},{seq},{seq}]
  %qpos = iota() {{axis = 1}} : i32[{heads},{seq},{seq}]
  %kpos = iota() {{axis = 2}} : i32[{heads},{seq},{seq}]
  %keep = cmp(%kpos, %qpos) {{dir = "le"}} : i1[{heads},{seq},{seq}]
  %ninf = constant() {{value = -inf}} : f32[{heads},{seq},{seq}]
  %masked = select(%keep, %ss, %ninf) : f32[{heads},{seq},{seq}]
  %p = softmax(%masked) {{axis = 2}} : f32[{heads},{seq},{seq}]
  %o = matmul(%p, %vh) : f32[{heads},{seq},{dh}]
  %ot = transpose(%o) {{perm = [1, 0, 2]}} : f32[{seq},{heads},{dh}]
  %om = reshape(%ot) : f32[{seq},{d}]
  %proj = matmul(%om, %wo) : f32[{seq},{d}]
  %y = add(%x, %proj) : f32[{seq},{d}]
  return %y
}}
"""
    f32 = np.float32

    def np_fn(x, gamma, beta, wq, wk, wv, wo):
        h = _np_layer_norm(x, gamma, beta)
        q = (h @ wq).reshape(seq, heads, dh).transpose(1, 0, 2)
        k = (h @ wk).reshape(seq, heads, dh).transpose(1, 2, 0)
        v = (h @ wv).reshape(seq, heads, dh).transpose(1, 0, 2)
        sc = (q @ k) * f32(scale)
        mask = np.tril(np.ones((seq, seq), dtype=bool))
        sc = np.where(mask, sc, f32(-np.inf))
        e = np.exp(sc - sc.max(axis=-1, keepdims=True))
        p = e / e.sum(axis=-1, keepdims=True)
        o = (p @ v).transpose(1, 0, 2).reshape(seq, d)
        return x + o @ wo

    def torch_module():
        import torch

        class M(torch.nn.Module):
            def forward(self, x, gamma, beta, wq, wk, wv, wo):
                h = torch.nn.functional.layer_norm(x, (d,), gamma, beta, 1e-5)
                q = (h @ wq).reshape(seq, heads, dh).transpose(0, 1)
                k = (h @ wk).reshape(seq, heads, dh).permute(1, 2, 0)
                v = (h @ wv).reshape(seq, heads, dh).transpose(0, 1)
                sc = (q @ k) * scale
                mask = torch.ones(seq, seq, dtype=torch.bool, device=x.device).tril()
                sc = sc.masked_fill(~mask, float("-inf"))
                o = (torch.softmax(sc, dim=-1) @ v).transpose(0, 1).reshape(seq, d)
                return x + o @ wo

        return M()

    flops = 2 * seq * d * d * 4 + 2 * 2 * heads * seq * seq * dh
    return Workload(
        "attention",
        f"causal, seq {seq}, d_model {d}, {heads} heads",
        ir,
        _rng_inputs(s),
        np_fn,
        torch_module,
        flops,
    )


def conv_block(batch: int = 8, cin: int = 3, cout: int = 16, hw: int = 64) -> Workload:
    s = {
        "x": ((batch, cin, hw, hw), 0.0, 1.0),
        "w": ((cout, cin, 3, 3), -0.2, 0.2),
        "b": ((cout,), -0.1, 0.1),
    }
    h2 = hw // 2
    ir = f"""func @main({_params(s)}) -> f32[{batch},{cout},{h2},{h2}] {{
  %c = conv2d(%x, %w) {{stride = [1, 1], padding = [[1, 1], [1, 1]], dilation = [1, 1], groups = 1}} : f32[{batch},{cout},{hw},{hw}]
  %bb = broadcast(%b) {{dims = [1]}} : f32[{batch},{cout},{hw},{hw}]
  %cb = add(%c, %bb) : f32[{batch},{cout},{hw},{hw}]
  %r = relu(%cb) : f32[{batch},{cout},{hw},{hw}]
  %win = reshape(%r) : f32[{batch},{cout},{h2},2,{h2},2]
  %pool = reduce_max(%win) {{axes = [3, 5]}} : f32[{batch},{cout},{h2},{h2}]
  return %pool
}}
"""  # noqa: E501

    def np_fn(x, w, b):
        xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))
        c = np.einsum("bihwkl,oikl->bohw", win, w, optimize=True)
        r = np.maximum(c + b[None, :, None, None], 0)
        return r.reshape(batch, cout, h2, 2, h2, 2).max(axis=(3, 5))

    def torch_module():
        import torch

        class M(torch.nn.Module):
            def forward(self, x, w, b):
                c = torch.nn.functional.conv2d(x, w, b, padding=1)
                return torch.nn.functional.max_pool2d(torch.relu(c), 2)

        return M()

    flops = 2 * batch * cout * hw * hw * cin * 9
    return Workload(
        "conv_block",
        f"3x3 conv {cin}->{cout} on {batch}x{hw}x{hw}, bias, relu, 2x2 maxpool",
        ir,
        _rng_inputs(s),
        np_fn,
        torch_module,
        flops,
    )


def ffn(tokens: int = 32, d: int = 128, hidden: int = 512) -> Workload:
    """A transformer feed-forward block (the layernorm_gelu example's computation)."""
    s = {
        "x": ((tokens, d), -3.0, 3.0),
        "gamma": ((d,), 0.5, 1.5),
        "beta": ((d,), -0.1, 0.1),
        "w1": ((d, hidden), -0.09, 0.09),
        "b1": ((hidden,), -0.1, 0.1),
        "w2": ((hidden, d), -0.045, 0.045),
        "b2": ((d,), -0.1, 0.1),
    }
    ir = f"""func @main({_params(s)}) -> f32[{tokens},{d}] {{
  %h = layer_norm(%x, %gamma, %beta) {{axes = [1], eps = 1e-05}} : f32[{tokens},{d}]
  %u = matmul(%h, %w1) : f32[{tokens},{hidden}]
  %ub = broadcast(%b1) {{dims = [1]}} : f32[{tokens},{hidden}]
  %u1 = add(%u, %ub) : f32[{tokens},{hidden}]
  %g = gelu(%u1) {{approximate = "tanh"}} : f32[{tokens},{hidden}]
  %dd = matmul(%g, %w2) : f32[{tokens},{d}]
  %db = broadcast(%b2) {{dims = [1]}} : f32[{tokens},{d}]
  %d1 = add(%dd, %db) : f32[{tokens},{d}]
  %y = add(%x, %d1) : f32[{tokens},{d}]
  return %y
}}
"""

    def np_fn(x, gamma, beta, w1, b1, w2, b2):
        return x + _np_gelu_tanh(_np_layer_norm(x, gamma, beta) @ w1 + b1) @ w2 + b2

    def torch_module():
        import torch

        class M(torch.nn.Module):
            def forward(self, x, gamma, beta, w1, b1, w2, b2):
                h = torch.nn.functional.layer_norm(x, (d,), gamma, beta, 1e-5)
                g = torch.nn.functional.gelu(h @ w1 + b1, approximate="tanh")
                return x + g @ w2 + b2

        return M()

    return Workload(
        "ffn",
        f"layer_norm, {d}->{hidden} GELU {hidden}->{d}, residual; {tokens} tokens",
        ir,
        _rng_inputs(s),
        np_fn,
        torch_module,
        4 * tokens * d * hidden,
    )


def example(name: str, make: Callable[..., Workload], **sizes) -> Callable[[], Workload]:
    """The example `examples/NAME.gdv` itself, with the generator's numpy and torch versions at
    the example's sizes (outputs are checked against gdv's, so a mismatch would show)."""

    def build() -> Workload:
        from gdv.api import parse
        from gdv.backends import reference

        w = make(**sizes)
        w.ir = (HERE.parent / "examples" / f"{name}.gdv").read_text()
        inputs = reference.random_inputs(parse(w.ir), 0)
        assert list(inputs) == list(w.inputs), (list(inputs), list(w.inputs))
        w.inputs = inputs
        w.name, w.what = f"example {name}", f"examples/{name}.gdv ({w.what})"
        return w

    return build


WORKLOADS = {
    "example-mlp": example("mlp", mlp, batch=8, d_in=784, hidden=128, d_out=10),
    "example-attention": example("attention", attention, seq=16, d=64, heads=4),
    "example-layernorm_gelu": example("layernorm_gelu", ffn, tokens=32, d=128, hidden=512),
    "example-conv_block": example("conv_block", conv_block, batch=2, cin=3, cout=16, hw=32),
    "matmul": matmul,
    "mlp": mlp,
    "layernorm_gelu": layernorm_gelu,
    "softmax": softmax,
    "attention": attention,
    "conv_block": conv_block,
}
QUICK = {
    "example-mlp": {},
    "example-attention": {},
    "example-layernorm_gelu": {},
    "example-conv_block": {},
    "matmul": dict(n=256),
    "mlp": dict(batch=32),
    "layernorm_gelu": dict(rows=256),
    "softmax": dict(rows=256),
    "attention": dict(seq=32, d=64),
    "conv_block": dict(batch=1, hw=16),
}


# --- convolution workloads (issue 16, part 2) --------------------------------------------------


def _np_conv(x, w, stride: int = 1, pad: int = 0, groups: int = 1):
    """conv2d in numpy (NCHW, OIHW), for the conv workloads' output check."""
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    kh, kw = w.shape[2:]
    win = np.lib.stride_tricks.sliding_window_view(xp, (kh, kw), axis=(2, 3))
    win = win[:, :, ::stride, ::stride]
    n, c, oh, ow = win.shape[:4]
    og, cg = w.shape[0] // groups, c // groups
    win = win.reshape(n, groups, cg, oh, ow, kh, kw)
    wg = w.reshape(groups, og, cg, kh, kw)
    out = np.einsum("ngchwkl,gockl->ngohw", win, wg, optimize=True)
    return out.reshape(n, groups * og, oh, ow)


def _conv_ir(out: str, x: str, w: str, shape: tuple, stride: int, pad: int, groups: int) -> str:
    return (
        f"  %{out} = conv2d(%{x}, %{w}) {{stride = [{stride}, {stride}], padding = [[{pad}, "
        f"{pad}], [{pad}, {pad}]], dilation = [1, 1], groups = {groups}}} : {_ty(shape)}\n"
    )


def _bias_ir(out: str, x: str, b: str, shape: tuple) -> str:
    return (
        f"  %{out}.b = broadcast(%{b}) {{dims = [1]}} : {_ty(shape)}\n"
        f"  %{out} = add(%{x}, %{out}.b) : {_ty(shape)}\n"
    )


def _relu6_ir(out: str, x: str, shape: tuple) -> str:
    return (
        f"  %{out}.z = constant() {{value = 0.0}} : {_ty(shape)}\n"
        f"  %{out}.s = constant() {{value = 6.0}} : {_ty(shape)}\n"
        f"  %{out}.m = max(%{x}, %{out}.z) : {_ty(shape)}\n"
        f"  %{out} = min(%{out}.m, %{out}.s) : {_ty(shape)}\n"
    )


def mobilenet_block(c: int = 24, expand: int = 6, hw: int = 56) -> Workload:
    """mobilenet_v2's inverted residual (stride 1): 1x1 expand, bias, relu6; depthwise 3x3,
    bias, relu6; 1x1 project, bias; the residual add (batch norm folded into the biases)."""
    e = c * expand
    s = {
        "x": ((1, c, hw, hw), -1.0, 1.0),
        "w1": ((e, c, 1, 1), -0.3, 0.3),
        "b1": ((e,), -0.1, 0.1),
        "wd": ((e, 1, 3, 3), -0.3, 0.3),
        "bd": ((e,), -0.1, 0.1),
        "w2": ((c, e, 1, 1), -0.1, 0.1),
        "b2": ((c,), -0.1, 0.1),
    }
    big, small = (1, e, hw, hw), (1, c, hw, hw)
    ir = (
        f"func @main({_params(s)}) -> {_ty(small)} {{\n"
        + _conv_ir("e", "x", "w1", big, 1, 0, 1)
        + _bias_ir("eb", "e", "b1", big)
        + _relu6_ir("er", "eb", big)
        + _conv_ir("d", "er", "wd", big, 1, 1, e)
        + _bias_ir("db", "d", "bd", big)
        + _relu6_ir("dr", "db", big)
        + _conv_ir("p", "dr", "w2", small, 1, 0, 1)
        + _bias_ir("pb", "p", "b2", small)
        + f"  %y = add(%pb, %x) : {_ty(small)}\n  return %y\n}}\n"
    )

    def np_fn(x, w1, b1, wd, bd, w2, b2):
        def bias(v, b):
            return v + b[None, :, None, None]

        r = np.clip(bias(_np_conv(x, w1), b1), 0, 6)
        r = np.clip(bias(_np_conv(r, wd, pad=1, groups=e), bd), 0, 6)
        return bias(_np_conv(r, w2), b2) + x

    def torch_module():
        import torch

        f = torch.nn.functional

        class M(torch.nn.Module):
            def forward(self, x, w1, b1, wd, bd, w2, b2):
                r = f.relu6(f.conv2d(x, w1, b1))
                r = f.relu6(f.conv2d(r, wd, bd, padding=1, groups=e))
                return f.conv2d(r, w2, b2) + x

        return M()

    flops = 2 * hw * hw * (c * e * 2 + e * 9)
    what = f"mobilenet_v2 block {c}->{e}->{c} on {hw}x{hw}: 1x1, relu6, dw 3x3, relu6, 1x1, +x"
    return Workload("mobilenet_block", what, ir, _rng_inputs(s), np_fn, torch_module, flops)


def resnet_block(c: int = 64, hw: int = 56) -> Workload:
    """resnet18's basic block (stride 1): 3x3, bias, relu, 3x3, bias, + x, relu."""
    s = {
        "x": ((1, c, hw, hw), -1.0, 1.0),
        "w1": ((c, c, 3, 3), -0.05, 0.05),
        "b1": ((c,), -0.1, 0.1),
        "w2": ((c, c, 3, 3), -0.05, 0.05),
        "b2": ((c,), -0.1, 0.1),
    }
    t = (1, c, hw, hw)
    ir = (
        f"func @main({_params(s)}) -> {_ty(t)} {{\n"
        + _conv_ir("a", "x", "w1", t, 1, 1, 1)
        + _bias_ir("ab", "a", "b1", t)
        + f"  %ar = relu(%ab) : {_ty(t)}\n"
        + _conv_ir("c", "ar", "w2", t, 1, 1, 1)
        + _bias_ir("cb", "c", "b2", t)
        + f"  %s = add(%cb, %x) : {_ty(t)}\n  %y = relu(%s) : {_ty(t)}\n  return %y\n}}\n"
    )

    def np_fn(x, w1, b1, w2, b2):
        r = np.maximum(_np_conv(x, w1, pad=1) + b1[None, :, None, None], 0)
        return np.maximum(_np_conv(r, w2, pad=1) + b2[None, :, None, None] + x, 0)

    def torch_module():
        import torch

        f = torch.nn.functional

        class M(torch.nn.Module):
            def forward(self, x, w1, b1, w2, b2):
                r = f.relu(f.conv2d(x, w1, b1, padding=1))
                return f.relu(f.conv2d(r, w2, b2, padding=1) + x)

        return M()

    flops = 2 * 2 * hw * hw * c * c * 9
    what = f"resnet18 basic block {c} ch on {hw}x{hw}: 3x3, relu, 3x3, +x, relu"
    return Workload("resnet_block", what, ir, _rng_inputs(s), np_fn, torch_module, flops)


def squeeze_excite(c: int = 96, squeeze: int = 4, hw: int = 28) -> Workload:
    """efficientnet_b0's squeeze-excite: global average pool, 1x1 conv to `squeeze` channels,
    silu, 1x1 conv back, sigmoid, scale the input."""
    s = {
        "x": ((1, c, hw, hw), -1.0, 1.0),
        "w1": ((squeeze, c, 1, 1), -0.3, 0.3),
        "b1": ((squeeze,), -0.1, 0.1),
        "w2": ((c, squeeze, 1, 1), -0.3, 0.3),
        "b2": ((c,), -0.1, 0.1),
    }
    t, v, q = (1, c, hw, hw), (1, c, 1, 1), (1, squeeze, 1, 1)
    ir = (
        f"func @main({_params(s)}) -> {_ty(t)} {{\n"
        f"  %sum = reduce_sum(%x) {{axes = [2, 3]}} : f32[1,{c}]\n"
        f"  %n = constant() {{value = {float(hw * hw)!r}}} : f32[1,{c}]\n"
        f"  %mean = div(%sum, %n) : f32[1,{c}]\n"
        f"  %pool = reshape(%mean) : {_ty(v)}\n"
        + _conv_ir("s", "pool", "w1", q, 1, 0, 1)
        + _bias_ir("sb", "s", "b1", q)
        + f"  %sg = sigmoid(%sb) : {_ty(q)}\n  %sl = mul(%sb, %sg) : {_ty(q)}\n"
        + _conv_ir("e", "sl", "w2", v, 1, 0, 1)
        + _bias_ir("eb", "e", "b2", v)
        + f"  %g = sigmoid(%eb) : {_ty(v)}\n"
        f"  %gr = reshape(%g) : f32[1,{c}]\n"
        f"  %gb = broadcast(%gr) {{dims = [0, 1]}} : {_ty(t)}\n"
        f"  %y = mul(%x, %gb) : {_ty(t)}\n  return %y\n}}\n"
    )

    def np_fn(x, w1, b1, w2, b2):
        p = x.mean(axis=(2, 3), keepdims=True)
        h = _np_conv(p, w1) + b1[None, :, None, None]
        h = h / (1 + np.exp(-h))
        g = 1 / (1 + np.exp(-(_np_conv(h, w2) + b2[None, :, None, None])))
        return x * g

    def torch_module():
        import torch

        f = torch.nn.functional

        class M(torch.nn.Module):
            def forward(self, x, w1, b1, w2, b2):
                p = f.adaptive_avg_pool2d(x, 1)
                g = torch.sigmoid(f.conv2d(f.silu(f.conv2d(p, w1, b1)), w2, b2))
                return x * g

        return M()

    flops = 4 * c * squeeze + 2 * c * hw * hw
    what = f"efficientnet squeeze-excite {c}->{squeeze}->{c} on {hw}x{hw}"
    return Workload("squeeze_excite", what, ir, _rng_inputs(s), np_fn, torch_module, flops)


def conv_workloads() -> tuple[dict, dict]:
    """The convolution rows (full sizes, --quick sizes), kept apart from the others."""
    full = {
        "mobilenet_block": mobilenet_block,
        "resnet_block": resnet_block,
        "squeeze_excite": squeeze_excite,
    }
    quick = {
        "mobilenet_block": dict(hw=14),
        "resnet_block": dict(c=16, hw=14),
        "squeeze_excite": dict(hw=7),
    }
    return full, quick


_CONV_FULL, _CONV_QUICK = conv_workloads()
WORKLOADS.update(_CONV_FULL)
QUICK.update(_CONV_QUICK)


# --- engines ----------------------------------------------------------------------------------


def _gdv(w: Workload, level: int = 2):
    from gdv.driver import compile as gdv_compile

    t = time.perf_counter()
    comp = gdv_compile(w.ir, target="c", level=level)
    setup = time.perf_counter() - t
    return (lambda: comp(**w.inputs)[0]), setup


def _gdv_reassociating(w: Workload):
    """-O3: sums in vector lanes and products with fused multiply-adds (`real` claims)."""
    return _gdv(w, level=3)


def _numpy(w: Workload):
    args = list(w.inputs.values())
    return (lambda: w.numpy_fn(*args)), 0.0


def _torch_eager(w: Workload):
    import torch

    module = w.torch_module().eval()
    args = [torch.from_numpy(a) for a in w.inputs.values()]

    def call():
        with torch.no_grad():
            return module(*args).numpy()

    return call, 0.0


def _torch_compile(w: Workload):
    import torch

    module = w.torch_module().eval()
    args = [torch.from_numpy(a) for a in w.inputs.values()]
    compiled = torch.compile(module, backend="inductor")
    t = time.perf_counter()
    with torch.no_grad():
        compiled(*args)  # compiles
    setup = time.perf_counter() - t

    def call():
        with torch.no_grad():
            return compiled(*args).numpy()

    return call, setup


def _onnxruntime(w: Workload):
    import onnxruntime as ort
    import torch

    module = w.torch_module().eval()
    args = tuple(torch.from_numpy(a) for a in w.inputs.values())
    names = list(w.inputs)
    buf = io.BytesIO()
    t = time.perf_counter()
    with warnings.catch_warnings():  # the TorchScript exporter is deprecated, and asked for
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module, args, buf, input_names=names, output_names=["y"], dynamo=False, opset_version=17
        )
    session = ort.InferenceSession(buf.getvalue(), providers=["CPUExecutionProvider"])
    setup = time.perf_counter() - t
    feed = dict(w.inputs)
    return (lambda: session.run(None, feed)[0]), setup


ENGINES = {
    "gdv-c": _gdv,
    "gdv-c-O3": _gdv_reassociating,
    "numpy": _numpy,
    "torch-eager": _torch_eager,
    "torch-compile": _torch_compile,
    "onnxruntime": _onnxruntime,
}


TURNS = 3
"""How many turns each engine gets: its runs are spread over this many windows."""

SETTLE_S = 0.2
"""Seconds of quiet before each turn, for the previous engine's idle worker threads
(OpenMP's, onnxruntime's) to stop spinning: on a machine with few cores a spinning thread of
one engine would take a core from the next."""

MAX_RUNS = 2000


def _time(calls: dict[str, Callable[[], object]], budget: float = 1.0) -> dict[str, list[float]]:
    """Each call's timed runs: the engines take TURNS turns each, one after another, each turn
    about budget / TURNS seconds of back-to-back calls after SETTLE_S of quiet (at least 5 runs
    in all, at most MAX_RUNS). A burst of load from elsewhere on the machine then lands in one
    of several windows of each engine instead of all of one engine's."""
    runs: dict[str, list[float]] = {name: [] for name in calls}
    for call in calls.values():
        call()  # warm
    for turn in range(TURNS):
        for name, call in calls.items():
            mine = runs[name]
            time.sleep(SETTLE_S)
            call()  # wake any worker threads
            start = time.perf_counter()
            last = turn == TURNS - 1
            while len(mine) < MAX_RUNS * (turn + 1) // TURNS and (
                time.perf_counter() - start < budget / TURNS or (last and len(mine) < 5)
            ):
                t = time.perf_counter()
                call()
                mine.append(time.perf_counter() - t)
    return runs


def _failed(e: Exception) -> dict:
    if "--debug" in sys.argv:
        traceback.print_exc()
    return {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}


def run_workload(w: Workload, engines: list[str], budget: float) -> dict:
    row: dict = {"workload": w.name, "what": w.what, "engines": {}}
    reference = None
    calls: dict[str, Callable[[], object]] = {}
    entries: dict[str, dict] = {}
    for name in engines:  # set up, and compare each engine's output with gdv's
        try:
            call, setup = ENGINES[name](w)
            out = np.asarray(call(), dtype=np.float64)
            if reference is None:
                reference = out
            scale = max(1.0, float(np.max(np.abs(reference))))
            diff = float(np.max(np.abs(out - reference))) if out.size else 0.0
            calls[name] = call
            entries[name] = {
                "setup_s": round(setup, 3),
                "max_abs_diff_vs_gdv": diff,
                "agrees": diff <= 1e-3 * scale,
            }
        except Exception as e:  # noqa: BLE001  (an engine that fails is reported, not hidden)
            entries[name] = _failed(e)
    try:
        timed = _time(calls, budget)
    except Exception as e:  # noqa: BLE001
        timed = {}
        for name in calls:
            entries[name] = _failed(e)
    for name in engines:
        entry = entries[name]
        if name in timed:
            median = statistics.median(timed[name])
            entry = {"median_ms": median * 1e3, "runs": len(timed[name]), **entry}
            if w.flops:
                entry["gflops"] = w.flops / median / 1e9
        row["engines"][name] = entry
        print(f"  {name:<14} {_cell(entry)}", flush=True)
    base = row["engines"].get("gdv-c", {}).get("median_ms")
    o3 = row["engines"].get("gdv-c-O3", {}).get("median_ms")
    for name, entry in row["engines"].items():
        if base and "median_ms" in entry and name != "gdv-c":
            entry["gdv_over_peer"] = base / entry["median_ms"]
        if o3 and "median_ms" in entry and name not in ("gdv-c", "gdv-c-O3"):
            entry["gdv_o3_over_peer"] = o3 / entry["median_ms"]
    return row


def _cell(entry: dict) -> str:
    if "error" in entry:
        return f"error: {entry['error']}"
    flops = f", {entry['gflops']:.1f} GFLOP/s" if "gflops" in entry else ""
    ok = "" if entry["agrees"] else f"  [differs from gdv by {entry['max_abs_diff_vs_gdv']:.3g}]"
    return f"{entry['median_ms']:.3f} ms median of {entry['runs']}{flops}{ok}"


def table(rows: list[dict], engines: list[str]) -> str:
    """A Markdown table: gdv's median and gdv/peer per peer (with -O3's beside it when run)."""
    peers = [e for e in engines if e != "gdv-c"]
    head = "| workload | gdv-c (ms) | " + " | ".join(f"gdv / {p}" for p in peers) + " |"
    lines = [head, "|" + "---|" * (2 + len(peers))]
    for r in rows:
        g = r["engines"].get("gdv-c", {})
        cells = [f"{g['median_ms']:.3f}" if "median_ms" in g else "error"]
        for p in peers:
            e = r["engines"].get(p, {})
            if "gdv_over_peer" in e:
                o3 = f" / {e['gdv_o3_over_peer']:.2f}" if "gdv_o3_over_peer" in e else ""
                cells.append(f"{e['gdv_over_peer']:.2f}{o3} ({e['median_ms']:.3f} ms)")
            else:
                cells.append("error" if "error" in e else "-")
        lines.append(f"| {r['workload']} ({r['what']}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _triton(args: argparse.Namespace) -> int:
    """`--target triton`: the GPU side by side of benchmarks/gpu_check.py, printed as its
    Markdown table and written to --out (default side_by_side_triton.json)."""
    import time as _time

    import gpu_check

    from gdv.backends.triton import runtime

    dry = not runtime.gpu_available()
    if dry:
        print("no CUDA GPU visible to torch: the Triton interpreter on small workloads", flush=True)
    start = _time.perf_counter()
    rows = gpu_check.run_side_by_side(
        dry, 2 if dry else 20, start + (300 if dry else 600), minilm=not args.quick
    )
    device = "CPU interpreter" if dry else "CUDA"
    md = gpu_check.markdown(device, [], rows)
    print(md)
    out = (
        args.out
        if args.out != str(HERE / "side_by_side.json")
        else str(HERE / "side_by_side_triton.json")
    )
    if not args.quick:
        Path(out).write_text(json.dumps({"device": device, "rows": rows}, indent=1, default=str))
        print(f"wrote {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    ap.add_argument("--only", nargs="*", choices=sorted(WORKLOADS), help="these workloads")
    ap.add_argument("--engines", nargs="*", choices=list(ENGINES), default=list(ENGINES))
    ap.add_argument("--budget", type=float, default=1.0, help="seconds per engine and workload")
    ap.add_argument("--out", default=str(HERE / "side_by_side.json"))
    ap.add_argument("--debug", action="store_true", help="print tracebacks of failing engines")
    ap.add_argument(
        "--target",
        choices=["c", "triton"],
        default="c",
        help="triton: gdv's Triton artifacts (-O2 and -O3, launcher and one CUDA graph) against "
        "torch eager and torch.compile on the GPU (benchmarks/gpu_check.py's side by side; the "
        "Triton interpreter on small workloads without one)",
    )
    args = ap.parse_args(argv)
    if args.target == "triton":
        return _triton(args)
    engines = ["gdv-c"] + [e for e in args.engines if e != "gdv-c"]
    rows = []
    for name in args.only or list(WORKLOADS):
        w = WORKLOADS[name](**(QUICK.get(name, {}) if args.quick else {}))
        print(f"{w.name}: {w.what}", flush=True)
        rows.append(run_workload(w, engines, args.budget))
    from gdv.backends.capabilities import descriptor

    versions = {"numpy": np.__version__}
    for mod in ("torch", "onnxruntime", "onnx"):
        try:
            versions[mod] = __import__(mod).__version__
        except ImportError:
            versions[mod] = "not installed"
    caps = descriptor("c")
    result = {
        "command": "python benchmarks/side_by_side.py" + (" --quick" if args.quick else ""),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": caps["machine"],
        "compiler": caps["compiler"],
        "versions": versions,
        "ratio": "gdv/peer = gdv's median time / the peer's (below 1: gdv is faster)",
        "rows": rows,
    }
    md = table(rows, engines)
    print()
    print(md)
    if not args.quick:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
        print(f"\nwrote {args.out}")
        from history import record_side_by_side  # benchmarks/history.py, keyed by machine

        print(f"history: {record_side_by_side(result)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
