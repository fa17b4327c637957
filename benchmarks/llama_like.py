"""A Llama-like decoder as a gdv program: only shapes, no weights (issue 17, item 4).

`python benchmarks/llama_like.py [--layers 32] [--hidden 4096] [--heads 32] [--kv-heads 8]
[--ffn 11008] [--seq 2048] [--dtype f32]` prints a .gdv module whose @main runs `layers`
pre-norm decoder blocks on `seq` tokens: RMSNorm (x * rsqrt(mean(x^2) + eps) * g), causal
self-attention with grouped-query heads (each of the `kv-heads` key/value heads broadcast to
`heads / kv-heads` query heads), a residual, RMSNorm, a SwiGLU MLP (down(silu(gate(h)) *
up(h)), silu(a) = a * sigmoid(a)) and a residual. Rotary embeddings are left out (elementwise
work on Q and K that changes no sharding choice). Every weight is a parameter.

`gdv plan` reads it like any program: `python benchmarks/llama_like.py > /tmp/llama.gdv; gdv
plan /tmp/llama.gdv --mesh data=8,model=8`.
"""

from __future__ import annotations

import argparse
import sys


def decoder(
    layers: int = 32,
    hidden: int = 4096,
    heads: int = 32,
    kv_heads: int = 8,
    ffn: int = 11008,
    seq: int = 2048,
    dtype: str = "f32",
) -> str:
    """The program's text."""
    if hidden % heads or heads % kv_heads:
        raise ValueError("hidden must be a multiple of heads, heads of kv_heads")
    d, t, f, hd = hidden, seq, ffn, hidden // heads
    kv = kv_heads * hd
    rep = heads // kv_heads
    ty = dtype

    def T(*shape: int) -> str:
        return f"{ty}[{','.join(map(str, shape))}]"

    params = [f"%x: {T(t, d)} {{range = [-1.0, 1.0]}}"]
    body: list[str] = []
    x = "%x"
    for n in range(layers):
        p = f"l{n}"
        params += [
            f"%{p}_g1: {T(d)}",
            f"%{p}_wq: {T(d, d)}",
            f"%{p}_wk: {T(d, kv)}",
            f"%{p}_wv: {T(d, kv)}",
            f"%{p}_wo: {T(d, d)}",
            f"%{p}_g2: {T(d)}",
            f"%{p}_wg: {T(d, f)}",
            f"%{p}_wu: {T(d, f)}",
            f"%{p}_wd: {T(f, d)}",
        ]

        def rms(src: str, gamma: str, tag: str, p: str = p) -> str:
            v = f"%{p}_{tag}"
            body.extend(
                [
                    f"  {v}sq = mul({src}, {src}) : {T(t, d)}",
                    f"  {v}ss = reduce_sum({v}sq) {{axes = [1]}} : {T(t)}",
                    f"  {v}inv = constant() {{value = {1.0 / d!r}}} : {T(t)}",
                    f"  {v}ms = mul({v}ss, {v}inv) : {T(t)}",
                    f"  {v}eps = constant() {{value = 1e-05}} : {T(t)}",
                    f"  {v}me = add({v}ms, {v}eps) : {T(t)}",
                    f"  {v}r = rsqrt({v}me) : {T(t)}",
                    f"  {v}rb = broadcast({v}r) {{dims = [0]}} : {T(t, d)}",
                    f"  {v}n = mul({src}, {v}rb) : {T(t, d)}",
                    f"  {v}gb = broadcast({gamma}) {{dims = [1]}} : {T(t, d)}",
                    f"  {v}h = mul({v}n, {v}gb) : {T(t, d)}",
                ]
            )
            return f"{v}h"

        h = rms(x, f"%{p}_g1", "n1")
        a = f"%{p}_"
        body.extend(
            [
                f"  {a}q = matmul({h}, %{p}_wq) : {T(t, d)}",
                f"  {a}q3 = reshape({a}q) : {T(t, heads, hd)}",
                f"  {a}qh = transpose({a}q3) {{perm = [1, 0, 2]}} : {T(heads, t, hd)}",
                f"  {a}k = matmul({h}, %{p}_wk) : {T(t, kv)}",
                f"  {a}k3 = reshape({a}k) : {T(t, kv_heads, hd)}",
                f"  {a}kt = transpose({a}k3) {{perm = [1, 2, 0]}} : {T(kv_heads, hd, t)}",
                f"  {a}kr = broadcast({a}kt) {{dims = [0, 2, 3]}} : {T(kv_heads, rep, hd, t)}",
                f"  {a}kh = reshape({a}kr) : {T(heads, hd, t)}",
                f"  {a}v = matmul({h}, %{p}_wv) : {T(t, kv)}",
                f"  {a}v3 = reshape({a}v) : {T(t, kv_heads, hd)}",
                f"  {a}vt = transpose({a}v3) {{perm = [1, 0, 2]}} : {T(kv_heads, t, hd)}",
                f"  {a}vr = broadcast({a}vt) {{dims = [0, 2, 3]}} : {T(kv_heads, rep, t, hd)}",
                f"  {a}vh = reshape({a}vr) : {T(heads, t, hd)}",
                f"  {a}s = matmul({a}qh, {a}kh) : {T(heads, t, t)}",
                f"  {a}sc = constant() {{value = {1.0 / hd**0.5!r}}} : {T()}",
                f"  {a}scb = broadcast({a}sc) {{dims = []}} : {T(heads, t, t)}",
                f"  {a}ss = mul({a}s, {a}scb) : {T(heads, t, t)}",
                # the causal mask: made on [t, t] once per layer, broadcast over the heads
                f"  {a}qp = iota() {{axis = 0}} : i32[{t},{t}]",
                f"  {a}kp = iota() {{axis = 1}} : i32[{t},{t}]",
                f'  {a}keep = cmp({a}kp, {a}qp) {{dir = "le"}} : i1[{t},{t}]',
                f"  {a}kb = broadcast({a}keep) {{dims = [1, 2]}} : i1[{heads},{t},{t}]",
                f"  {a}ninf = constant() {{value = -inf}} : {T()}",
                f"  {a}nb = broadcast({a}ninf) {{dims = []}} : {T(heads, t, t)}",
                f"  {a}sm = select({a}kb, {a}ss, {a}nb) : {T(heads, t, t)}",
                f"  {a}p = softmax({a}sm) {{axis = 2}} : {T(heads, t, t)}",
                f"  {a}o = matmul({a}p, {a}vh) : {T(heads, t, hd)}",
                f"  {a}ot = transpose({a}o) {{perm = [1, 0, 2]}} : {T(t, heads, hd)}",
                f"  {a}om = reshape({a}ot) : {T(t, d)}",
                f"  {a}proj = matmul({a}om, %{p}_wo) : {T(t, d)}",
                f"  {a}res = add({x}, {a}proj) : {T(t, d)}",
            ]
        )
        h2 = rms(f"{a}res", f"%{p}_g2", "n2")
        body.extend(
            [
                f"  {a}gate = matmul({h2}, %{p}_wg) : {T(t, f)}",
                f"  {a}sg = sigmoid({a}gate) : {T(t, f)}",
                f"  {a}silu = mul({a}gate, {a}sg) : {T(t, f)}",
                f"  {a}up = matmul({h2}, %{p}_wu) : {T(t, f)}",
                f"  {a}gu = mul({a}silu, {a}up) : {T(t, f)}",
                f"  {a}down = matmul({a}gu, %{p}_wd) : {T(t, d)}",
                f"  {a}out = add({a}res, {a}down) : {T(t, d)}",
            ]
        )
        x = f"{a}out"
    head = (
        f"// A Llama-like decoder: {layers} layers, hidden {d}, {heads} heads ({kv_heads} "
        f"key/value heads), SwiGLU {f}, {t} tokens, {ty}.\n"
        f"// Generated by benchmarks/llama_like.py: shapes only, no weights.\n"
    )
    sig = ",\n           ".join(params)
    return head + f"func @main({sig}) -> {T(t, d)} {{\n" + "\n".join(body) + f"\n  return {x}\n}}\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--ffn", type=int, default=11008)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--dtype", default="f32")
    a = ap.parse_args(argv)
    sys.stdout.write(decoder(a.layers, a.hidden, a.heads, a.kv_heads, a.ffn, a.seq, a.dtype))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
