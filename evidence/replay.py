"""The certificate replayer: rebuild stage N+1 of a bundle from stage N and the steps the pass
recorded, text for text, without running (or importing) any pass (issue 15).

This module is part of the checker's trusted base (evidence/README.md): it imports only the IR
(`gdv.ir`: data structures, printer, verifier), never `gdv.passes`. A test checks that.

Why a replayed step preserves meaning. A function is a set of SSA equations `name = op(args)`.
A `rewrite` step replaces the equation of `root` by the equations of its `emitted` ops and
makes every later use of `root` read `replacement`. Its pair (an obligation's `src`/`tgt`,
stored as IR text) is checked here to be *about this program*:

- `src` returns `root`, and each of its ops is the current definition of its name (operands
  resolved through earlier renamings), so `root = src(params)` holds in the program;
- `tgt` returns `replacement`, and each of its ops is either emitted by this step or the current
  definition of its name, so `replacement = tgt(params)` holds after the step;
- `src` and `tgt` take the same parameters, each a value of the function of the same type;
- every kernel the pair runs names a body function whose text is the module's.

The checker then proves `src(p) = tgt(p)` for all `p` with its own SMT encoding, so the uses
that now read `replacement` see the value they saw. Emitted ops get fresh names (never defined
before in the function, apart from `root`'s own) and read only values defined before them, and
`replacement` is defined before every use of `root`: each state is a well-formed SSA function.
A `remove` step drops ops nothing reads; `attrs` may change only execution-plan attributes;
`drop-functions` drops functions no kernel calls (never the entry). A step with no obligation
replaces one op by an op of the same name, read from stage N+1; the checker builds that pair
itself (`Replayed.built`) and proves it like the others.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from gdv.ir.core import Function, Module, Op, Param
from gdv.ir.diagnostics import IRError
from gdv.ir.printer import print_function, print_module
from gdv.ir.verifier import verify, verify_function

PLAN_ATTRS = frozenset({"arena_bytes", "buffers", "at_bind", "block_local"})
"""Function attributes that only say where values live (plan-memory's arena), never what a
function computes (IR_SPEC.md, the loop stage): the only ones an `attrs` step may change."""


class ReplayError(Exception):
    """A certificate that does not rebuild the next stage; the message says which step."""


@dataclass
class Pair:
    """An obligation's two sides as read from its IR file, and the functions they call."""

    src: Function
    tgt: Function
    functions: dict[str, Function]


def read_pair(text: str, filename: str) -> Pair:
    """The pair in `text` (functions `@src`, `@tgt` and the kernel bodies they call)."""
    from gdv.ir.parser import parse

    try:
        module = parse(text, filename)
        for fn in module.functions:
            verify_function(fn, "graph", filename)
    except IRError as e:
        raise ReplayError(f"{filename}: {e.message}") from None
    functions = {f.name: f for f in module.functions}
    src, tgt = functions.pop("src", None), functions.pop("tgt", None)
    if src is None or tgt is None:
        raise ReplayError(f"{filename}: a pair needs functions @src and @tgt")
    return Pair(src, tgt, functions)


@dataclass
class _State:
    """One function being replayed: its ops in order, an order key per value (parameters
    `()`, ops increasing tuples; an op replaced at key K hands its place to keys K+(i,)), the
    renamings of removed values, and how often each value is read."""

    fn: Function
    ops: list[Op]
    key: dict[str, tuple] = field(default_factory=dict)
    defs: dict[str, Op] = field(default_factory=dict)
    alias: dict[str, str] = field(default_factory=dict)
    uses: dict[str, int] = field(default_factory=dict)
    ever: set[str] = field(default_factory=set)
    types: dict = field(default_factory=dict)

    @classmethod
    def of(cls, fn: Function) -> _State:
        s = cls(fn, list(fn.ops))
        for p in fn.params:
            s.key[p.name] = ()
            s.types[p.name] = p.type
        for k, op in enumerate(fn.ops):
            s.key[op.result] = (k,)
            s.defs[op.result] = op
            s.types[op.result] = op.type
            for v in op.operands:
                s.uses[v] = s.uses.get(v, 0) + 1
        for r in fn.returns:
            s.uses[r] = s.uses.get(r, 0) + 1
        s.ever = set(s.key)
        return s

    def resolve(self, name: str) -> str:
        seen = []
        while name in self.alias:
            seen.append(name)
            name = self.alias[name]
        for s in seen:  # path compression
            self.alias[s] = name
        return name

    def current(self, name: str) -> Op | None:
        """The op defining `name` now, its operands resolved."""
        op = self.defs.get(name)
        if op is None:
            return None
        operands = [self.resolve(v) for v in op.operands]
        if operands != op.operands:
            op = dataclasses.replace(op, operands=operands)
            self.defs[name] = op
        return op

    def function(self) -> Function:
        ops = [self.current(op.result) for op in self.ops]
        returns = [self.resolve(r) for r in self.fn.returns]
        return dataclasses.replace(self.fn, ops=ops, returns=returns)


@dataclass
class Replayed:
    """The rebuilt stage and the pairs the checker must prove besides the cited obligations."""

    module: Module
    built: list[tuple[str, Function, Function, list[Function]]] = field(default_factory=list)
    """(what, src, tgt, bodies) for steps without an obligation: one op against its
    rescheduled self, built here from the program."""
    rewrites: int = 0


class _Replayer:
    def __init__(self, before: Module, filename: str, pass_name: str, pairs) -> None:
        self.pass_name = pass_name
        self.pairs = pairs
        self.filename = filename
        self.order = [f.name for f in before.functions]
        self.states = {f.name: _State.of(f) for f in before.functions}
        self.bodies: dict[str, str] = {}  # printed text of functions, while unchanged
        self.out = Replayed(before)

    def fail(self, n: int, step: dict, why: str) -> ReplayError:
        what = step.get("root") or step.get("function") or step.get("kind")
        return ReplayError(f"{self.pass_name} step {n} ({step.get('kind')} {what}): {why}")

    def state(self, n: int, step: dict) -> _State:
        s = self.states.get(step.get("function", ""))
        if s is None:
            raise self.fail(n, step, f"no function @{step.get('function')}")
        return s

    def text_of(self, name: str) -> str | None:
        if name not in self.bodies:
            s = self.states.get(name)
            if s is None:
                return None
            self.bodies[name] = print_function(s.function())
        return self.bodies[name]

    def run(self, steps: list[dict]) -> Replayed:
        for n, step in enumerate(steps):
            kind = step.get("kind")
            handler = {
                "rewrite": self.rewrite,
                "remove": self.remove,
                "attrs": self.attrs,
                "drop-functions": self.drop,
            }.get(kind)
            if handler is None:
                raise self.fail(n, step, f"unknown step kind {kind!r}")
            handler(n, step)
        functions = [self.states[name].function() for name in self.order]
        self.out.module = Module(functions, self.filename)
        return self.out

    # -- rewrite --------------------------------------------------------------------------

    def rewrite(self, n: int, step: dict) -> None:
        s = self.state(n, step)
        root, repl = str(step.get("root")), str(step.get("replacement"))
        emitted = [str(e) for e in step.get("emitted", [])]
        pos = step.get("position")
        if not isinstance(pos, int) or not 0 <= pos < len(s.ops) or s.ops[pos].result != root:
            raise self.fail(n, step, f"%{root} is not the op at position {pos}")
        old = s.current(root)
        assert old is not None
        cited = step.get("obligation")
        if cited is None:
            src, tgt, bodies = self.built_pair(n, step, s, old, emitted)
        else:
            pair = self.pairs(str(cited))
            if pair is None:
                raise self.fail(n, step, f"cites obligation {cited!r}, which has no pair")
            src, tgt, bodies = pair.src, pair.tgt, pair.functions
        added = [str(f) for f in step.get("functions", [])]
        self.check_pair(n, step, s, src, tgt, bodies, root, repl, emitted, added)
        new_ops = {o.result: o for o in tgt.ops}
        made = [new_ops[e] for e in emitted]
        # Place the emitted ops where the root was; they take keys after everything before it.
        k = s.key[root]
        for o in old.operands:
            s.uses[o] -= 1
        s.ops[pos : pos + 1] = made
        del s.defs[root]
        if root not in emitted:
            del s.key[root]
            s.types.pop(root)
        for i, o in enumerate(made):
            s.key[o.result] = k if len(made) == 1 else (*k, i)
            s.defs[o.result] = o
            s.types[o.result] = o.type
            s.ever.add(o.result)
            for v in o.operands:
                s.uses[v] = s.uses.get(v, 0) + 1
        if repl != root:
            s.alias[root] = repl
            s.uses[repl] = s.uses.get(repl, 0) + s.uses.pop(root, 0)
        for name in added:
            self.order.append(name)
            self.states[name] = _State.of(bodies[name])
        self.bodies.pop(s.fn.name, None)
        self.out.rewrites += 1

    def built_pair(self, n: int, step: dict, s: _State, old: Op, emitted: list[str]):
        """Without an obligation: `old` against itself with the step's `attrs` (a schedule)."""
        root = old.result
        if emitted != [root]:
            raise self.fail(n, step, "a step without an obligation must keep the op's name")
        attrs = step.get("attrs")
        if not isinstance(attrs, dict):
            raise self.fail(n, step, "a step without an obligation needs the op's new attrs")
        new = dataclasses.replace(old, attrs=dict(attrs))
        params = [dataclasses.replace(p) for p in _reads([old], s)]
        src = Function("src", params, [old.type], [old], [root])
        tgt = Function("tgt", list(params), [new.type], [new], [root])
        bodies = {}
        for op in (old, new):
            body = op.attrs.get("body") if op.name == "kernel" else None
            if isinstance(body, str):
                state = self.states.get(body)
                if state is None:
                    raise self.fail(n, step, f"kernel body @{body} is not in the module")
                bodies[body] = state.function()
        what = f"{self.pass_name}/{s.fn.name}/%{root}"
        self.out.built.append((what, src, tgt, list(bodies.values())))
        return src, tgt, bodies

    def check_pair(self, n, step, s: _State, src, tgt, bodies, root, repl, emitted, added):
        if src.returns != [root] or tgt.returns != [repl]:
            raise self.fail(
                n, step, f"the pair returns {src.returns} and {tgt.returns}, not %{root}/%{repl}"
            )
        if [(p.name, p.type) for p in src.params] != [(p.name, p.type) for p in tgt.params]:
            raise self.fail(n, step, "the pair's two sides take different parameters")
        if src.results != tgt.results:
            raise self.fail(n, step, "the pair's two sides have different result types")
        k = s.key[root]
        for p in src.params:
            if s.types.get(p.name) != p.type or s.key.get(p.name, k) >= k:
                raise self.fail(n, step, f"parameter %{p.name} is not a value before %{root}")
        for o in src.ops:
            if s.current(o.result) != o:
                raise self.fail(n, step, f"src op %{o.result} is not the program's")
        tgt_names = {o.result for o in tgt.ops}
        if not set(emitted) <= tgt_names or len(set(emitted)) != len(emitted):
            raise self.fail(n, step, "the emitted ops are not distinct ops of the pair's tgt")
        scope = {p.name for p in tgt.params}
        for o in tgt.ops:
            if o.result in emitted:
                if o.result != root and o.result in s.ever:
                    raise self.fail(n, step, f"emitted %{o.result} reuses a name")
                for v in o.operands:
                    if v not in scope and (v not in s.key or s.key[v] >= k):
                        raise self.fail(n, step, f"emitted %{o.result} reads %{v} too late")
                scope.add(o.result)
            elif s.current(o.result) != o:
                raise self.fail(n, step, f"tgt op %{o.result} is neither emitted nor the program's")
            elif s.key[o.result] < k:  # emitted ops may read it: it is defined before them
                scope.add(o.result)
        if repl not in emitted and (repl not in s.key or s.key[repl] >= k):
            raise self.fail(n, step, f"%{repl} is not defined before %{root}")
        if repl not in emitted and s.types.get(repl) != s.types[root]:
            raise self.fail(n, step, f"%{repl} and %{root} differ in type")
        for name in added:
            if name in self.states or name not in bodies:
                raise self.fail(n, step, f"added function @{name} is taken or not in the pair")
        for o in [*src.ops, *tgt.ops]:
            body = o.attrs.get("body") if o.name == "kernel" else None
            if body is None:
                continue
            if body not in bodies:
                raise self.fail(n, step, f"the pair's kernel %{o.result} calls unknown @{body}")
            if body in added:
                continue
            if self.text_of(str(body)) != print_function(bodies[body]):
                raise self.fail(n, step, f"the pair's @{body} is not the module's")

    # -- the other kinds --------------------------------------------------------------------

    def remove(self, n: int, step: dict) -> None:
        s = self.state(n, step)
        removed = [str(r) for r in step.get("removed", [])]
        gone = set(removed)
        if len(gone) != len(removed) or not gone <= s.defs.keys():
            raise self.fail(n, step, "removes ops that are not in the function (or twice)")
        for name in removed:
            for v in s.current(name).operands:
                s.uses[v] -= 1
        for name in removed:
            if s.uses.get(name, 0):
                raise self.fail(n, step, f"%{name} is still read")
        s.ops = [o for o in s.ops if o.result not in gone]
        for name in removed:
            del s.defs[name], s.key[name], s.types[name]
        self.bodies.pop(s.fn.name, None)

    def attrs(self, n: int, step: dict) -> None:
        s = self.state(n, step)
        new = step.get("attrs")
        if not isinstance(new, dict):
            raise self.fail(n, step, "no attributes")
        old = s.fn.attrs
        changed = {k for k in old.keys() | new.keys() if old.get(k) != new.get(k)}
        if not changed <= PLAN_ATTRS:
            raise self.fail(n, step, f"changes attributes {sorted(changed - PLAN_ATTRS)}")
        # The attributes keep their order (the printer writes them in it): the function's own
        # first, then the plan's (a certificate's JSON need not keep the order).
        ordered = {k: new[k] for k in old if k in new}
        ordered |= {k: new[k] for k in sorted(new) if k not in ordered}
        s.fn = dataclasses.replace(s.fn, attrs=ordered)
        self.bodies.pop(s.fn.name, None)

    def drop(self, n: int, step: dict) -> None:
        dropped = {str(f) for f in step.get("functions", [])}
        if not dropped <= self.states.keys():
            raise self.fail(n, step, "drops functions that are not in the module")
        kept = [name for name in self.order if name not in dropped]
        if "main" in dropped or (len(kept) == 0):
            raise self.fail(n, step, "drops the entry function")
        for name in kept:
            for op in self.states[name].ops:
                if op.name == "kernel" and op.attrs.get("body") in dropped:
                    raise self.fail(n, step, f"@{op.attrs['body']} is still a kernel body")
        self.order = kept
        for name in dropped:
            del self.states[name]
            self.bodies.pop(name, None)


def _reads(ops: list[Op], s: _State) -> list:
    names = list(dict.fromkeys(v for o in ops for v in o.operands))
    return [Param(v, s.types[v]) for v in names]


def replay(
    before: Module, after_text: bytes, steps: list, pass_name: str, pairs, filename: str = ""
) -> Replayed:
    """Apply `steps` to `before`; the result must print as `after_text` (the next stage's file,
    called `filename`). `pairs(obligation_id)` gives a cited obligation's `Pair` or None.
    Raises ReplayError naming the first step that does not hold."""
    if not isinstance(steps, list) or not all(isinstance(s, dict) for s in steps):
        raise ReplayError(f"{pass_name}: the certificate's steps are not a list of steps")
    out = _Replayer(before, filename, pass_name, pairs).run(steps)
    try:  # each step keeps the function well formed; this is the belt to those braces
        verify(out.module)
    except IRError as e:
        raise ReplayError(f"{pass_name}: the replayed stage is not a valid module: {e}") from None
    if print_module(out.module).encode() != after_text:
        raise ReplayError(
            f"{pass_name}: replaying its {len(steps)} step(s) does not give the next stage "
            f"text for text{_first_difference(print_module(out.module), after_text.decode())}"
        )
    return out


def _first_difference(a: str, b: str) -> str:
    for k, (x, y) in enumerate(zip(a.splitlines(), b.splitlines(), strict=False), start=1):
        if x != y:
            return f" (first at line {k}: {x.strip()[:100]!r} against {y.strip()[:100]!r})"
    return " (one is longer)"
