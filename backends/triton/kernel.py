"""A Triton kernel for the loop stage's `kernel` op (IR_SPEC.md section 7), keeping its meaning
exactly.

One program computes one block of outputs: the schedule's tile of the out dims (`tile`),
each extent rounded up to a power of two (Triton's blocks are), the lanes past the tile or the
result masked. Each lane folds its output's reduced positions one after the other, in the
kernel's order (row-major over `reduce` as listed: `acc = body(first); acc = combine(acc,
body(next))`), so a product accumulates over k sequentially with separate multiply and add, a
reduction folds left, and the result is the reference's bit for bit. The vector runs across the
independent outputs, never along a fold. `accumulators` and `lanes` (the orders
`reassociate-reductions` claims under `real`) fold their blocks or lanes in the order the IR
says, and `contract = "fma"` is `tl.fma` (one rounding), exactly as written.
"""

from __future__ import annotations

import math

from gdv.backends.triton.elementwise import call, full, round_to
from gdv.backends.triton.emit import (
    INDEX_LIMIT,
    POINTER,
    TL,
    TORCH,
    BodyWriter,
    KernelInfo,
    Program,
    check_dtype,
    comment,
    compute,
)
from gdv.backends.triton.registry import BODY, host
from gdv.ir.core import Function, Op
from gdv.ir.dtypes import DType
from gdv.ir.ops import REGISTRY as OPS
from gdv.ir.ops import get as get_spec
from gdv.ir.ops.kernel import BODY_OPS, params_of

MAX_LANES = 1024
"""The most outputs one program computes (Triton's blocks are at most a few thousand lanes;
beyond this the registers spill)."""

_IDENTITY = {
    ("add", True): "0.0",
    ("max", True): 'float("-inf")',
    ("min", True): 'float("inf")',
    ("add", False): "0",
}


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _strides(shape: list[int]) -> list[int]:
    out, s = [], 1
    for n in reversed(shape):
        out.append(s)
        s *= n
    return out[::-1]


def _identity(combiner: str, dtype: DType) -> str:
    if combiner == "add" or dtype.is_float:
        return _IDENTITY[(combiner, dtype.is_float)]
    n = {DType.I64: 64, DType.I32: 32, DType.I8: 8}[dtype]
    return str(-(2 ** (n - 1)) if combiner == "max" else 2 ** (n - 1) - 1)


def _combine(prog: Program, combiner: str, dtype: DType, acc: str, v: str) -> str:
    if combiner == "add":
        return round_to(prog, dtype, f"{acc} + {v}")
    if dtype.is_float:
        kind = "_fmax" if combiner == "max" else "_fmin"
        return call(prog, f"{kind}_{compute(dtype).value}", acc, v)
    return f"tl.{'maximum' if combiner == 'max' else 'minimum'}({acc}, {v})"


def out_blocks(prog: Program, op: Op, limit: int = MAX_LANES) -> tuple[list[int], list[int]]:
    """(tile, lanes) per out dim: the schedule's tile (the whole extent without one), each
    lane count the tile rounded up to a power of two, shrunk from the outermost dim while the
    block has more than `MAX_LANES` lanes (a printer choice, recorded)."""
    space, out = op.attrs["space"], op.attrs["out"]
    tile_attr = op.attrs.get("tile") or space
    tiles = [max(1, min(int(tile_attr[d]), space[d])) for d in out]
    lanes = [_pow2(t) for t in tiles]
    shrunk = False
    while math.prod(lanes) > limit:
        k = next(k for k, n in enumerate(lanes) if n > 1)
        lanes[k] //= 2
        tiles[k] = min(tiles[k], lanes[k])
        shrunk = True
    if shrunk:
        prog.choose(
            op,
            "tile",
            tiles,
            f"the schedule's out tile has more than {limit} lanes once rounded to powers "
            "of two; the outermost dims are halved",
        )
    return tiles, lanes


@host(OPS["kernel"])
def _kernel(prog: Program, op: Op) -> None:
    module = prog.module
    fn = module.function(op.attrs["body"])
    if fn is None:
        raise prog.error(op, "its body function is not in the module")
    for key in ("epilogue", "fill"):
        if key in op.attrs:
            raise prog.error(op, f"{key} is not implemented on this target yet")
    types = prog.types()
    operand_types = [types[o] for o in op.operands]
    for t in [op.type, *operand_types]:
        check_dtype(module, op, t.dtype)
        if t.num_elements > INDEX_LIMIT:
            raise prog.error(op, f"a tensor of {t.num_elements} elements exceeds 32-bit indices")
    space, out, red = list(op.attrs["space"]), list(op.attrs["out"]), list(op.attrs["reduce"])
    if math.prod(space[d] for d in red) > INDEX_LIMIT:
        raise prog.error(op, "its reduction has more positions than 32-bit indices hold")
    combiner = op.attrs["combiner"]
    dtype = op.type.dtype
    if combiner != "none" and dtype.is_bool:
        raise prog.error(op, "a fold of i1 values has no meaning")
    k = len(prog.infos)
    name = f"_k{k}"
    roles = dot_roles(op, fn, operand_types)
    if roles is not None:
        _dot_kernel(prog, op, name, roles, operand_types)
        return
    fold_lanes = parallel_lanes(op)
    tiles, lanes = out_blocks(prog, op, MAX_LANES // fold_lanes)
    counts = [-(-space[d] // t) for d, t in zip(out, tiles, strict=True)]
    grid = math.prod(counts)
    block = math.prod(lanes) * fold_lanes
    num_warps = max(1, min(8, block // 128))
    maps = op.attrs["maps"]
    params = ["y", *[f"x{i}" for i in range(len(op.operands))]]
    note = (
        f"kernel %{comment(op.result)}: body @{comment(op.attrs['body'])}, space {space}, "
        f"out {out}, reduce {red}, combiner {combiner}"
    )
    lines = [
        "@triton.jit",
        f"def {name}({', '.join(params)}, LANES: tl.constexpr):",
        f"    # {note}",
        "    pid = tl.program_id(0)",
    ]
    # The block has one axis per out dim (its lanes along that axis, 1 along the others), so
    # an operand that does not read an out dim is loaded once for the whole axis (a product's
    # row and column slices) and broadcast: out dim d at axis a has lane coordinate j (inside
    # the tile), tile coordinate, index i = tile * t + j and mask m.
    # With `lanes` folded in parallel (`parallel_lanes`) the block has one more axis, last: the
    # fold's lane q, of extent L; the stores then see the out axes and an axis of 1.
    block_out = list(lanes) if out else [1]
    dims = block_out + ([fold_lanes] if fold_lanes > 1 else [])
    shape = str(dims)
    store_shape = str(block_out + ([1] if fold_lanes > 1 else []))
    ones = str([1] * len(dims))

    def axis(a: int) -> str:
        return (
            ""
            if len(dims) == 1
            else "[" + ", ".join(":" if b == a else "None" for b in range(len(dims))) + "]"
        )

    grid_strides = _strides(counts)
    for a, d in enumerate(out):
        lines.append(f"    j{d} = tl.arange(0, {lanes[a]}){axis(a)}")
        lines.append(f"    i{d} = ((pid // {grid_strides[a]}) % {counts[a]}) * {tiles[a]} + j{d}")
        lines.append(f"    m{d} = (j{d} < {tiles[a]}) & (i{d} < {space[d]})")
    ystrides = _strides([space[d] for d in out])
    if out:
        lines.append(f"    m = {' & '.join(f'm{d}' for d in out)}")
        terms = [f"i{d} * {s}" for d, s in zip(out, ystrides, strict=True)]
        lines.append(f"    yo = {' + '.join(terms)}")
    else:
        lines.append(f"    yo = tl.arange(0, 1){axis(0)} * 0")
        lines.append("    m = yo == 0")
    if fold_lanes > 1:
        lines.append(f"    q = tl.arange(0, {fold_lanes}){axis(len(dims) - 1)}")
    # per operand: its offset's coefficient per loop dim, the part from the out dims, and the
    # mask of the out dims it reads (none: one element, always in bounds, no mask)
    linear, masks = [], []
    for i, (t, rows) in enumerate(zip(operand_types, maps, strict=True)):
        strides = _strides(list(t.shape))
        coef = [
            sum(s * row[c] for s, row in zip(strides, rows, strict=True)) for c in range(len(space))
        ]
        const = sum(s * row[-1] for s, row in zip(strides, rows, strict=True))
        linear.append(coef)
        base = [f"i{d} * {coef[d]}" for d in out if coef[d]] + [str(const)]
        lines.append(f"    b{i} = {' + '.join(base)}")
        read = [f"m{d}" for d in out if coef[d]]
        masks.append(" & ".join(read) if read else None)
    counter = [0]

    def value_at(reduce_index: dict[int, str], indent: str, fused: bool = False) -> str | tuple:
        """Lines loading the operands at the reduced position given by `reduce_index` and
        computing the body; its expression (or, `fused`, the final mul's two operands)."""
        w = BodyWriter(prog, op, lines, indent, counter, ones)
        env: dict[str, tuple[str, DType]] = {}
        for i, (p, t) in enumerate(zip(fn.params, operand_types, strict=True)):
            off = [f"b{i}"] + [f"{reduce_index[d]} * {linear[i][d]}" for d in red if linear[i][d]]
            v = w.fresh()
            other = "0" if not t.dtype.is_float else "0.0"
            where = f", mask={masks[i]}, other={other}" if masks[i] else ""
            load = f"tl.load(x{i} + ({' + '.join(off)}){where})"
            if t.dtype is DType.BF16:
                load = call(prog, "_widen_bf16", load)
            elif compute(t.dtype) is not t.dtype:
                load = f"{load}.to({TL[compute(t.dtype)]})"
            lines.append(f"{indent}{v} = {load}")
            env[p.name] = (v, t.dtype)
        body_ops = fn.ops[:-1] if fused else fn.ops
        for b in body_ops:
            spec = get_spec(b.name)
            if b.name not in BODY_OPS or b.type.rank != 0 or spec not in BODY:
                raise w.error(b, "is not a scalar elementwise op this target computes")
            check_dtype(module, op, b.type.dtype)
            args = [env[o][0] for o in b.operands]
            dts = [env[o][1] for o in b.operands]
            for dt in dts:
                check_dtype(module, op, dt)
            expr = round_to(prog, b.type.dtype, BODY[spec](w, b, args, dts))
            v = w.fresh()
            lines.append(f"{indent}{v} = {expr}  # %{comment(b.result)} = {comment(b.name)}")
            env[b.result] = (v, b.type.dtype)
        if fused:
            last = fn.ops[-1]
            return env[last.operands[0]][0], env[last.operands[1]][0]
        (ret,) = fn.returns
        if env[ret][1] is not dtype:
            raise prog.error(op, "its body returns another dtype than the kernel's")
        return env[ret][0]

    if not red:
        result = value_at({}, "    ")
    elif fold_lanes > 1:
        result = _fold_lanes(prog, op, fold_lanes, block_out, lines, value_at)
        result = f"tl.expand_dims({result}, {len(block_out)})"
    else:
        result = _fold(prog, op, red, space, combiner, dtype, lines, value_at, fn, shape)
    if dtype is DType.BF16:
        result = call(prog, "_narrow_bf16", result)  # exact: the value is one of bf16's
    elif compute(dtype) is not dtype:
        result = f"{result}.to({TL[dtype]})"  # exact: the value is one of dtype's
    lines.append(f"    tl.store(y + yo, tl.broadcast_to({result}, {store_shape}), mask=m)")
    prog.kernels.append("\n".join(lines) + "\n")
    signature = {
        p: POINTER[t.dtype] for p, t in zip(params, [op.type, *operand_types], strict=True)
    }
    signature["LANES"] = "constexpr"
    prog.infos.append(KernelInfo(name, signature, block, num_warps, grid, note))
    prog.choose(
        op,
        "launch",
        {"grid": grid, "lanes": block, "num_warps": num_warps},
        "one program per tile of the out dims (the schedule's tile), a block with one axis per "
        "out dim, each the tile's extent rounded up to a power of two; one warp per 128 lanes",
    )
    y = prog.var(op.result)
    shape = tuple(op.type.shape)
    prog.launcher.append(f"    # {note}")
    prog.launcher.append(f"    {y} = torch.empty({shape}, dtype={TORCH[dtype]}, device=device)")
    if op.type.num_elements:
        args = ", ".join([y, *[prog.var(o) for o in op.operands]])
        prog.launcher.append(
            f"    {name}[({grid},)]({args}, LANES={block}, num_warps={num_warps}, **LAUNCH)"
        )


DOT_BLOCK = (64, 64, 32)
"""The largest (rows, columns, k) block of a product run as `tl.dot`s (each at least 16, the
least `tl.dot` takes; smaller extents are masked)."""
DOT_WARPS = 4
"""Warps per program of a `tl.dot` product."""
DOT_MIN_PROGRAMS = 132
"""A product whose DOT_BLOCK tiling makes fewer programs than this (the SM count of the sm_90
table: H100, H200) halves its row block to 32. Measured on an H200 (2026-12-04,
benchmarks/gpu_check_h200_o3_run4.md): MiniLM's FFN (128 tokens, 48 programs at 64 x 64)
0.203 ms at 64 x 64 x 32, 0.137 ms at 32 x 64 x 32; a 1024-class matmul (256 programs) 0.097
ms at 64 x 64 x 32, 0.102 ms at 32 x 64 x 32."""


def _coefficients(shape: list[int], rows: list[list[int]], n: int) -> tuple[list[int], int]:
    """An operand's flat offset per step of each loop dim, and its constant."""
    strides = _strides(shape)
    coef = [sum(s * row[c] for s, row in zip(strides, rows, strict=True)) for c in range(n)]
    return coef, sum(s * row[-1] for s, row in zip(strides, rows, strict=True))


def dot_roles(op: Op, fn: Function, operand_types) -> tuple | None:
    """(A params, B params, m, n) when a `contract = "fma"` kernel runs as blocked `tl.dot`s:
    its body returns mul(a, b) of two f32 factors, each an elementwise expression of some of
    its parameters (a producer fused into the product: a layer_norm's normalisation, a gelu);
    the operands a is computed from read out dim m and never n, b's read n and never m; one
    reduce dim of extent at least 1; every operand f32. None otherwise (the kernel then folds
    each output's fused multiply-adds in its own lane, the same order)."""
    a = op.attrs
    if (
        a.get("contract") != "fma"
        or a["combiner"] != "add"
        or op.type.dtype is not DType.F32
        or len(a["reduce"]) != 1
        or a["space"][a["reduce"][0]] < 1
        or not fn.ops
        or fn.ops[-1].name != "mul"
        or fn.returns != [fn.ops[-1].result]
        or any(t.dtype is not DType.F32 for t in operand_types)
        or any(get_spec(b.name) not in BODY or b.type.rank != 0 for b in fn.ops)
    ):
        return None
    params = [p.name for p in fn.params]
    x, y = fn.ops[-1].operands
    dx, dy = params_of(fn, x), params_of(fn, y)
    n = len(a["space"])
    coef = [
        _coefficients(list(t.shape), rows, n)[0]
        for t, rows in zip(operand_types, a["maps"], strict=True)
    ]

    def reads(deps: set[str], d: int) -> bool:
        return any(coef[params.index(p)][d] for p in deps)

    only_a = [d for d in a["out"] if reads(dx, d) and not reads(dy, d)]
    only_b = [d for d in a["out"] if reads(dy, d) and not reads(dx, d)]
    if len(only_a) != 1 or len(only_b) != 1:
        return None
    dm, dn = only_a[0], only_b[0]
    (r,) = a["reduce"]
    if reads(dx, dn) or reads(dy, dm) or any(coef[params.index(p)][r] for p in dx & dy):
        return None  # a parameter of both factors read along k has no one block shape
    return dx, dy, dm, dn


def _dot_kernel(prog: Program, op: Op, name: str, roles, operand_types) -> None:
    """A matrix product with `contract = "fma"` as blocked `tl.dot`s: one program per block of
    rows m and columns n (every other out dim one index per program), the block's
    accumulator starting at -0.0 and carried through `tl.dot(a, b, acc,
    input_precision="ieee")` over k blocks in order, a and b the body's two factors computed
    on [m, k] and [k, n] blocks (elementwise, as the body says). For f32 with IEEE precision
    Triton lowers `tl.dot` to fused multiply-adds, each output's over k in order
    (acc = fma(a_k, b_k, acc)); from -0.0 the first step is the rounded product a_0 * b_0, so
    this is `contract = "fma"`'s order exactly (the device check compares it with the
    reference bit for bit; the build refuses a dot lowered to mma). Factors past k are -0.0
    and +0.0: their product -0.0 leaves every accumulator as it is. Under the interpreter,
    whose `tl.dot` is numpy's matmul, the same kernel folds `tl.fma` one k at a time
    (constexpr `DOT` off): the same order."""
    a = op.attrs
    module = prog.module
    fn = module.function(a["body"])
    dx, dy, dm, dn = roles
    x, y = fn.ops[-1].operands
    space, out = list(a["space"]), list(a["out"])
    (r,) = a["reduce"]
    kdim = space[r]
    n = len(space)
    bm = max(16, min(DOT_BLOCK[0], _pow2(space[dm])))
    bn = max(16, min(DOT_BLOCK[1], _pow2(space[dn])))
    bk = max(16, min(DOT_BLOCK[2], _pow2(kdim)))
    batch = math.prod(space[d] for d in out if d not in (dm, dn))
    if bm > 32 and batch * -(-space[dm] // bm) * -(-space[dn] // bn) < DOT_MIN_PROGRAMS:
        bm = 32
    tiles = {d: (bm if d == dm else bn if d == dn else 1) for d in out}
    counts = [-(-space[d] // tiles[d]) for d in out]
    grid_strides = _strides(counts)
    grid = math.prod(counts)
    num_warps = DOT_WARPS
    params = [p.name for p in fn.params]
    coefs = [
        _coefficients(list(t.shape), rows, n)
        for t, rows in zip(operand_types, a["maps"], strict=True)
    ]
    note = (
        f"kernel %{comment(op.result)}: body @{comment(a['body'])}, space {space}, out {out}, "
        f"reduce [{r}], combiner add, contract fma: blocked tl.dot [{bm}, {bk}] x [{bk}, {bn}]"
    )
    args = ["y", *[f"x{i}" for i in range(len(op.operands))]]
    lines = [
        "@triton.jit",
        f"def {name}({', '.join(args)}, LANES: tl.constexpr, DOT: tl.constexpr):",
        f"    # {note}",
        "    pid = tl.program_id(0)",
    ]
    for g, d in enumerate(out):
        at = f"((pid // {grid_strides[g]}) % {counts[g]})"
        if d == dm:
            lines.append(f"    i{d} = {at} * {bm} + tl.arange(0, {bm})[:, None]")
        elif d == dn:
            lines.append(f"    i{d} = {at} * {bn} + tl.arange(0, {bn})[None, :]")
        else:
            lines.append(f"    i{d} = {at}")
    ystrides = _strides([space[d] for d in out])
    lines.append(
        f"    yo = {' + '.join(f'i{d} * {s}' for d, s in zip(out, ystrides, strict=True))}"
    )
    lines.append(f"    mm = i{dm} < {space[dm]}")
    lines.append(f"    mn = i{dn} < {space[dn]}")
    for i, (c, const) in enumerate(coefs):
        base = " + ".join([f"i{d} * {c[d]}" for d in out if c[d]] + [str(const)])
        lines.append(f"    b{i} = {base}")
    lines.append(f"    acc = tl.full([{bm}, {bn}], -0.0, tl.float32)")
    counter = [0]
    types = {**{p: DType.F32 for p in params}, **{b.result: b.type.dtype for b in fn.ops}}

    def factors(indent: str, k_a: str, k_b: str, dot: bool) -> tuple[str, str]:
        """Lines loading the operands at k positions `k_a` (A's, of shape [1, BK] or a scalar)
        and `k_b` (B's) and computing the body up to its final mul; (a, b)."""
        w = BodyWriter(prog, op, lines, indent, counter, "[1, 1]")
        env: dict[str, str] = {}
        for i, p in enumerate(params):
            c = coefs[i][0]
            kpos = k_a if p in dx else k_b
            mask = ["mm"] if c[dm] else []
            mask += ["mn"] if c[dn] else []
            if dot and c[r]:
                mask.append(f"({kpos} < {kdim})")
            off = f"b{i}" + (f" + {kpos} * {c[r]}" if c[r] else "")
            where = f", mask={' & '.join(mask)}, other=0.0" if mask else ""
            v = w.fresh()
            lines.append(f"{indent}{v} = tl.load(x{i} + {off}{where})")
            env[p] = v
        for b in fn.ops[:-1]:
            spec = get_spec(b.name)
            dts = [types[o] for o in b.operands]
            expr = round_to(prog, b.type.dtype, BODY[spec](w, b, [env[o] for o in b.operands], dts))
            v = w.fresh()
            lines.append(f"{indent}{v} = {expr}  # %{comment(b.result)} = {comment(b.name)}")
            env[b.result] = v
        fa, fb = env[x], env[y]
        if dot:
            lines.append(
                f"{indent}fa = tl.where({k_a} < {kdim}, tl.broadcast_to({fa}, [{bm}, {bk}]), -0.0)"
            )
            lines.append(
                f"{indent}fb = tl.where({k_b} < {kdim}, tl.broadcast_to({fb}, [{bk}, {bn}]), 0.0)"
            )
            return "fa", "fb"
        return fa, fb

    lines += [
        "    if DOT:",
        f"        kk = tl.arange(0, {bk})",
        f"        for k0 in range(0, {kdim}, {bk}):",
    ]
    lines += ["            ka = (k0 + kk)[None, :]", "            kb = (k0 + kk)[:, None]"]
    fa, fb = factors("            ", "ka", "kb", True)
    lines.append(f'            acc = tl.dot({fa}, {fb}, acc, input_precision="ieee")')
    lines += ["    else:", f"        for k in range(0, {kdim}):"]
    fa, fb = factors("            ", "k", "k", False)
    lines.append(f"            acc = tl.fma({fa}, {fb}, acc)")
    lines.append("    tl.store(y + yo, acc, mask=mm & mn)")
    prog.kernels.append("\n".join(lines) + "\n")
    signature = {p: POINTER[t.dtype] for p, t in zip(args, [op.type, *operand_types], strict=True)}
    signature["LANES"] = "constexpr"
    signature["DOT"] = "constexpr"
    block = bm * bn
    prog.infos.append(KernelInfo(name, signature, block, num_warps, grid, note, {"DOT": True}))
    prog.choose(
        op,
        "launch",
        {"grid": grid, "block": [bm, bn, bk], "num_warps": num_warps, "dot": True},
        "a matrix product with contract = fma as blocked tl.dot (fused multiply-adds over k in "
        "order per output): one program per block of rows and columns",
    )
    yv = prog.var(op.result)
    prog.launcher.append(f"    # {note}")
    prog.launcher.append(
        f"    {yv} = torch.empty({tuple(op.type.shape)}, dtype={TORCH[DType.F32]}, device=device)"
    )
    if op.type.num_elements:
        call_args = ", ".join([yv, *[prog.var(o) for o in op.operands]])
        prog.launcher.append(
            f"    {name}[({grid},)]({call_args}, LANES={block}, DOT=DOT, num_warps={num_warps}, "
            "**LAUNCH)"
        )


ORDER_FREE_LANES = 32
"""Lanes a `max` or `min` fold over one reduce dim runs side by side (at every level)."""


def parallel_lanes(op: Op) -> int:
    """L when the kernel's fold runs L lanes side by side (an axis of the block, one lane per
    thread; the lane results are then taken apart by halving splits): a `lanes = L` sum (L a
    power of two, at most `MAX_LANES`, dividing the extent), exactly the order IR_SPEC's
    `lanes` names; or a `max`/`min` fold over one reduce dim of at least 2 x
    `ORDER_FREE_LANES` positions, whose result does not depend on the order at all: IR_SPEC's
    max and min are associative and commutative bit for bit (NaN if any operand is NaN, else
    the greatest or least under the order with -0.0 < +0.0; tests/backends/triton proves it
    with Z3 on the SMT meaning for every float dtype). 1 otherwise (sequential)."""
    a = op.attrs
    if (
        a["combiner"] in ("max", "min")
        and len(a["reduce"]) == 1
        and not op.type.dtype.is_bool
        and a["space"][a["reduce"][0]] >= 2 * ORDER_FREE_LANES
    ):
        return ORDER_FREE_LANES
    lanes = int(op.attrs.get("lanes", 1))
    if (
        lanes > 1
        and lanes & (lanes - 1) == 0
        and lanes <= MAX_LANES
        and len(op.attrs["reduce"]) == 1
        and op.attrs["combiner"] == "add"
        and int(op.attrs.get("accumulators", 1)) == 1
        and op.attrs.get("contract") is None
        and op.attrs["space"][op.attrs["reduce"][0]] % lanes == 0
        and op.attrs["space"][op.attrs["reduce"][0]] >= lanes
    ):
        return lanes
    return 1


def _fold_lanes(prog, op, fold_lanes: int, base: list[int], lines, value_at) -> str:
    """Lines folding a `lanes = L` sum (or an order-free max/min, `parallel_lanes`) with its L
    lanes side by side: lane q (the block's last axis) folds positions q, q + L, q + 2L, ...
    in order, exactly as IR_SPEC's `lanes` says; then the L lane results, taken apart by
    halving `tl.split`s (each exact: it moves values), are folded in lane order. The name of
    the result, of the out block's shape."""
    (r,) = op.attrs["reduce"]
    extent = op.attrs["space"][r]
    combiner = op.attrs["combiner"]
    per = -(-extent // fold_lanes)
    dtype = op.type.dtype
    lines.append(f"    acc = {value_at({r: 'q'}, '    ')}")
    if per > 1:
        lines.append(f"    for rr in range(1, {per}):")
        if extent % fold_lanes:
            # max/min only (a `lanes` sum divides its extent): a lane past the extent reads
            # the last position and contributes the fold's identity instead
            v = value_at({r: f"tl.minimum(rr * {fold_lanes} + q, {extent - 1})"}, "        ")
            ident = _identity(combiner, dtype)
            lines.append(f"        {v} = tl.where(rr * {fold_lanes} + q < {extent}, {v}, {ident})")
        else:
            v = value_at({r: f"(rr * {fold_lanes} + q)"}, "        ")
        lines.append(f"        acc = {_combine(prog, combiner, dtype, 'acc', v)}")
    count = [0]

    def take_apart(name: str, width: int, qs: list[int]) -> dict[int, str]:
        """Lane id -> the name of its [base] block, from `name` of shape base + [width]."""
        src = name if width == 2 else f"tl.reshape({name}, {base + [width // 2, 2]})"
        a, b = f"ln{count[0]}", f"ln{count[0] + 1}"
        count[0] += 2
        lines.append(f"    {a}, {b} = tl.split({src})")
        if width == 2:
            return {qs[0]: a, qs[1]: b}
        return {**take_apart(a, width // 2, qs[0::2]), **take_apart(b, width // 2, qs[1::2])}

    parts = take_apart("acc", fold_lanes, list(range(fold_lanes)))
    lines.append(f"    total = {parts[0]}")
    for q in range(1, fold_lanes):
        lines.append(f"    total = {_combine(prog, combiner, dtype, 'total', parts[q])}")
    return "total"


def _fold(prog, op, red, space, combiner, dtype, lines, value_at, fn: Function, shape: str) -> str:
    """Lines folding the reduced positions in the kernel's order; the accumulator's name."""
    extents = [space[d] for d in red]
    total = math.prod(extents)
    if total == 0:
        lines.append(f"    acc = {full(shape, _identity(combiner, dtype), dtype)}")
        return "acc"
    groups = int(op.attrs.get("accumulators", 1))
    lanes = int(op.attrs.get("lanes", 1))
    fused = op.attrs.get("contract") == "fma"
    if fused:
        last = fn.ops[-1] if fn.ops else None
        if (
            combiner != "add"
            or dtype is not DType.F32
            or last is None
            or last.name != "mul"
            or fn.returns != [last.result]
            or groups > 1
            or lanes > 1
        ):
            raise prog.error(op, 'contract = "fma" needs an f32 add fold of a body ending in mul')
    if groups > 1 and lanes > 1:
        raise prog.error(op, "accumulators and lanes together have no meaning")
    strides = _strides(extents)

    def position(p: str, indent: str) -> dict[int, str]:
        if len(red) == 1:
            return {red[0]: p}
        for d, s, n in zip(red, strides, extents, strict=True):
            lines.append(f"{indent}r{d} = ({p} // {s}) % {n}")
        return {d: f"r{d}" for d in red}

    def fold(acc: str, at, count: int, indent: str) -> None:
        """acc = body(at(0)); acc = combine(acc, body(at(r))) for r in 1 .. count-1."""
        if fused:
            x, yv = value_at(position(at("0"), indent), indent, fused=True)
            lines.append(f"{indent}{acc} = {x} * {yv}")
        else:
            lines.append(f"{indent}{acc} = {value_at(position(at('0'), indent), indent)}")
        if count > 1:
            lines.append(f"{indent}for r in range(1, {count}):")
            inner = indent + "    "
            if fused:
                x, yv = value_at(position(at("r"), inner), inner, fused=True)
                lines.append(f"{inner}{acc} = tl.fma({x}, {yv}, {acc})")
            else:
                v = value_at(position(at("r"), inner), inner)
                lines.append(f"{inner}{acc} = {_combine(prog, combiner, dtype, acc, v)}")

    if groups > 1 or lanes > 1:
        # the IR's blocks (accumulators: consecutive) or lanes (strided), each folded in
        # order, then their results folded in order
        g = groups if groups > 1 else lanes
        if len(red) != 1 or total % g:
            raise prog.error(op, "accumulators or lanes need one reduce dim they divide")
        per = total // g
        if groups > 1:

            def at_group(q: str) -> callable:
                return lambda r: f"({q}) * {per} + {r}"
        else:

            def at_group(q: str) -> callable:
                return lambda r: f"({r}) * {g} + {q}"

        fold("acc", at_group("0"), per, "    ")
        lines.append(f"    for q in range(1, {g}):")
        fold("part", at_group("q"), per, "        ")
        lines.append(f"        acc = {_combine(prog, combiner, dtype, 'acc', 'part')}")
        return "acc"
    fold("acc", lambda r: r, total, "    ")
    return "acc"
