"""Re-solving stored SMT-LIB queries with Z3 and, independently, cvc5.

Every stored query asserts a violation of its claim (an index and inputs on which the two sides
differ, or a coverage or memory-safety violation): `unsat` proves the claim. The text is read
as it is stored; for cvc5 semantically neutral adjustments are made, because Z3 prints terms
cvc5 does not read in logic ALL: `(! t :qid k)` annotations (quantifier names and patterns,
which only steer instantiation) are dropped, and a query with `lambda` is read in logic HO_ALL,
where Z3's arrays-as-lambdas become functions (`(Array A B)` -> `(-> A B)`, `(select a i)` ->
`(a i)`; only when the query uses no other array operation, so the reading is exact). A query
cvc5 still cannot read is `unknown` for cvc5, with the reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gdv.evidence.bundle import require

SOLVERS = ("z3", "cvc5")
RESULTS = ("unsat", "sat", "unknown")


@dataclass(frozen=True)
class SolverResult:
    """One solver's answer on one query, with the reason when `unknown`."""

    solver: str
    result: str
    reason: str = ""


def solver_version(name: str) -> str:
    """The version of solver `name` (an EvidenceError when it is not installed)."""
    if name == "z3":
        import z3

        return z3.get_version_string()
    cvc5 = require("cvc5", "re-solving with cvc5")
    return str(getattr(cvc5, "__version__", "unknown"))


def solve(name: str, text: str, timeout: float) -> SolverResult:
    """Ask solver `name` whether the SMT-LIB 2 script `text` is satisfiable."""
    if name == "z3":
        return _z3(text, timeout)
    if name == "cvc5":
        return _cvc5(text, timeout)
    raise ValueError(name)


def _z3(text: str, timeout: float) -> SolverResult:
    import z3

    s = z3.Solver(ctx=z3.Context())
    s.set("timeout", max(1, int(timeout * 1000)))
    try:
        s.from_string(text)
    except z3.Z3Exception as e:
        return SolverResult("z3", "unknown", f"z3 cannot read the query: {e}")
    r = s.check()
    if r == z3.unsat:
        return SolverResult("z3", "unsat")
    if r == z3.sat:
        return SolverResult("z3", "sat")
    return SolverResult("z3", "unknown", f"z3 answered unknown ({s.reason_unknown()})")


_TOKEN = re.compile(r'\s*(\(|\)|\|[^|]*\||"(?:[^"]|"")*"|;[^\n]*|[^\s()]+)')


def _sexprs(text: str) -> list:
    stack: list[list] = [[]]
    for m in _TOKEN.finditer(text):
        tok = m.group(1)
        if tok.startswith(";"):
            continue
        if tok == "(":
            stack.append([])
        elif tok == ")":
            if len(stack) == 1:
                raise ValueError("unbalanced ')'")
            done = stack.pop()
            stack[-1].append(done)
        else:
            stack[-1].append(tok)
    if len(stack) != 1:
        raise ValueError("unbalanced '('")
    return stack[0]


def _postorder(e, combine):
    """`e` rebuilt bottom-up: each list becomes `combine(its children, rebuilt)`, leaves stay.
    An explicit stack, not recursion: a query's let-nesting grows with the program's depth
    (issue 14: a 10^4-op chain)."""
    if not isinstance(e, list):
        return e
    done: list = []
    stack = [(e, 0, [])]
    while stack:
        node, i, kids = stack[-1]
        if i < len(node):
            stack[-1] = (node, i + 1, kids)
            child = node[i]
            if isinstance(child, list):
                stack.append((child, 0, []))
            else:
                kids.append(child)
            continue
        stack.pop()
        value = combine(kids)
        if stack:
            stack[-1][2].append(value)
        else:
            done.append(value)
    return done[0]


def _unannotated(e):  # (! t :qid k :pattern (...)) -> t
    return _postorder(e, lambda k: k[1] if k and k[0] == "!" and len(k) >= 2 else k)


def _show(e) -> str:
    return _postorder(e, lambda k: "(" + " ".join(k) + ")")


_ARRAY_OPS = frozenset({"store", "const", "as-array", "map", "default", "ext"})


def _tokens(e) -> set[str]:
    out: set[str] = set()
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, list):
            stack.extend(x)
        else:
            out.add(x)
    return out


def _function_node(k: list):  # (Array A B) -> (-> A B); (select a i) -> (a i)
    if len(k) == 3 and k[0] == "Array":
        return ["->", k[1], k[2]]
    if len(k) >= 3 and k[0] == "select":
        return k[1:]
    return k


def _functions(e):
    return _postorder(e, _function_node)


def for_cvc5(text: str) -> str:
    """`text` as cvc5 reads it: annotations dropped; with lambdas, HO_ALL and arrays read as
    functions."""
    commands = [_unannotated(c) for c in _sexprs(text)]
    used = _tokens(commands)
    if "lambda" in used:
        if not used & _ARRAY_OPS:
            commands = [_functions(c) for c in commands]
        commands = [["set-logic", "HO_ALL"] if c == ["set-logic", "ALL"] else c for c in commands]
    return "\n".join(_show(c) for c in commands) + "\n"


def _cvc5(text: str, timeout: float) -> SolverResult:
    cvc5 = require("cvc5", "re-solving with cvc5")
    try:
        script = for_cvc5(text)
    except ValueError as e:
        return SolverResult("cvc5", "unknown", f"not an SMT-LIB script: {e}")
    tm = cvc5.TermManager()
    solver = cvc5.Solver(tm)
    solver.setOption("tlimit-per", str(max(1, int(timeout * 1000))))
    parser = cvc5.InputParser(solver)
    answers = []
    try:
        parser.setStringInput(cvc5.InputLanguage.SMT_LIB_2_6, script, "query")
        symbols = parser.getSymbolManager()
        while True:
            cmd = parser.nextCommand()
            if cmd.isNull():
                break
            out = cmd.invoke(solver, symbols).strip()
            if out:
                answers.append(out)
    except RuntimeError as e:
        return SolverResult("cvc5", "unknown", f"cvc5 cannot read the query: {str(e)[:200]}")
    last = answers[-1] if answers else ""
    if last in ("unsat", "sat"):
        return SolverResult("cvc5", last)
    return SolverResult("cvc5", "unknown", f"cvc5 answered {last or 'nothing'}")
