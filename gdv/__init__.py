"""gdv: a verification-first ML compiler.

Public API: `load`, `parse`, `format_module`, `compile` (prove and build an executable),
`run` (the reference backend), `import_onnx`, `import_torch`, `IRError`.
"""

__version__ = "0.1.0"

from gdv.api import format_module, load, parse  # noqa: E402
from gdv.ir.diagnostics import IRError  # noqa: E402
from gdv.ir.targets import DEFAULT_TARGET  # noqa: E402


def compile(source, target: str = DEFAULT_TARGET, **options):
    """Compile and prove `source` (a path or IR text) for `target` (default `c`, as `gdv
    compile`; `gdv targets` lists them); returns an executable. See `gdv.driver.compile`."""
    from gdv.driver import compile as _compile

    return _compile(source, target, **options)


def run(module, inputs, *, mode: str = "exact"):
    """Execute the entry function of `module` on the reference backend."""
    from gdv.backends import reference

    return reference.run(module, inputs, mode=mode)


def import_onnx(model_or_path, **options):
    """An ONNX model (`ModelProto` or path) as `(Module, weights)`. See
    `gdv.frontends.onnx.import_model`."""
    from gdv.frontends.onnx import import_model

    return import_model(model_or_path, **options)


def import_torch(program_or_path, **options):
    """A `torch.export.ExportedProgram` (or a saved `.pt2` path) as `(Module, weights)`. See
    `gdv.frontends.torch.import_program`."""
    from gdv.frontends.torch import import_program

    return import_program(program_or_path, **options)


__all__ = [
    "IRError",
    "__version__",
    "compile",
    "format_module",
    "import_onnx",
    "import_torch",
    "load",
    "parse",
    "run",
]
