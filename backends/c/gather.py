"""C for the gather family: `take`, as the reference computes it (numpy.take with indices
clamped to [0, size - 1], no wrap-around, IR_SPEC.md section 4).

Each index is read from its buffer at run time, widened to int64_t (so clamping an i8 index to
size - 1 cannot overflow; unsigned indices clamp in uint64_t first), clamped, and the table's
row-major run of inner elements at that position is copied. Out-of-range and negative indices
are not errors: they clamp. A result with no elements (an empty index tensor, or a table axis
of size 0, which the type rule allows only with no indices) runs no code."""

from __future__ import annotations

import math

from gdv.backends.c.emit import CTYPE, Program, comment, ctype
from gdv.backends.c.registry import lowering
from gdv.ir.core import Op
from gdv.ir.dtypes import DType
from gdv.ir.ops import REGISTRY as OPS


def _clamped_index(dtype: DType, size: int) -> list[str]:
    """C lines setting `int64_t k` to index a1[j] clamped to [0, size - 1]: a signed index
    widened to int64_t, an unsigned one clamped in uint64_t (a u64 index of 2^63 or more is no
    int64_t) and then narrowed."""
    if dtype.is_unsigned:
        return [
            "      const uint64_t u = (uint64_t)a1[j];",
            f"      const int64_t k = u > UINT64_C({size - 1}) ? INT64_C({size - 1}) : (int64_t)u;",
        ]
    return [
        "      int64_t k = (int64_t)a1[j];",
        "      if (k < 0) k = 0;",
        f"      if (k > INT64_C({size - 1})) k = INT64_C({size - 1});",
    ]


@lowering(OPS["take"])
def _take(prog: Program, op: Op) -> None:
    table_t, idx_t = (prog.entry.types()[o] for o in op.operands)
    t = ctype(op.type.dtype, op, prog.module)
    it = ctype(idx_t.dtype, op, prog.module)
    axis = op.attrs["axis"]
    size = table_t.shape[axis]
    outer = math.prod(table_t.shape[:axis])
    inner = math.prod(table_t.shape[axis + 1 :])
    count = idx_t.num_elements
    prog.new_slot(op.result, op.type)
    if op.type.num_elements == 0:
        prog.body.append(f"  /* take %{comment(op.result)}: no elements */")
        return
    assert size > 0 and CTYPE[op.type.dtype] == t
    name = prog.new_function()
    prog.functions.append(
        "\n".join(
            [
                f"/* take %{comment(op.result)} */",
                f"static void {name}(const {t} *restrict a0, const {it} *restrict a1, "
                f"{t} *restrict r)",
                "{",
                f"  for (int64_t o = 0; o < INT64_C({outer}); o++)",
                f"    for (int64_t j = 0; j < INT64_C({count}); j++) {{",
                *_clamped_index(idx_t.dtype, size),
                f"      memcpy(r + (o * INT64_C({count}) + j) * INT64_C({inner}), "
                f"a0 + (o * INT64_C({size}) + k) * INT64_C({inner}), "
                f"sizeof({t}) * (size_t)INT64_C({inner}));",
                "    }",
                "}",
                "",
            ]
        )
    )
    args = [prog.var(o) for o in op.operands] + [prog.var(op.result)]
    prog.body.append(f"  {name}({', '.join(args)});  /* %{comment(op.result)} */")
