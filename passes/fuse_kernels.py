"""`fuse-kernels`: inline a kernel without reduction (elementwise or copy) into the one kernel
that uses its result:

    %p = kernel(xs) {maps = P, body = f}         // used once, by %c, as operand k
    %c = kernel(.., %p, ..) {maps = C, body = g}
 -> %c = kernel(.., xs) {maps = [C without k, P composed with C[k]], body = g(.., f(..), ..)}

The producer's loop dims are all result dims, so its loop index is C[k] applied to the
consumer's loop index; its operands are read at P[j](C[k](i)), again affine. The producer's body
runs where the consumer read its result: at every point of the consumer's space, inside the
fold when the consumer reduces. Values and rounding are the same ops on the same elements, so
each fusion carries an exact (`fp`) equivalence obligation, with the three bodies in scope.
Bodies no kernel uses any more are dropped.

A small, cheap producer read by several kernels (each reading each element once) is copied
into each of them, one fusion and one obligation per copy, and dropped with its last reader.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gdv.ir.core import Function, Module, Op, Param
from gdv.ir.obligation import Obligation
from gdv.ir.ops.elementwise import TRANSCENDENTAL
from gdv.passes.base import Pass, PassResult, Step, fresh_function, rewrite_each_function
from gdv.passes.lower_to_kernels import rewrite_obligation


def compose_row(row: list[int], inner: list[list[int]], out: list[int]) -> list[int]:
    """`row` (over the producer's loop dims) with producer loop dim out[r] = inner[r] (over the
    consumer's loop dims): a row over the consumer's loop dims."""
    n = len(inner[0]) - 1 if inner else 0
    coefs = [0] * n
    const = row[-1]
    for r, d in enumerate(out):
        c = row[d]
        if c:
            coefs = [a + c * b for a, b in zip(coefs, inner[r][:-1], strict=True)]
            const += c * inner[r][-1]
    return [*coefs, const]


def _renamed_ops(ops: list[Op], names: dict[str, str], prefix: str) -> list[Op]:
    out = []
    for o in ops:
        names[o.result] = f"{prefix}{o.result}"
        out.append(
            Op(names[o.result], o.name, [names[v] for v in o.operands], dict(o.attrs), o.type)
        )
    return out


def fuse_bodies(name: str, consumer: Function, k: int, producer: Function) -> Function:
    """The body of the fused kernel: the consumer's with parameter k computed by the
    producer's body from the producer's parameters (appended)."""
    c_names = {p.name: f"c.{p.name}" for p in consumer.params}
    p_names = {p.name: f"p.{p.name}" for p in producer.params}
    p_ops = _renamed_ops(producer.ops, p_names, "p.")
    c_names[consumer.params[k].name] = p_names[producer.returns[0]]
    c_ops = _renamed_ops(consumer.ops, c_names, "c.")
    params = [Param(c_names[p.name], p.type) for i, p in enumerate(consumer.params) if i != k]
    params += [Param(p_names[p.name], p.type) for p in producer.params]
    return Function(
        name, params, list(consumer.results), p_ops + c_ops, [c_names[consumer.returns[0]]]
    )


DUPLICATE_MAX_OPS = 4
"""A producer read by several kernels is copied into each when its body has at most this many
ops, none of them a transcendental, and each of those kernels reads each of its elements once
(layer_norm's x - mean, feeding the variance and the normalisation): a few ops per element
computed twice instead of a tensor written once and read twice. Transcendentals are not worth
computing twice (softmax's exp(x - m) stays one tensor: measured on the C target, computing it
in both the sum and the division took as long as writing it once)."""


def _without_reduction(producer: Op | None) -> bool:
    return (
        producer is not None
        and producer.name == "kernel"
        and not producer.attrs["reduce"]
        and "fill" not in producer.attrs
    )


def fusible(producer: Op | None, uses: int, consumer: Op, functions: dict, types: dict) -> bool:
    """A kernel without reduction whose result is read exactly once, fused unless the consumer
    runs over a larger space and the producer's body would run at every point of it where
    alone it runs once per element and the consumer reads its result:

    - into an elementwise consumer (a broadcast), a producer that computes anything from
      operands it reads one element per point (`types` gives their sizes): batch norm's beta
      = bias - mean * alpha, 32 values broadcast to 32 x 112 x 112, would be 12544
      evaluations of each and two more operands for the consumer to read, in a conv's
      epilogue where nothing is hoisted. A copy fuses, and so does a producer that broadcasts
      smaller operands itself (an attention mask built from a [1, T] mask: fused, the scores'
      consumer reads the [1, T] mask, constant along the product's rows, and can become the
      product's epilogue);
    - into a reducing consumer (a product packing the producer's values into its slivers
      once per column block: a normalisation or activation before a matrix product), a
      producer that computes a transcendental (rsqrt(var + eps))."""
    if not (_without_reduction(producer) and uses == 1):
        return False
    assert producer is not None
    size = math.prod(producer.attrs["space"])
    if math.prod(consumer.attrs["space"]) <= size:
        return True
    body = functions[producer.attrs["body"]].ops
    if not consumer.attrs["reduce"]:
        computes = any(b.name != "constant" for b in body)
        whole = all(types[v].num_elements == size for v in producer.operands)
        return not (computes and whole)
    return not any(b.name in TRANSCENDENTAL for b in body)


def duplicable(producer: Op | None, value: str, ops: list[Op], functions: dict) -> bool:
    """A kernel without reduction, small, read only by kernels over a space as large as its own
    that read it at one place per point (so a copy costs about what the producer did; a second
    read at the same place is the same expression, which the C compiler computes once). The
    caller checks that it is not returned."""
    if not _without_reduction(producer):
        return False
    body = functions[producer.attrs["body"]].ops
    if len(body) > DUPLICATE_MAX_OPS or any(b.name in TRANSCENDENTAL for b in body):
        return False
    size = math.prod(producer.attrs["space"])
    for o in ops:
        if value not in o.operands:
            continue
        if o.name != "kernel" or math.prod(o.attrs["space"]) != size or "fill" in o.attrs:
            return False
        maps = [m for v, m in zip(o.operands, o.attrs["maps"], strict=True) if v == value]
        if any(m != maps[0] for m in maps):  # (x - mean)^2 reads it twice at one place
            return False
    return True


def identity_map(rows: list[list[int]], n: int) -> bool:
    """Whether `rows` (a map over n loop dims) reads at the loop index itself, dim for dim."""
    return len(rows) == n and all(
        row == [1 if d == r else 0 for d in range(n)] + [0] for r, row in enumerate(rows)
    )


def conv_consumer(d: Op, c: Op, types: dict, functions: dict) -> bool:
    """Whether kernel `c` may become conv2d `d`'s epilogue (`fuse-conv-epilogues`; it is here
    because `fuse-kernels` leaves such a kernel for that pass). The other readers of `d` are
    checked apart. `c` reduces nothing, has `d`'s type, reads `d` at its own index and each
    other operand at the output channel (shape [O]) or whole (a scalar), and computes no
    transcendental (`TRANSCENDENTAL_IN_CONVS`)."""
    if d.name != "conv2d" or c.name != "kernel" or "fill" in c.attrs:
        return False
    body = functions.get(c.attrs["body"])
    if body is None:
        return False
    if not TRANSCENDENTAL_IN_CONVS and any(b.name in TRANSCENDENTAL for b in body.ops):
        return False
    a = c.attrs
    if a["reduce"] or a["combiner"] != "none" or "row_group" in a or "epilogue" in a:
        return False
    if c.type != d.type or a["out"] != [0, 1, 2, 3]:
        return False
    reads = [m for v, m in zip(c.operands, a["maps"], strict=True) if v == d.result]
    if not (reads and all(identity_map(m, 4) for m in reads)):
        return False
    channels = d.type.shape[1]
    for v, m in zip(c.operands, a["maps"], strict=True):
        if v == d.result:
            continue
        t = types[v]
        if not (t.shape == () or (t.shape == (channels,) and m == [[0, 1, 0, 0, 0]])):
            return False
    return True


TRANSCENDENTAL_IN_CONVS = False
"""Consumers that compute a transcendental (efficientnet_b0's SiLU) stay kernels of their own.
Measured on the 2-core Zen 4 host (one thread, -O3, interleaved, the whole model): with them
fused, efficientnet_b0 took 11.73 -> 11.90 ms; its depthwise convs with the SiLU cost more than
the convs and the SiLU kernels apart (96 channels at stride 2 to 56x56: 0.238 + 0.102 ms apart,
0.391 fused)."""


MAX_BODY_OPS = 256
"""No fusion makes a body of more than this many ops. Every fusion's obligation holds the
bodies it joined, so fusing a chain of n elementwise ops into one body cost O(n^2) memory and
time (a 10^4-op chain exhausted 24 GiB); real models' fused bodies hold tens of ops."""


@dataclass(frozen=True)
class FuseKernels(Pass):
    name = "fuse-kernels"
    stage_in = "loop"
    conv_epilogues: bool = False
    """`fuse-conv-epilogues` runs next: a kernel that can become the epilogue of the conv2d it
    reads (`conv_consumer`) is not fused into a kernel that reduces (the next conv's packing
    would compute it once per element it packs; as the conv's epilogue it runs once, and the
    next conv reads the conv's output as it is)."""

    def run(self, module: Module) -> PassResult:
        return rewrite_each_function(module, self._fuse_one)

    def _fuse_one(
        self,
        fn: Function,
        ops: list[Op],
        functions: dict[str, Function],
        taken: set[str],
        index: int,
        steps: list[Step],
    ) -> Obligation | None:
        """Fuse the first fusible pair of `ops` in place; its obligation, or None."""
        uses: dict[str, int] = {}
        for o in ops:
            for v in o.operands:
                uses[v] = uses.get(v, 0) + 1
        for r in fn.returns:
            uses[r] = uses.get(r, 0) + 2  # a returned value stays
        defs = {o.result: o for o in ops}
        types = {p.name: p.type for p in fn.params} | {o.result: o.type for o in ops}
        for pos, c in enumerate(ops):
            if c.name != "kernel" or "fill" in c.attrs:
                continue
            for k, v in enumerate(c.operands):
                p = defs.get(v)
                copy = uses.get(v, 0) > 1 and v not in fn.returns
                single = fusible(p, uses.get(v, 0), c, functions, types)
                if not (single or (copy and duplicable(p, v, ops, functions))):
                    continue
                assert p is not None
                if (
                    self.conv_epilogues
                    and c.attrs["reduce"]
                    and self._conv_activation(p, defs, uses, fn, types, functions)
                ):
                    continue
                c_body, p_body = functions[c.attrs["body"]], functions[p.attrs["body"]]
                if len(c_body.ops) + len(p_body.ops) > MAX_BODY_OPS:
                    continue
                name = fresh_function(f"{fn.name}.f", taken)
                body = fuse_bodies(name, c_body, k, p_body)
                functions[name] = body
                inner = c.attrs["maps"][k]
                maps = [m for i, m in enumerate(c.attrs["maps"]) if i != k]
                maps += [
                    [compose_row(row, inner, p.attrs["out"]) for row in m] for m in p.attrs["maps"]
                ]
                operands = [x for i, x in enumerate(c.operands) if i != k] + list(p.operands)
                fused = Op(
                    c.result,
                    "kernel",
                    operands,
                    {**c.attrs, "body": name, "maps": maps},
                    c.type,
                    c.loc,
                )
                ob = rewrite_obligation(
                    self.name,
                    "inline-producer",
                    index,
                    [p, c],
                    [p, fused] if v in fused.operands else [fused],  # read twice: once more
                    (c.result, c.result),
                    types,
                    [c_body, p_body, body],
                )
                ops[pos] = fused
                steps.append(
                    Step("rewrite", fn.name, pos, c.result, c.result, [c.result], index, [name])
                )
                if not copy:  # else other kernels still read it (each gets its own copy)
                    ops.remove(p)
                    steps.append(Step("remove", fn.name, removed=[p.result]))
                return ob
        return None

    @staticmethod
    def _conv_activation(
        p: Op, defs: dict, uses: dict, fn: Function, types: dict, functions: dict
    ) -> bool:
        """Whether kernel `p` is the only reader of a conv2d it can be the epilogue of."""
        return any(
            x in defs and uses.get(x, 0) == 1 and x not in fn.returns
            and conv_consumer(defs[x], p, types, functions)
            for x in set(p.operands)
        )  # fmt: skip
