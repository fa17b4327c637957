"""The collectives on one rank under MPI: lays the operand out so that the blocks an op moves
are contiguous, calls the runtime (runtime.c, loaded with ctypes) and puts the result back in
the op's layout. The folds and their orders are the runtime's; this file only moves axes.
"""

from __future__ import annotations

import ctypes
import math
from pathlib import Path

import numpy as np

from gdv.backends.mpi.segments import COMBINERS, FOLDED_DTYPES, ORDERS
from gdv.backends.reference.collective import ring_chunks
from gdv.ir.core import Op
from gdv.ir.mesh import Mesh, member_index, with_member

_I64 = ctypes.c_int64
_PTR = ctypes.c_void_p
_INTS = ctypes.POINTER(ctypes.c_int)
_I64S = ctypes.POINTER(ctypes.c_int64)


class Runtime:
    """The runtime's shared object, loaded into a process where MPI is initialised."""

    def __init__(self, path: str | Path) -> None:
        lib = ctypes.CDLL(str(path))
        c_int = ctypes.c_int
        lib.gdv_all_reduce.argtypes = [
            _PTR,
            _PTR,
            _I64,
            c_int,
            c_int,
            c_int,
            _INTS,
            c_int,
            c_int,
            _I64S,
            c_int,
            _I64S,
        ]
        lib.gdv_reduce_scatter.argtypes = [
            _PTR,
            _PTR,
            _I64,
            c_int,
            c_int,
            c_int,
            _INTS,
            c_int,
            c_int,
            c_int,
            _I64S,
        ]
        for name in ("gdv_all_gather", "gdv_all_to_all"):
            getattr(lib, name).argtypes = [_PTR, _PTR, _I64, _INTS, c_int, c_int, c_int, _I64S]
        lib.gdv_carry_reduce.argtypes = [
            _PTR,
            _PTR,
            _I64,
            _I64,
            c_int,
            c_int,
            _INTS,
            c_int,
            c_int,
            c_int,
            _I64S,
        ]
        lib.gdv_permute.argtypes = [_PTR, _PTR, _I64, c_int, c_int, c_int, c_int, _I64S]
        self.lib = lib

    def run(self, op: Op, x: np.ndarray, mesh: Mesh, rank: int, tag: int) -> tuple[np.ndarray, int]:
        """Collective `op` on this rank's operand `x`: its result and the bytes this rank
        sent."""
        coords = mesh.coords(rank)
        axes = op.attrs["axes"]
        p = mesh.group_size(axes)
        me = member_index(mesh, axes, coords)
        members = [mesh.linear(with_member(mesh, axes, coords, m)) for m in range(p)]
        ranks = (ctypes.c_int * p)(*members)
        sent = _I64(0)
        x = np.ascontiguousarray(x)
        tag = tag % 32768
        result = getattr(self, "_" + op.name)(op, x, ranks, p, me, tag, sent)
        if result.dtype != x.dtype or result.shape != op.type.shape:
            raise AssertionError(f"{op.name}: got {result.dtype}{result.shape}, want {op.type}")
        return result, sent.value

    @staticmethod
    def _check(rc: int, op: Op) -> None:
        if rc != 0:
            raise MemoryError(f"{op.name}: the MPI runtime ran out of memory")

    def _all_reduce(self, op, x, ranks, p, me, tag, sent) -> np.ndarray:
        out = np.empty_like(x)
        starts = [c.start for c in ring_chunks(x.size, p)] + [x.size]
        rc = self.lib.gdv_all_reduce(
            x.ctypes.data,
            out.ctypes.data,
            x.size,
            FOLDED_DTYPES[op.type.dtype],
            COMBINERS[op.attrs["combiner"]],
            ORDERS[op.attrs["order"]],
            ranks,
            p,
            me,
            (ctypes.c_int64 * (p + 1))(*starts),
            tag,
            ctypes.byref(sent),
        )
        self._check(rc, op)
        return out

    def _reduce_scatter(self, op, x, ranks, p, me, tag, sent) -> np.ndarray:
        dim = op.attrs["dim"]
        moved = np.ascontiguousarray(np.moveaxis(x, dim, 0))  # block c: contiguous chunk c
        out = np.empty((moved.shape[0] // p, *moved.shape[1:]), dtype=x.dtype)
        rc = self.lib.gdv_reduce_scatter(
            moved.ctypes.data,
            out.ctypes.data,
            out.size,
            FOLDED_DTYPES[op.type.dtype],
            COMBINERS[op.attrs["combiner"]],
            ORDERS[op.attrs["order"]],
            ranks,
            p,
            me,
            tag,
            ctypes.byref(sent),
        )
        self._check(rc, op)
        return np.ascontiguousarray(np.moveaxis(out, 0, dim))

    def _all_gather(self, op, x, ranks, p, me, tag, sent) -> np.ndarray:
        dim = op.attrs["dim"]
        moved = np.ascontiguousarray(np.moveaxis(x, dim, 0))
        out = np.empty((p * moved.shape[0], *moved.shape[1:]), dtype=x.dtype)
        rc = self.lib.gdv_all_gather(
            moved.ctypes.data,
            out.ctypes.data,
            moved.nbytes,
            ranks,
            p,
            me,
            tag,
            ctypes.byref(sent),
        )
        self._check(rc, op)
        return np.ascontiguousarray(np.moveaxis(out, 0, dim))

    def _shard_slice(self, op, x, ranks, p, me, tag, sent) -> np.ndarray:
        """No communication: this member's own block along `dim`."""
        return np.ascontiguousarray(np.split(x, p, axis=op.attrs["dim"])[me])

    def _all_to_all(self, op, x, ranks, p, me, tag, sent) -> np.ndarray:
        split, concat = op.attrs["split_dim"], op.attrs["concat_dim"]
        blocks = np.ascontiguousarray(np.stack(np.split(x, p, axis=split)))
        out = np.empty_like(blocks)  # slot j: member j's block `me`
        rc = self.lib.gdv_all_to_all(
            blocks.ctypes.data,
            out.ctypes.data,
            blocks.nbytes // p if p else 0,
            ranks,
            p,
            me,
            tag,
            ctypes.byref(sent),
        )
        self._check(rc, op)
        return np.ascontiguousarray(np.concatenate(list(out), axis=concat))

    def _collective_permute(self, op, x, ranks, p, me, tag, sent) -> np.ndarray:
        pairs = op.attrs["pairs"]
        dst = next((ranks[d] for s, d in pairs if s == me), -1)
        src = next((ranks[s] for s, d in pairs if d == me), -1)
        out = np.empty_like(x)
        rc = self.lib.gdv_permute(
            x.ctypes.data,
            out.ctypes.data,
            x.nbytes,
            dst,
            src,
            ranks[me],
            tag,
            ctypes.byref(sent),
        )
        self._check(rc, op)
        return out

    def _carry_reduce(self, op, x, ranks, p, me, tag, sent) -> np.ndarray:
        """The reduced dims first (row-major: the fold's order), the kept ones after."""
        dims = sorted(op.attrs["dims"])
        kept = [d for d in range(x.ndim) if d not in dims]
        moved = np.ascontiguousarray(np.transpose(x, dims + kept))
        n_red = math.prod(x.shape[d] for d in dims)
        out = np.empty(op.type.shape, dtype=x.dtype)
        if n_red == 0:  # every member's block is empty: the identity, as reduce_* gives it
            out[...] = _identity(op.attrs["combiner"], x.dtype)
            return out
        rc = self.lib.gdv_carry_reduce(
            moved.ctypes.data,
            out.ctypes.data,
            n_red,
            out.size,
            FOLDED_DTYPES[op.type.dtype],
            COMBINERS[op.attrs["combiner"]],
            ranks,
            p,
            me,
            tag,
            ctypes.byref(sent),
        )
        self._check(rc, op)
        return out


def _identity(combiner: str, dtype: np.dtype):
    if combiner == "add":
        return 0
    if np.issubdtype(dtype, np.floating):
        return -np.inf if combiner == "max" else np.inf
    info = np.iinfo(dtype)
    return info.min if combiner == "max" else info.max
