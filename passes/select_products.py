"""`select-products`: run each scheduled kernel that is a matrix product as a packed, blocked
product, and claim that the blocked nest covers the iteration space exactly once, with every
output's reduced positions in increasing order.

A kernel is a product when `gdv.ir.products.find` says so (an `add` fold of `mul(X, Y)` whose
factors each depend on one side of the output). The pass records, as schedule attributes
(IR_SPEC.md, the loop stage), `strategy = "product"`, the roles of its dims (`batch`, `rows`,
`cols`, `row_factor`), the register tile `micro = [MR, NR]`, the cache blocks `blocks = [MC,
KC, NC]` and the thread split `split`, sized from the target's capability descriptor: its
vector width (the kernel's `vector` lanes, set by `schedule-kernels`), its vector registers,
its add chains (latency x pipes), its L1 data and L2 sizes, a blocking the descriptor may
impose (`GDV_C_BLOCKING` on the C target) and a measured choice from its autotune cache
(`GDV_C_AUTOTUNE`, `gdv tune`). A target's printer then follows these attributes and chooses
none of them.

The attributes change how the nest runs, never its meaning: each output folds its products in
the order of `reduce`, so the change is one op replaced by itself with new attributes (a
certificate `rewrite` step without an obligation, whose fp pair the checker builds and proves).
The `coverage` obligation's formula is derived from the new attributes by
`gdv.validate.schedules.coverage_text` (`product_nest`): per role a blocked loop, the reduce
positions also in increasing order. Unsat proves it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gdv.ir import products
from gdv.ir.core import Module, Op
from gdv.ir.obligation import Obligation
from gdv.ir.ops.kernel import bodies_used
from gdv.passes.base import Pass, PassResult, Step, operand_step, rescheduled
from gdv.passes.reassociate_reductions import lanes_for
from gdv.passes.schedule_kernels import VECTOR_BYTES, coverage_obligation


def registers_for(vector_bytes: int) -> int:
    """The vector registers assumed for a width when the descriptor gives none: 32 for 64-byte
    vectors (AVX-512), else 16."""
    return 32 if vector_bytes >= 64 else 16


SMALL_SIDE = 16
"""A product with at most this many rows (tokens at batch 1) is a candidate for
`weights_as_rows`: the C printer reads the factor of the side with at most this many rows or
columns in place (`backends/c/matmul.py`, DIRECT_MAX_ROWS)."""


def weights_as_rows(
    op: Op, p: products.Product, body, types: dict, bound: frozenset[str] = frozenset()
) -> products.Product | None:
    """The roles swapped (rows <-> cols, the other factor packed by rows) for x @ W^T with few
    rows of x: W's rows then run as the product's rows, read in place, contiguous along the
    one reduce dim, instead of being packed into column slivers on every call (a strided copy
    of every weight: torch.nn.Linear keeps W as [out, in]). None when it does not apply: more
    than SMALL_SIDE rows, at most SMALL_SIDE columns, several reduce dims, a column factor
    already read along its columns (then it is read in place as it is), or one read from a
    parameter in `bound` (packed once, when the caller binds it)."""
    _, m, n, _ = products.sizes(op.attrs, p)
    red = op.attrs["reduce"]
    if m > SMALL_SIDE or n <= SMALL_SIDE or len(red) != 1:
        return None
    _, y = products.factors({**op.attrs, **p.attrs()}, body)
    reads = products.factor_operands(body, y)
    if len(reads) != 1:
        return None  # a computed column factor: leave it to the packing
    (k,) = reads
    if op.operands[k] in bound:
        return None
    if operand_step(op, types, k, red[0]) != 1 or operand_step(op, types, k, p.cols[-1]) == 1:
        return None
    return swap_roles(p)


def swap_roles(p: products.Product) -> products.Product:
    """`p` with rows and columns exchanged (the other factor as the row factor)."""
    return products.Product(1 - p.row_factor, p.batch, p.cols, p.rows)


LANES_GAIN = 0.9
"""`lanes_as_cols` swaps the roles when the swapped product's padded tile work is at most this
fraction of the kept one's. Measured on Zen 4 (AVX-512, 16 x 16 f32 tiles, -O3, weights bound,
both cores, interleaved rounds): a 3x3 conv of 512 channels at 7x7 (49 positions: 4 vectors of
16 lanes, 77% of the lanes used) ran in 1.93 ms swapped against 2.61 ms; 256 -> 512 channels at
stride 2 to 7x7 in 1.04 against 1.27 ms; at 14x14 (196 positions, 94% of the lanes) the two
were within 2%, and at 56x56 the swap was 1.46x slower."""

SWAP_MIN_REDUCE = 2048
"""`lanes_as_cols` leaves products folding fewer positions. Measured in the models (Zen 4,
-O3, bound, interleaved per-kernel profiles): resnet18's 7 x 7 convs folding 2304 and 4608
positions ran 19-22% faster swapped, while mobilenet_v2's and efficientnet_b0's 1x1 convs at
7 x 7 (folding 160 to 1152) ran 30-80% slower: the swapped output goes through a transposing
copy (`backends/c/matmul.py`: not `direct`) and the positions are packed across the input's
rows, costs that a short fold does not repay."""


def padded_work(attrs: dict, p: products.Product, micro: list[int]) -> int:
    """Row-by-column positions the product's full register tiles cover (edges padded)."""
    _, m, n, _ = products.sizes(attrs, p)
    mr, nr = micro
    return -(-m // mr) * mr * (-(-n // nr) * nr)


def lanes_as_cols(
    op: Op, p: products.Product, swapped: products.Product, micro: tuple[list[int], list[int]]
) -> bool:
    """Whether the roles swapped (`swapped`, with its micro tile `micro[1]`, against `p`'s
    `micro[0]`) fill the register tiles enough better to pay: a column dim that fills few of
    a tile's lanes (a conv's 7 x 7 output positions in 16-lane vectors) runs as the rows
    instead, the other side (its output channels) in the lanes."""
    if products.sizes(op.attrs, p)[3] < SWAP_MIN_REDUCE:
        return False
    return padded_work(op.attrs, swapped, micro[1]) <= LANES_GAIN * padded_work(
        op.attrs, p, micro[0]
    )


@dataclass(frozen=True)
class SelectProducts(Pass):
    """Products get `strategy = "product"` and their sizes; other kernels are left as they
    are (their nest). Only scheduled kernels (with `tile`) not yet given a strategy."""

    name = "select-products"
    stage_in = "loop"
    vector_bytes: int = VECTOR_BYTES
    """The width a kernel without a `vector` attribute is blocked for (else its lanes)."""
    vector_registers: int | None = None
    """How many vector registers the target has (None: `registers_for(width)`)."""
    cache_bytes: tuple[int, int] = products.DEFAULT_CACHES
    """(L1 data, L2) bytes per core, from the descriptor."""
    blocking: tuple[int, int, int] | None = None
    """(KC, MC, NC) the descriptor imposes (None: sized from the caches)."""
    chains: int = products.DEFAULT_CHAINS
    """Independent add chains the target's add pipeline needs (add latency x pipes)."""
    tuned: tuple[tuple[str, int, int, int, int, int], ...] = ()
    """Measured choices from the descriptor's autotune cache: (dtype, MR, NV, KC, MC, NC)
    rows (none: the analytical model of `gdv.ir.products` decides)."""
    vectors_in_lanes: bool = False
    """With the reassociating mode (`-O3`, whose `reassociate-reductions` runs next): a
    matrix-vector product (one row or one column: a batch-1 linear layer) is left a reduction
    nest, so that it gets `lanes` and sums along its contiguous reduce dim in vector lanes,
    reading the matrix in place, instead of a register tile of which one row or column is
    used. Only where `reassociate_reductions.lanes_for` gives it lanes (a contiguous reduce
    dim of a multiple of the lanes): otherwise it stays a product."""
    bound: frozenset[str] = frozenset()
    """Parameters the caller will fix once (`Compilation.bind`, as a runtime fixes a model's
    weights), so a product factor read only from them is packed once at bind time, not on
    every call: `weights_as_rows`, which exists to spare that per-call packing, does not apply
    to such a factor, and the product keeps the roles that fill the register tile's lanes (the
    wide tile of a weight streamed from memory)."""

    def plan(
        self, op: Op, module: Module, types: dict | None = None, weights: frozenset = frozenset()
    ) -> dict | None:
        """The new attributes of `op`, or None when it is not a product. `weights`: the
        function's parameters when together they are larger than L2 (a model's weights, each
        read once a call, so not in L2 when a product reads it); a column factor read from
        one of them is streamed (`products.micro_tile`)."""
        body = module.function(op.attrs["body"])
        if body is None:
            return None
        found = products.find(op.attrs, op.type.dtype, body)
        if found is None:
            return None
        if (
            self.vectors_in_lanes
            and types is not None
            and 1 in products.sizes(op.attrs, found)[1:3]
            and lanes_for(op, types) > 1
        ):
            return None  # reassociate-reductions sums it in lanes (its own rule decides)
        as_rows = weights_as_rows(op, found, body, types, self.bound) if types is not None else None
        found = as_rows or found
        size = op.type.dtype.itemsize
        lanes = op.attrs.get("vector") or max(1, self.vector_bytes // size)
        width = lanes * size
        registers = self.vector_registers or registers_for(width)
        cache = (int(self.cache_bytes[0]), int(self.cache_bytes[1]))
        block = tuple(int(b) for b in self.blocking) if self.blocking else None
        measured = next(
            (products.Tuned(*row[1:]) for row in self.tuned if row[0] == str(op.type.dtype)),
            None,
        )

        def planned(p: products.Product) -> dict:
            x, y = products.factors({**op.attrs, **p.attrs()}, body)
            rx, ry = (
                any(op.operands[k] in weights for k in products.factor_operands(body, f))
                for f in (x, y)
            )
            # a column factor read from a model's weights streams; else the model judges by size
            streamed = ry or None
            # the factor reading a model's weight (one only): the threads split its side
            side = {(True, False): "rows", (False, True): "columns"}.get((rx, ry))
            return products.plan(
                op.attrs, op.type.dtype, body, p, width, registers, cache, block,
                self.chains, measured, streamed, side,
            )  # fmt: skip

        plan = planned(found)
        if as_rows is None:
            swapped = swap_roles(found)
            other = planned(swapped)
            if lanes_as_cols(op, found, swapped, (plan["micro"], other["micro"])):
                plan = other
        return {**op.attrs, "vector": lanes, **plan}

    def run(self, module: Module) -> PassResult:
        bodies = bodies_used(module.functions)
        obligations: list[Obligation] = []
        steps: list[Step] = []
        functions = []
        for fn in module.functions:
            types = fn.types()
            total = sum(q.type.num_elements * q.type.dtype.itemsize for q in fn.params)
            weights = (
                frozenset(q.name for q in fn.params) if total > self.cache_bytes[1] else frozenset()
            )
            ops = []
            for op in fn.ops:
                attrs = None
                if (
                    op.name == "kernel"
                    and fn.name not in bodies
                    and "tile" in op.attrs
                    and "strategy" not in op.attrs
                ):
                    attrs = self.plan(op, module, types, weights)
                if attrs is None:
                    ops.append(op)
                    continue
                new = Op(op.result, op.name, list(op.operands), attrs, op.type, op.loc)
                new.name_loc = op.name_loc
                ops.append(new)
                steps.append(rescheduled(fn.name, len(ops) - 1, new))
                mr, nr = attrs["micro"]
                mc, kc, nc = attrs["blocks"]
                claim = (
                    f"the {mr}x{nr} product nest of %{op.result} in blocks [{mc}, {kc}, {nc}] "
                    f"visits each of its {attrs['space']} points exactly once, the reduced "
                    "positions in increasing order"
                )
                obligations.append(
                    coverage_obligation(
                        self.name, "product-nest", len(obligations), new, types, module, claim
                    )
                )
            functions.append(replace(fn, ops=ops))
        return PassResult(Module(functions, module.filename), obligations, bool(obligations), steps)
