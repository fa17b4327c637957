"""The loop stage's one op: `kernel`, an affine loop nest with a scalar body (DESIGN.md, "Stages").

`%y = kernel(%x, %w) {body = "main.k0", space = [8, 128, 784], maps = [...], out = [0, 1],
reduce = [2], combiner = "add"} : f32[8,128]` means, for every point of the iteration space
with its `out` dims fixed to the result index:

    result[i_out] = fold(combiner, [body(x_0[M_0 i], ..., x_n[M_n i]) for i_reduce in row-major])

`maps[k]` has one row per dim of operand k; a row holds one coefficient per loop dim followed
by a constant, so operand k is read at `M_k i + c_k`. The reduced positions are visited in
row-major order of the `reduce` dims as listed (acc = body(first); acc = combine(acc,
body(next))), exactly the left fold of IR_SPEC.md section 3; an empty reduction gives the
combiner's identity like `reduce_*`. `combiner` is "none" when `reduce` is empty.

`accumulators = A > 1` (one reduce dim, of an extent K that A divides) changes the order, and
so the meaning: the reduced positions split into A blocks of K/A in order, each folded as
above, and the A partial results folded in order. A schedule that sets it is claimed equal
only under the `real` theory.

`lanes = L > 1` (one reduce dim, of an extent K that L divides; an `add` fold of a float) also
changes the order, the one vector code runs: position p of the reduce dim goes to lane p mod L,
each lane folds its K/L positions in increasing order, and the L lane results are folded in
lane order. `contract = "fma"` (an `add` fold of f32 whose body returns a `mul`) fuses that
multiply with the fold: acc = fma(x, y, acc), one rounding per step, the first step
fma(x, y, -0.0) = x * y. Both are what `-O3` (`reassociate-reductions`) sets, claimed under
`real` (IR_SPEC.md section 7).

`epilogue = E` (since gdv 0.4, issue 16; a kernel with reduce dims, each of extent >= 1) names
a function applied to each folded value: result[i_out] = E(acc, x_0[M_0 i0], ..., x_n[M_n i0])
with i0 the point whose out dims are i_out and whose reduce dims are 0. It takes the kernel's
dtype first and then one rank-0 parameter per operand, like the body, and returns the kernel's
dtype. `fuse-epilogues` puts a product's elementwise consumer there (a conv's bias and
activation, a residual add), so that the consumer runs on each tile of the product while it is
in cache instead of over the whole tensor afterwards.

`fill = [[k, v], ...]` (since gdv 0.9, issue 16) lets operand k be read outside its bounds, a
read there giving `v` rounded to the operand's dtype (as `pad`'s value): `fold-pads` folds a
pad into the kernel that reads it.

`body` names a function of the module with one rank-0 parameter per operand (its dtype) and one
rank-0 result of the kernel's dtype, made of elementwise ops and scalar constants. The schedule
attributes (`tile`, `order`, `vector`, `parallel`, `accumulators`, and `strategy` with a
product's `batch`, `rows`, `cols`, `row_factor`, `micro`, `blocks`, `split`) say how a backend
runs the nest; apart from `accumulators` they never change the meaning above. `strategy =
"product"` runs it as a packed matrix product (`gdv.ir.products`): the out dims split into
batch, row and column dims, factor `row_factor` of the body's final `mul` is packed by rows,
`micro = [MR, NR]` is the register tile, `blocks = [MC, KC, NC]` the cache blocks (rows,
reduce positions, columns), `split` how threads share the output.

Obligations and interpreters see functions, not modules, so the bodies a kernel names are put
in scope with `kernel_bodies(...)` by whoever runs or encodes a program (the reference `run`
of a module, the discharger for an obligation's `functions`).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterable, Iterator
from typing import Any

from gdv.ir.core import Function, Module
from gdv.ir.diagnostics import IRError, Loc
from gdv.ir.ops import (
    AttrSpec,
    OpSpec,
    OpTypeError,
    describe,
    kind_choice,
    kind_int,
    kind_int_list,
    names_where,
    register,
)
from gdv.ir.ops.reduce import REDUCTIONS
from gdv.ir.types import TensorType

COMBINER_OP = {s.combiner.op: s.combiner.op for s in REDUCTIONS.specs()}
"""The elementwise op each combiner folds with (so it rounds and treats NaN and -0.0 alike),
from the reductions' `combiner` trait: a kernel's combiner is named by that op."""
FOLD_KIND = {s.combiner.op: s.combiner.fold for s in REDUCTIONS.specs()}
"""The `Ctx.fold` kind of each combiner: the same fold as reduce_sum / dot / reduce_max."""
COMBINERS = (*COMBINER_OP, "none")
STRATEGIES = ("nest", "product")
"""How a backend runs a kernel (`strategy`): its loop nest, or a packed, blocked matrix product
(`gdv.ir.products`); absent means the nest."""
SPLITS = ("none", "columns", "rows")
"""A product's thread split (`split`; `gdv.ir.products.split` says what each means)."""
CONTRACTIONS = ("fma",)
"""What `contract` may fuse: the body's final multiply with the fold's add (`fma`)."""
PRODUCT_KEYS = ("batch", "rows", "cols", "row_factor", "micro", "blocks", "split")
"""The schedule attributes that come with `strategy = "product"`."""
BODY_OPS = names_where(lambda s: s.body_legal, "Ops a kernel body may use.")
"""Ops a body may use: scalar elementwise ops and scalar constants (the `body_legal` trait; a
live set of names)."""


def kind_maps(v: Any) -> list[list[list[int]]]:
    """A list (per operand) of lists (per operand dim) of integer rows."""
    ok = isinstance(v, list) and all(
        isinstance(m, list)
        and all(
            isinstance(r, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in r)
            for r in m
        )
        for m in v
    )
    if not ok:
        raise ValueError(
            f"expected a list of affine maps (lists of integer rows), got {describe(v)}"
        )
    return v


def kind_fill(v: Any) -> list[list]:
    """A list of `[k, value]` pairs: an operand index and a number."""
    ok = isinstance(v, list) and all(
        isinstance(p, list)
        and len(p) == 2
        and isinstance(p[0], int)
        and not isinstance(p[0], bool)
        and isinstance(p[1], int | float)
        and not isinstance(p[1], bool)
        for p in v
    )
    if not ok:
        raise ValueError(f"expected a list of [operand, value] pairs, got {describe(v)}")
    return v


def fills_of(attrs: dict[str, Any]) -> dict[int, int | float]:
    """`fill` as {operand index: value}: the operands that read `value` outside their bounds
    (none without the attribute)."""
    return {k: v for k, v in attrs.get("fill", [])}


def kind_string(v: Any) -> str:
    if not isinstance(v, str):
        raise ValueError(f"expected a string, got {describe(v)}")
    return v


def affine_range(row: list[int], space: list[int]) -> tuple[int, int]:
    """The least and greatest value of `row . i + const` over the box 0 <= i < space."""
    lo = hi = row[-1]
    for c, n in zip(row[:-1], space, strict=True):
        lo += min(0, c * (n - 1))
        hi += max(0, c * (n - 1))
    return lo, hi


def leaving_dims(rows: list[list[int]], space: list[int], shape: tuple[int, ...]) -> list[int]:
    """The dims of an operand of `shape`, read through map `rows` over the box `space`, whose
    index leaves the operand somewhere in the box (where a `fill` is read)."""
    out = []
    for d, row in enumerate(rows):
        lo, hi = affine_range(row, space)
        if lo < 0 or hi >= shape[d]:
            out.append(d)
    return out


def _infer_kernel(
    types: list[TensorType], attrs: dict[str, Any], written: TensorType
) -> TensorType:
    space, maps = attrs["space"], attrs["maps"]
    out, reduce, combiner = attrs["out"], attrs["reduce"], attrs["combiner"]
    n = len(space)
    if any(s < 0 for s in space):
        raise OpTypeError(f"space {space} has a negative extent", attr="space")
    if sorted(out + reduce) != list(range(n)):
        raise OpTypeError(
            f"out {out} and reduce {reduce} must split the {n} loop dims, each dim once",
            attr="out",
        )
    if (combiner == "none") != (not reduce):
        raise OpTypeError(
            f'combiner "{combiner}" does not fit reduce {reduce} ("none" exactly when nothing '
            "is reduced)",
            attr="combiner",
        )
    if len(maps) != len(types):
        raise OpTypeError(
            f"maps has {len(maps)} maps, expected one per operand ({len(types)})", attr="maps"
        )
    empty = 0 in space
    fills = attrs.get("fill", [])
    ks = [k for k, _ in fills]
    if ks != sorted(set(ks)) or any(not 0 <= k < len(types) for k in ks):
        raise OpTypeError(
            f"fill names operands {ks}: each at most once, in increasing order, among the "
            f"{len(types)} operand(s)",
            attr="fill",
        )
    for k, (m, t) in enumerate(zip(maps, types, strict=True)):
        if len(m) != t.rank:
            raise OpTypeError(
                f"map {k} has {len(m)} rows, expected one per dim of operand {k + 1} ({t})",
                attr="maps",
            )
        for d, row in enumerate(m):
            if len(row) != n + 1:
                raise OpTypeError(
                    f"map {k} row {d} has {len(row)} entries, expected {n} coefficients and a "
                    "constant",
                    attr="maps",
                )
            lo, hi = affine_range(row, space)
            if not empty and k not in ks and (lo < 0 or hi >= t.shape[d]):
                raise OpTypeError(
                    f"map {k} row {d} reads indices {lo}..{hi} of operand {k + 1} ({t}), whose "
                    f"dim {d} has size {t.shape[d]}",
                    attr="maps",
                )
    _check_schedule(attrs, n, out)
    if attrs.get("lanes", 1) > 1 and not written.dtype.is_float:
        raise OpTypeError(f"lanes needs a float result, not {written.dtype}", attr="lanes")
    if "contract" in attrs and (
        combiner != "add"
        or written.dtype.value != "f32"
        or attrs.get("accumulators", 1) > 1
        or attrs.get("lanes", 1) > 1
    ):
        raise OpTypeError(
            'contract = "fma" needs an add fold of f32 with one accumulator and no lanes',
            attr="contract",
        )
    if "epilogue" in attrs and (not reduce or any(space[d] == 0 for d in reduce)):
        raise OpTypeError(
            "an epilogue needs reduce dims, each of extent >= 1 (it reads the operands at the "
            "reduce dims' position 0)",
            attr="epilogue",
        )
    if combiner != "none" and written.dtype.is_bool:
        raise OpTypeError(
            f'combiner "{combiner}" needs a float or integer result, not i1', attr="combiner"
        )
    return TensorType(written.dtype, tuple(space[d] for d in out))


def _check_schedule(attrs: dict[str, Any], n: int, out: list[int]) -> None:
    tile = attrs.get("tile")
    if tile is not None and (len(tile) != n or any(t < 1 for t in tile)):
        raise OpTypeError(
            f"tile {tile} must give a size >= 1 for each of the {n} loop dims", attr="tile"
        )
    order = attrs.get("order")
    if order is not None and sorted(order) != list(range(n)):
        raise OpTypeError(f"order {order} must be a permutation of the {n} loop dims", attr="order")
    for key in ("vector", "accumulators", "lanes"):
        if key in attrs and attrs[key] < 1:
            raise OpTypeError(f"{key} must be >= 1, got {attrs[key]}", attr=key)
    acc = attrs.get("accumulators", 1)
    red = attrs["reduce"]
    if acc > 1 and (len(red) != 1 or attrs["space"][red[0]] % acc):
        raise OpTypeError(
            f"accumulators {acc} needs exactly one reduce dim whose extent it divides "
            f"(reduce {red}, space {attrs['space']})",
            attr="accumulators",
        )
    lanes = attrs.get("lanes", 1)
    if lanes > 1 and (len(red) != 1 or attrs["space"][red[0]] % lanes or acc > 1):
        raise OpTypeError(
            f"lanes {lanes} needs exactly one reduce dim whose extent it divides and one "
            f"accumulator (reduce {red}, space {attrs['space']})",
            attr="lanes",
        )
    if lanes > 1 and attrs["combiner"] != "add":
        raise OpTypeError(f'lanes {lanes} needs combiner "add"', attr="lanes")
    parallel = attrs.get("parallel", [])
    if any(d not in out for d in parallel) or len(set(parallel)) != len(parallel):
        raise OpTypeError(f"parallel {parallel} must list distinct out dims {out}", attr="parallel")
    _check_product(attrs, out)


def _check_product(attrs: dict[str, Any], out: list[int]) -> None:
    """`strategy = "product"` comes with its roles, micro-tile, blocks and split; they come
    only with it."""
    product = attrs.get("strategy") == "product"
    for key in PRODUCT_KEYS:
        if key in attrs and not product:
            raise OpTypeError(f'{key} is an attribute of strategy = "product" only', attr=key)
        if product and key not in attrs:
            raise OpTypeError(
                f'strategy = "product" needs {key} (and {", ".join(PRODUCT_KEYS)})',
                attr="strategy",
            )
    if not product:
        return
    if (
        attrs["combiner"] != "add"
        or not attrs["reduce"]
        or attrs.get("accumulators", 1) != 1
        or attrs.get("lanes", 1) != 1
    ):
        raise OpTypeError(
            'strategy = "product" needs an add fold over reduce dims with one accumulator '
            "and no lanes",
            attr="strategy",
        )
    roles = attrs["batch"] + attrs["rows"] + attrs["cols"]
    if sorted(roles) != sorted(out) or not attrs["rows"] or not attrs["cols"]:
        raise OpTypeError(
            f"batch {attrs['batch']}, rows {attrs['rows']} and cols {attrs['cols']} must split "
            f"the out dims {out}, rows and cols not empty",
            attr="rows",
        )
    if attrs["row_factor"] not in (0, 1):
        raise OpTypeError(
            f"row_factor must be 0 or 1, got {attrs['row_factor']}", attr="row_factor"
        )
    for key, n in (("micro", 2), ("blocks", 3)):
        if len(attrs[key]) != n or any(v < 1 for v in attrs[key]):
            raise OpTypeError(f"{key} {attrs[key]} must give {n} sizes >= 1", attr=key)
    lanes = attrs.get("vector", 1)
    if attrs["micro"][1] % lanes:
        raise OpTypeError(
            f"micro {attrs['micro']}: NR must be a whole number of vectors of {lanes} lanes",
            attr="micro",
        )


KERNEL = register(
    OpSpec(
        "kernel",
        "kernel",
        0,
        None,
        (
            AttrSpec("body", kind_string),
            AttrSpec("space", kind_int_list),
            AttrSpec("maps", kind_maps),
            AttrSpec("out", kind_int_list),
            AttrSpec("reduce", kind_int_list),
            AttrSpec("combiner", kind_choice(*COMBINERS)),
            AttrSpec("tile", kind_int_list, required=False),
            AttrSpec("order", kind_int_list, required=False),
            AttrSpec("vector", kind_int, required=False),
            AttrSpec("parallel", kind_int_list, required=False),
            AttrSpec("accumulators", kind_int, required=False),
            AttrSpec("lanes", kind_int, required=False),
            AttrSpec("row_group", kind_int_list, required=False),
            AttrSpec("contract", kind_choice(*CONTRACTIONS), required=False),
            AttrSpec("strategy", kind_choice(*STRATEGIES), required=False),
            AttrSpec("batch", kind_int_list, required=False),
            AttrSpec("rows", kind_int_list, required=False),
            AttrSpec("cols", kind_int_list, required=False),
            AttrSpec("row_factor", kind_int, required=False),
            AttrSpec("micro", kind_int_list, required=False),
            AttrSpec("blocks", kind_int_list, required=False),
            AttrSpec("split", kind_choice(*SPLITS), required=False),
            AttrSpec("epilogue", kind_string, required=False),
            AttrSpec("fill", kind_fill, required=False),
        ),
        _infer_kernel,
        "result[i_out] = fold(combiner, body(x_k[maps[k] . i + c_k] for each operand k)) over "
        "the reduce dims in row-major order (acc = first; acc = combine(acc, next)); empty "
        "reduction: the combiner's identity. accumulators = A > 1: A blocks folded apart, then "
        "their results folded in order; lanes = L > 1: position p to lane p mod L, lanes "
        "folded apart, then in lane order; contract = fma: acc = fma(x, y, acc) for a body "
        "returning mul(x, y); epilogue = E: result[i_out] = E(that fold, x_k[maps[k] . i + "
        "c_k] at the reduce dims' position 0); fill = [[k, v], ...]: operand k read outside "
        "its bounds gives v (rounded to its dtype, as pad's value); other schedule attributes "
        "never change the meaning.",
        stage="loop",
        int_legal=True,
        storage_legal=True,
    )
)


# --- bodies in scope ------------------------------------------------------------------------

_SCOPE: contextvars.ContextVar[dict[str, Function] | None] = contextvars.ContextVar(
    "gdv_kernel_bodies", default=None
)


@contextlib.contextmanager
def kernel_bodies(functions: Iterable[Function]) -> Iterator[None]:
    """Make `functions` resolvable as kernel bodies (by name) while the block runs; inner
    scopes shadow outer ones."""
    scope = dict(_SCOPE.get() or {})
    scope.update((f.name, f) for f in functions)
    token = _SCOPE.set(scope)
    try:
        yield
    finally:
        _SCOPE.reset(token)


def body_of(op_attrs: dict[str, Any]) -> Function:
    """The body function a kernel names; an IRError when no scope provides it."""
    name = op_attrs["body"]
    fn = (_SCOPE.get() or {}).get(name)
    if fn is None:
        raise IRError(f"kernel body @{name} is not in scope (run or encode the whole module)")
    return fn


def epilogue_of(op_attrs: dict[str, Any]) -> Function | None:
    """The epilogue function a kernel names (None when it has none); an IRError when no scope
    provides it."""
    name = op_attrs.get("epilogue")
    if name is None:
        return None
    fn = (_SCOPE.get() or {}).get(name)
    if fn is None:
        raise IRError(f"kernel epilogue @{name} is not in scope (run or encode the whole module)")
    return fn


def epilogue_point(op_attrs: dict[str, Any], out_index: list) -> list:
    """The loop point an epilogue reads the operands at: `out_index` on the out dims, 0 on the
    reduce dims (the elements of `out_index` are whatever index values the caller uses)."""
    loop: list = [0] * len(op_attrs["space"])
    for d, v in zip(op_attrs["out"], out_index, strict=True):
        loop[d] = v
    return loop


def contracted_factors(body: Function) -> tuple[str, str] | None:
    """The operands (x, y) of the `mul` a body returns (what `contract = "fma"` fuses with the
    fold's add), or None when it returns something else."""
    (ret,) = body.returns if len(body.returns) == 1 else (None,)
    op = next((b for b in body.ops if b.result == ret), None)
    if op is None or op.name != "mul":
        return None
    return op.operands[0], op.operands[1]


def params_of(body: Function, name: str) -> set[str]:
    """The parameters of kernel body `body` that its value `name` is computed from."""
    params = {p.name for p in body.params}
    made = {b.result: b for b in body.ops}
    seen, todo, out = set(), [name], set()
    while todo:
        v = todo.pop()
        if v not in seen:
            seen.add(v)
            if v in params:
                out.add(v)
            elif v in made:
                todo.extend(made[v].operands)
    return out


def row_dim(op) -> tuple[int, int] | None:
    """(position, loop dim) of the rows a kernel runs over in a row group: its result's first
    dim of extent above 1 (the dims before it have extent 1) and the out dim indexing it; None
    for a kernel with no such dim, or a product."""
    a = op.attrs
    if op.name != "kernel" or a.get("strategy") == "product":
        return None
    for p, d in enumerate(a["out"]):
        if a["space"][d] > 1:
            return p, d
    return None


def _group_of(op) -> tuple[int, int] | None:
    g = op.attrs.get("row_group") if op.name == "kernel" else None
    return (int(g[0]), int(g[1])) if g is not None and len(g) == 2 else None


def group_spans(fn: Function) -> list[tuple[int, int]]:
    """Per op of `fn`, the first and last op index of its row group ((i, i) for an op in
    none): a target may run any member while any other runs, so liveness treats a group as
    one step (a value made in it is live from the group's first op, a value read in it to the
    group's last)."""
    spans = [(i, i) for i in range(len(fn.ops))]
    groups = [_group_of(op) for op in fn.ops]
    start = 0
    for i, g in enumerate(groups):
        if g is None:
            continue
        if i == 0 or groups[i - 1] != g:
            start = i
        for j in range(start, i + 1):
            spans[j] = (start, i)
    return spans


def check_row_groups(module: Module) -> None:
    """`row_group = [G, B]` (a schedule attribute, since gdv 0.4) puts a kernel in row group G
    of its function, run in blocks of B rows: a target may run, for each block of rows, every
    member of the group in order, instead of each member over all rows in turn. That is the
    program's meaning only when each member reads what earlier members made at its own rows,
    so the rules are: the members of a group are consecutive ops with one block size B >= 1,
    all nest kernels (not products) with a row dim (`row_dim`: the first result dim of extent
    above 1) of one extent R; and a member reads a value an earlier member made only with the
    map row of that value's row dim equal to its own row loop dim (coefficient 1, nothing
    else). A violation is an input error at the kernel's `row_group`."""
    for fn in module.functions:
        made: dict[str, tuple[int, int]] = {}  # value -> (its group, its row position)
        previous = None
        seen: set[int] = set()
        shape: dict[int, tuple[int, int]] = {}  # group -> (rows, block)
        for op in fn.ops:
            raw = op.attrs.get("row_group") if op.name == "kernel" else None
            if raw is None:
                previous = None
                continue
            where = op.attr_locs.get("row_group", op.loc) or Loc(module.filename, 1, 1)
            if len(raw) != 2 or raw[1] < 1:
                raise IRError(f"row_group {raw} must be [group, block >= 1]", where)
            group, block = int(raw[0]), int(raw[1])
            if group != previous and group in seen:
                raise IRError(f"row_group {group}: its kernels are not consecutive", where)
            found = row_dim(op)
            if found is None:
                raise IRError(
                    f"row_group {group}: %{op.result} has no dim of extent above 1 or is a product",
                    where,
                )
            pos, d0 = found
            rows = op.attrs["space"][d0]
            if shape.setdefault(group, (rows, block)) != (rows, block):
                raise IRError(
                    f"row_group {group}: %{op.result} runs over {rows} rows in blocks of "
                    f"{block}, the group over {shape[group][0]} in blocks of {shape[group][1]}",
                    where,
                )
            n = len(op.attrs["space"])
            own = [1 if d == d0 else 0 for d in range(n)] + [0]
            for k, v in enumerate(op.operands):
                if v in made and made[v][0] == group and op.attrs["maps"][k][made[v][1]] != own:
                    raise IRError(
                        f"row_group {group}: %{op.result} reads %{v}, made in the group, at "
                        f"another row than its own",
                        where,
                    )
            made[op.result] = (group, pos)
            seen.add(group)
            previous = group


def storage_roots(fn: Function) -> dict[str, str]:
    """Each value's storage root: a `reshape`'s result shares its operand's bytes (row-major
    order kept), so a value and the reshapes of it are one storage group, named by its first
    value (a parameter, or the op that made it)."""
    root = {p.name: p.name for p in fn.params}
    for op in fn.ops:
        alias = op.name == "reshape" and bool(op.operands) and op.operands[0] in root
        root[op.result] = root[op.operands[0]] if alias else op.result
    return root


def computed_once(fn: Function, names: set[str], params: set[str]) -> dict[str, frozenset[str]]:
    """The kernels of `fn` named in `names` that read only `params` (parameters) and such
    kernels, whose value (or a reshape of it) is not returned, in program order; per kernel,
    the parameters it is computed from."""
    root = storage_roots(fn)
    returned = {root[r] for r in fn.returns if r in root}
    out: dict[str, frozenset[str]] = {}
    for op in fn.ops:
        if (
            op.result in names
            and op.name == "kernel"
            and op.result not in returned
            and all(v in params or v in out for v in op.operands)
        ):
            out[op.result] = frozenset().union(
                *({v} if v in params else out[v] for v in op.operands)
            )
    return out


def at_bind_params(module: Module) -> dict[str, frozenset[str]]:
    """The kernels of the entry function that a target computes once, when their parameters
    are bound (`check_at_bind`), with the parameters each is computed from
    (`computed_once` of those `at_bind` lists); other listed names are ignored."""
    fn = module.entry
    listed = fn.attrs.get("at_bind") if fn is not None else None
    if not listed:
        return {}
    return computed_once(fn, set(listed), {p.name for p in fn.params})


def check_at_bind(module: Module) -> None:
    """`at_bind = [values]` (a function attribute, since gdv 0.10, issue 16; a compatible
    addition) names kernels a target may compute once, when the parameters they read are fixed
    (a runtime's bind), and keep for every later call: a kernel that reads only parameters and
    such kernels computes the same in every call. It is a plan, never a change of meaning: a
    target computes once only the listed kernels of that kind whose value (or a reshape of it)
    is not returned (`at_bind_params`), and ignores the other names; the memory plan keeps
    every listed value out of the arena. The verifier checks its form: a list of distinct
    value names (an input error at the attribute otherwise)."""
    for fn in module.functions:
        listed = fn.attrs.get("at_bind")
        if listed is None:
            continue
        where = fn.attr_locs.get("at_bind", fn.loc) or Loc(module.filename, 1, 1)
        if not isinstance(listed, list) or not all(isinstance(v, str) for v in listed):
            raise IRError("at_bind must be a list of value names", where)
        if len(set(listed)) != len(listed):
            raise IRError("at_bind names a value twice", where)


def block_local_values(fn: Function) -> set[str]:
    """The values `fn` lists in `block_local` (a function attribute, since gdv 0.11, issue 16;
    a compatible addition): each kept for one block of rows at a time, apart from the memory
    plan. Each must be made by a kernel of a row group (`row_group`; its result's row dim
    `row_dim`) and read only by later kernels of the same group (`group_spans`), each reading
    it only at its own row (the map row of the value's row dim: coefficient 1 on the reader's
    row loop dim, nothing else); not a parameter, returned, listed in `at_bind` or shared by a
    reshape. A ValueError names the first value that breaks a rule: a target that kept it for
    one block would give another block's readers rows it no longer holds."""
    listed = fn.attrs.get("block_local")
    if listed is None:
        return set()
    if not isinstance(listed, list) or not all(isinstance(v, str) for v in listed):
        raise ValueError("block_local must be a list of value names")
    if len(set(listed)) != len(listed):
        raise ValueError("block_local names a value twice")
    root = storage_roots(fn)
    apart = {p.name for p in fn.params} | {root[r] for r in fn.returns if r in root}
    apart |= set(fn.attrs.get("at_bind") or ()) | {root[v] for v in root if root[v] != v}
    spans = group_spans(fn)
    made = {op.result: i for i, op in enumerate(fn.ops)}
    reads: dict[str, list[tuple[int, int]]] = {}  # value -> (reader's index, operand position)
    for j, reader in enumerate(fn.ops):
        for k, operand in enumerate(reader.operands):
            reads.setdefault(operand, []).append((j, k))
    for v in listed:
        i = made.get(v)
        found = row_dim(fn.ops[i]) if i is not None and _group_of(fn.ops[i]) else None
        if found is None or v in apart or spans[i][0] == spans[i][1]:
            raise ValueError(f"%{v} may not be block-local: not a row group member's own value")
        for j, k in reads.get(v, ()):
            reader = fn.ops[j]
            own = row_dim(reader) if _group_of(reader) else None
            if own is None or spans[j] != spans[i] or j <= i:
                raise ValueError(f"%{v} may not be block-local: read outside its row group")
            n = len(reader.attrs["space"])
            if reader.attrs["maps"][k][found[0]] != [int(d == own[1]) for d in range(n)] + [0]:
                raise ValueError(f"%{v} may not be block-local: read at another row")
    return set(listed)


def check_block_local(module: Module) -> None:
    """The rules of `block_local` (`block_local_values`), as input errors at the attribute."""
    for fn in module.functions:
        try:
            block_local_values(fn)
        except ValueError as e:
            where = fn.attr_locs.get("block_local", fn.loc) or Loc(module.filename, 1, 1)
            raise IRError(str(e), where) from None


def bodies_used(functions: Iterable[Function]) -> set[str]:
    """Names of the bodies (and epilogues) the kernels of `functions` call, and the
    epilogues of their conv2d ops."""
    return {
        name
        for f in functions
        for op in f.ops
        if op.name in ("kernel", "conv2d")
        for name in (op.attrs.get("body"), op.attrs.get("epilogue"))
        if name is not None
    }


def check_kernel_bodies(module: Module) -> None:
    """Every kernel's body exists, takes one rank-0 parameter per operand with the operand's
    dtype, returns one rank-0 value of the kernel's dtype, and uses only scalar elementwise ops
    (so it can be applied elementwise to whole arrays)."""
    check_row_groups(module)
    check_at_bind(module)
    check_block_local(module)
    for fn in module.functions:
        types = fn.types()
        for op in fn.ops:
            if op.name == "conv2d" and "epilogue" in op.attrs:
                extra = [TensorType(types[o].dtype, ()) for o in op.operands[2:]]
                _check_epilogue(module, fn, op, [TensorType(op.type.dtype, ()), *extra])
            if op.name != "kernel":
                continue
            where = op.attr_locs.get("body", op.loc) or Loc(module.filename, 1, 1)
            body = module.function(op.attrs["body"])
            if body is None:
                raise IRError(
                    f"kernel body @{op.attrs['body']} is not a function of the module", where
                )
            if body.name == fn.name:
                raise IRError(f"kernel body @{body.name} is the function that calls it", where)
            want = [types[o].dtype for o in op.operands]
            got = [p.type for p in body.params]
            if len(got) != len(want) or any(
                t.rank != 0 or t.dtype != d for t, d in zip(got, want, strict=False)
            ):
                shown = ", ".join(f"{d}[]" for d in want) or "none"
                raise IRError(
                    f"kernel body @{body.name} takes ({', '.join(map(str, got))}), expected "
                    f"({shown}) like the kernel's operands",
                    where,
                )
            if len(body.results) != 1 or body.results[0] != TensorType(op.type.dtype, ()):
                raise IRError(
                    f"kernel body @{body.name} returns ({', '.join(map(str, body.results))}), "
                    f"expected {op.type.dtype}[] like the kernel's result",
                    where,
                )
            if "contract" in op.attrs and contracted_factors(body) is None:
                raise IRError(
                    f'contract = "fma": kernel body @{body.name} must return a mul',
                    op.attr_locs.get("contract", where),
                )
            _check_body_ops(body, where)
            if "epilogue" in op.attrs:
                _check_epilogue(module, fn, op, [TensorType(op.type.dtype, ()), *got])


def _check_body_ops(body: Function, where: Loc) -> None:
    for b in body.ops:
        if b.name not in BODY_OPS or b.type.rank != 0:
            raise IRError(
                f"kernel body @{body.name} uses {b.name} : {b.type}; a body holds only "
                "scalar elementwise ops and scalar constants",
                b.loc or where,
            )


def _check_epilogue(module: Module, fn: Function, op, want: list[TensorType]) -> None:
    """A kernel's (or conv2d's) epilogue exists, is neither the caller nor the body, takes
    the op's dtype and then one rank-0 parameter per operand (a conv2d: per operand after the
    weight), returns the op's dtype, and holds only scalar elementwise ops and scalar
    constants."""
    where = op.attr_locs.get("epilogue", op.loc) or Loc(module.filename, 1, 1)
    epi = module.function(op.attrs["epilogue"])
    if epi is None:
        raise IRError(
            f"{op.name} epilogue @{op.attrs['epilogue']} is not a function of the module", where
        )
    if epi.name in (fn.name, op.attrs.get("body")):
        raise IRError(
            f"{op.name} epilogue @{epi.name} is the function that calls it or the kernel's body",
            where,
        )
    got = [p.type for p in epi.params]
    if got != want:
        shown = ", ".join(map(str, want))
        raise IRError(
            f"{op.name} epilogue @{epi.name} takes ({', '.join(map(str, got))}), expected "
            f"({shown}): the folded value, then one per operand",
            where,
        )
    if len(epi.results) != 1 or epi.results[0] != want[0]:
        raise IRError(
            f"{op.name} epilogue @{epi.name} returns ({', '.join(map(str, epi.results))}), "
            f"expected {want[0]} like the {op.name}'s result",
            where,
        )
    _check_body_ops(epi, where)
