"""The gdv IR: types, ops, functions, modules; parser, printer, verifier.

`gdv.ir` imports nothing else of gdv.
"""

from gdv.ir.core import Function, Module, Op, Param
from gdv.ir.diagnostics import IRError, Loc
from gdv.ir.dtypes import DType
from gdv.ir.types import TensorType

__all__ = ["DType", "Function", "IRError", "Loc", "Module", "Op", "Param", "TensorType"]
