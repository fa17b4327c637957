"""External passes: `gdv compile --external-pass 'CMD'` pipes the module's text into CMD and
reads the transformed module from its stdout. gdv trusts nothing of it: the output must parse,
verify, keep every function's signature, and is then proved bit-exact equivalent to its input
like any pass (a whole-function obligation per function)."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess

from gdv.ir.core import Function, Module
from gdv.ir.diagnostics import IRError, Loc, printable
from gdv.ir.obligation import Obligation
from gdv.ir.parser import parse
from gdv.ir.printer import print_module
from gdv.ir.verifier import verify

DEFAULT_TIMEOUT = 60.0


def _signature(fn: Function) -> str:
    params = ", ".join(str(p.type) for p in fn.params)
    return f"@{fn.name}({params}) -> ({', '.join(map(str, fn.results))})"


def _run_in_group(argv: list[str], data: bytes, timeout: float) -> subprocess.CompletedProcess:
    """Run `argv` in a session of its own, feeding it `data`; whatever it leaves running (a
    child holding its stdout, a daemon) is killed with the whole process group when it exits
    or times out, not only the direct child."""
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(data, timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        proc.communicate()
        raise
    finally:
        _kill_group(proc)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _kill_group(proc: subprocess.Popen) -> None:
    # The group's id is the pass's pid; Linux does not hand that number to a new process
    # while any member of the group lives, so this reaches only what the pass left behind.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # the group is gone already


def run_external_pass(
    module: Module, command: str, index: int, timeout: float = DEFAULT_TIMEOUT
) -> tuple[Module, list[Obligation]]:
    """Run one external pass; return its module and the obligations that justify it."""
    where = Loc(f"<external pass {index}: {printable(command, 60)}>", 1, 1)
    try:
        argv = shlex.split(command)
    except ValueError as e:
        raise IRError(f"cannot split the external pass command: {e}", where) from None
    if not argv:
        raise IRError("the external pass command is empty", where)
    try:
        proc = _run_in_group(argv, print_module(module).encode(), timeout)
    except FileNotFoundError:
        raise IRError(f"external pass not found: {printable(argv[0], 120)}", where) from None
    except PermissionError:
        raise IRError(
            f"external pass is not executable: {printable(argv[0], 120)}", where
        ) from None
    except subprocess.TimeoutExpired:
        raise IRError(
            f"external pass did not finish within {timeout:g} s (killed with its process group)",
            where,
        ) from None
    stderr = printable(proc.stderr.decode(errors="replace").strip()[-400:], 400)
    if proc.returncode < 0:
        raise IRError(f"external pass crashed (signal {-proc.returncode}); stderr: {stderr}", where)
    if proc.returncode != 0:
        raise IRError(
            f"external pass exited with status {proc.returncode}; stderr: {stderr}", where
        )
    try:
        out = verify(parse(proc.stdout, where.file))
    except IRError as e:
        raise IRError(f"external pass produced invalid IR: {e.message}", e.loc) from None
    before = {f.name: f for f in module.functions}
    after = {f.name: f for f in out.functions}
    if before.keys() != after.keys():
        raise IRError(
            f"external pass changed the module's functions: {sorted(before)} became "
            f"{sorted(after)}",
            where,
        )
    obligations = []
    for name, fn in before.items():
        if _signature(fn) != _signature(after[name]):
            raise IRError(
                f"external pass changed the signature of @{name}: {_signature(fn)} became "
                f"{_signature(after[name])}",
                where,
            )
        obligations.append(
            Obligation(
                id=f"external-{index}/whole-function/equivalence#{name}",
                kind="equivalence",
                theory="fp",
                src=fn,
                tgt=after[name],
                claim=f"@{name} after `{printable(command, 60)}` is bit-exact equivalent to before",
                loc=fn.loc,
            )
        )
    out.filename = module.filename
    return out, obligations
