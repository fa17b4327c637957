"""The reference backend: numpy, the executable meaning of every op of IR_SPEC.md.

`run` executes a function bit-exactly (mode `exact`) or with every float dtype replaced by f64
(mode `ideal`, for measuring rounding error); `apply` evaluates one op; `random_inputs` draws
seeded inputs within the parameters' declared ranges; `check_memory` refuses programs that
would not fit in memory; `bit_equal` compares results as IR_SPEC.md section 5 does. Kernels
live in one file per op family, registered in `KERNELS` against the op specs of `gdv.ir.ops`.
"""

from gdv.backends.reference import (  # noqa: F401  (importing the families fills KERNELS)
    collective,
    composite,
    contract,
    control,
    conv,
    elementwise,
    gather,
    layout,
    reduce,
)

# The kernel op's family file; its name would clash with the `kernel` decorator below.
from gdv.backends.reference import kernel as kernel_family  # noqa: F401
from gdv.backends.reference.compare import bit_equal, describe_difference
from gdv.backends.reference.inputs import random_inputs
from gdv.backends.reference.interpreter import apply, check_function, entry_function, run
from gdv.backends.reference.memory import check_memory, default_limit
from gdv.backends.reference.registry import KERNELS, MODES, Context, kernel

__all__ = [
    "KERNELS",
    "MODES",
    "Context",
    "apply",
    "bit_equal",
    "check_function",
    "check_memory",
    "default_limit",
    "describe_difference",
    "entry_function",
    "kernel",
    "random_inputs",
    "run",
]
