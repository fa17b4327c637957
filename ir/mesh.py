"""Meshes and shardings (docs/IR_SPEC.md section 7, "Meshes, shardings and collectives").

A `Mesh` is a named grid of ranks; an SPMD function (attribute `mesh = "m"`) is the program
every rank of its mesh runs on local values. A sharding says, per dim of a type, which mesh
axes split it; `global_type` and `block_offsets` turn a rank's local view into the global one.
`check_spmd` is the verifier's part for all of it (the ops' own type rules cannot see the mesh).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from gdv.ir.core import Function, Module, Op
from gdv.ir.diagnostics import IRError, Loc, printable
from gdv.ir.types import TensorType

MAX_AXES = 16
MAX_RANKS = 2**20
AXIS_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

Sharding = list[list[str]]
"""One entry per dim: the mesh axes that split it, major first (`[]`: the dim is whole)."""


@dataclass(eq=False)
class Mesh:
    """`mesh @name = {axis = size, ...}`: ranks are tuples of coordinates, one per axis; the
    linear id of a rank is row-major over the axes in this order."""

    name: str
    axes: list[tuple[str, int]]
    loc: Loc | None = None
    axis_locs: list[Loc] = field(default_factory=list)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Mesh):
            return NotImplemented
        return self.name == other.name and self.axes == other.axes

    __hash__ = None  # type: ignore[assignment]

    @property
    def names(self) -> list[str]:
        return [a for a, _ in self.axes]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(n for _, n in self.axes)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def axis_size(self, axis: str) -> int:
        return dict(self.axes)[axis]

    def group_size(self, axes: Sequence[str]) -> int:
        return math.prod(self.axis_size(a) for a in axes)

    def ranks(self) -> Iterator[tuple[int, ...]]:
        """Every rank's coordinates, in linear-id order."""
        return iter(_product(self.shape))

    def linear(self, coords: Sequence[int]) -> int:
        r = 0
        for c, n in zip(coords, self.shape, strict=True):
            r = r * n + c
        return r

    def coords(self, rank: int) -> tuple[int, ...]:
        out = []
        for n in reversed(self.shape):
            out.append(rank % n)
            rank //= n
        return tuple(reversed(out))


def _product(shape: Sequence[int]) -> list[tuple[int, ...]]:
    out: list[tuple[int, ...]] = [()]
    for n in shape:
        out = [p + (c,) for p in out for c in range(n)]
    return out


def member_index(mesh: Mesh, axes: Sequence[str], coords: Sequence[int]) -> int:
    """The row-major index of `coords` over `axes` (in the order listed): a block or member
    index."""
    pos = dict(zip(mesh.names, coords, strict=True))
    m = 0
    for a in axes:
        m = m * mesh.axis_size(a) + pos[a]
    return m


def with_member(mesh: Mesh, axes: Sequence[str], coords: Sequence[int], m: int) -> tuple:
    """`coords` with its coordinates on `axes` set to those of member index `m`."""
    pos = dict(zip(mesh.names, coords, strict=True))
    for a in reversed(list(axes)):
        n = mesh.axis_size(a)
        pos[a] = m % n
        m //= n
    return tuple(pos[a] for a in mesh.names)


def function_mesh(module: Module, fn: Function) -> Mesh | None:
    """The mesh of SPMD function `fn`, or None for an ordinary function."""
    name = fn.attrs.get("mesh")
    if name is None:
        return None
    return next((m for m in module.meshes if m.name == name), None)


def param_sharding(attrs: dict[str, Any], rank: int) -> Sharding:
    """A parameter's `sharding` attribute, or the replicated sharding of its rank."""
    s = attrs.get("sharding")
    return [list(d) for d in s] if s is not None else [[] for _ in range(rank)]


def out_shardings(fn: Function) -> list[Sharding]:
    """Each result's sharding (`out_shardings`, or replicated)."""
    given = fn.attrs.get("out_shardings")
    if given is None:
        return [[[] for _ in range(t.rank)] for t in fn.results]
    return [[list(d) for d in s] for s in given]


def global_type(local: TensorType, sharding: Sharding, mesh: Mesh) -> TensorType:
    """The global type of a value whose per-rank type is `local`."""
    shape = tuple(n * mesh.group_size(axes) for n, axes in zip(local.shape, sharding, strict=True))
    return local.with_shape(shape)


def block_offsets(
    local: TensorType, sharding: Sharding, mesh: Mesh, coords: Sequence[int]
) -> tuple[int, ...]:
    """Where rank `coords`'s block starts in the global value, per dim."""
    return tuple(
        member_index(mesh, axes, coords) * n for n, axes in zip(local.shape, sharding, strict=True)
    )


def global_signature(module: Module, fn: Function) -> tuple[list[TensorType], list[TensorType]]:
    """The global parameter and result types of SPMD function `fn`."""
    mesh = function_mesh(module, fn)
    assert mesh is not None
    params = [global_type(p.type, param_sharding(p.attrs, p.type.rank), mesh) for p in fn.params]
    results = [global_type(t, s, mesh) for t, s in zip(fn.results, out_shardings(fn), strict=True)]
    return params, results


# --- the verifier's part ------------------------------------------------------------------


def check_meshes(module: Module) -> None:
    seen: dict[str, Mesh] = {}
    for mesh in module.meshes:
        where = mesh.loc or Loc(module.filename, 1, 1)
        if mesh.name in seen:
            raise IRError(f"mesh @{mesh.name} is declared twice", where)
        seen[mesh.name] = mesh
        if not mesh.axes:
            raise IRError(f"mesh @{mesh.name} has no axes", where)
        if len(mesh.axes) > MAX_AXES:
            raise IRError(
                f"mesh @{mesh.name} has {len(mesh.axes)} axes, more than {MAX_AXES}", where
            )
        names: set[str] = set()
        total = 1
        for k, (axis, size) in enumerate(mesh.axes):
            at = mesh.axis_locs[k] if k < len(mesh.axis_locs) else where
            if axis in names:
                raise IRError(f"mesh @{mesh.name} names axis '{axis}' twice", at)
            names.add(axis)
            if size < 1:
                raise IRError(f"mesh axis '{axis}' has size {size}; sizes are at least 1", at)
            total *= size
            if total > MAX_RANKS:
                raise IRError(f"mesh @{mesh.name} has more than {MAX_RANKS} ranks (the limit)", at)


def check_spmd(module: Module) -> None:
    """Meshes, SPMD functions' attributes and shardings, and every collective's axes and
    shapes. Raises the first `IRError`."""
    from gdv.ir.ops.collective import COLLECTIVES

    check_meshes(module)
    for fn in module.functions:
        fn_loc = fn.loc or Loc(module.filename, 1, 1)
        attr_locs = fn.attr_locs
        mesh = None
        if "mesh" in fn.attrs:
            name = fn.attrs["mesh"]
            at = attr_locs.get("mesh", fn_loc)
            if not isinstance(name, str):
                raise IRError("mesh must be a string naming a mesh of the module", at)
            mesh = function_mesh(module, fn)
            if mesh is None:
                known = ", ".join(f"@{m.name}" for m in module.meshes) or "none"
                raise IRError(f'mesh "{printable(name)}" is not declared (meshes: {known})', at)
        for p in fn.params:
            if "sharding" not in p.attrs:
                continue
            at = p.attr_locs.get("sharding", p.loc or fn_loc)
            if mesh is None:
                raise IRError(
                    f"%{p.name} has a sharding, but @{fn.name} is not an SPMD function (no "
                    "mesh attribute)",
                    at,
                )
            check_sharding(p.attrs["sharding"], p.type, mesh, f"sharding of %{p.name}", at)
        if "out_shardings" in fn.attrs:
            at = attr_locs.get("out_shardings", fn_loc)
            if mesh is None:
                raise IRError(f"@{fn.name} has out_shardings but no mesh attribute", at)
            given = fn.attrs["out_shardings"]
            if not isinstance(given, list) or len(given) != len(fn.results):
                raise IRError(
                    f"out_shardings needs one sharding per result ({len(fn.results)})", at
                )
            for k, (s, t) in enumerate(zip(given, fn.results, strict=True)):
                check_sharding(s, t, mesh, f"out_shardings entry {k}", at)
        for op in fn.ops:
            if op.name not in COLLECTIVES:
                continue
            if mesh is None:
                raise IRError(
                    f"{op.name} is a collective: it appears only in an SPMD function (one with "
                    "a mesh attribute)",
                    op.name_loc or op.loc or fn_loc,
                )
            operand = fn.types()[op.operands[0]]
            _check_collective(op, operand, mesh, op.loc or fn_loc)


def check_sharding(value: Any, type_: TensorType, mesh: Mesh, what: str, at: Loc) -> None:
    if not isinstance(value, list) or not all(isinstance(d, list) for d in value):
        raise IRError(f"{what} must be a list of lists of mesh axis names", at)
    if len(value) != type_.rank:
        raise IRError(f"{what} has {len(value)} entries, expected {type_.rank} (one per dim)", at)
    seen: set[str] = set()
    for d in value:
        for axis in d:
            _check_axis(axis, mesh, what, at)
            if axis in seen:
                raise IRError(f"{what} uses mesh axis '{axis}' twice", at)
            seen.add(axis)


def _check_axis(axis: Any, mesh: Mesh, what: str, at: Loc) -> None:
    if not isinstance(axis, str):
        raise IRError(f"{what}: a mesh axis is a string, got {axis!r}", at)
    if axis not in mesh.names:
        raise IRError(
            f"{what}: mesh @{mesh.name} has no axis '{printable(axis)}' (axes: "
            f"{', '.join(mesh.names)})",
            at,
        )


def _check_collective(op: Op, operand: TensorType, mesh: Mesh, loc: Loc) -> None:
    at = op.attr_locs.get("axes", loc)
    axes = op.attrs["axes"]
    seen: set[str] = set()
    for axis in axes:
        _check_axis(axis, mesh, f"axes of {op.name}", at)
        if axis in seen:
            raise IRError(f"axes of {op.name} name '{axis}' twice", at)
        seen.add(axis)
    p = mesh.group_size(axes)
    shape = list(operand.shape)
    if op.name == "all_gather":
        shape[op.attrs["dim"]] *= p
    elif op.name in ("reduce_scatter", "shard_slice"):
        d = op.attrs["dim"]
        if shape[d] % p:
            raise IRError(
                f"{op.name}: dim {d} of {operand} is not a multiple of the group size {p}",
                op.attr_locs.get("dim", loc),
            )
        shape[d] //= p
    elif op.name == "all_to_all":
        s, c = op.attrs["split_dim"], op.attrs["concat_dim"]
        if shape[s] % p:
            raise IRError(
                f"all_to_all: split_dim {s} of {operand} is not a multiple of the group size {p}",
                op.attr_locs.get("split_dim", loc),
            )
        shape[s] //= p
        shape[c] *= p
    elif op.name == "carry_reduce":
        shape = [n for d, n in enumerate(shape) if d not in op.attrs["dims"]]
    elif op.name == "collective_permute":
        for pair in op.attrs["pairs"]:
            if not all(0 <= m < p for m in pair):
                raise IRError(
                    f"collective_permute: pair {pair} names a member outside [0, {p})",
                    op.attr_locs.get("pairs", loc),
                )
    want = operand.with_shape(tuple(shape))
    if op.type != want:
        raise IRError(
            f"{op.name} over a group of {p} gives {want}, but the written type is {op.type}",
            op.type_loc or loc,
        )
