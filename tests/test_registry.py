"""Every op has every rule (DESIGN.md, "One op, one column per layer").

A column is a table keyed by the op's spec object; the rule for an op must live in the layer's
file of the op's family name (`backends/reference/reduce.py` for `reduce_sum`, ...).
"""

from __future__ import annotations

import importlib

import pytest

from gdv.ir import ops

# (layer, module holding the table, table name, package of the family files)
LAYERS = [
    ("reference meaning", "gdv.backends.reference.registry", "KERNELS", "gdv.backends.reference"),
    ("error bound", "gdv.validate.bounds.registry", "RULES", "gdv.validate.bounds"),
    ("C lowering", "gdv.backends.c.registry", "RULES", "gdv.backends.c"),
]


def _table(module: str, name: str, package: str) -> dict:
    importlib.import_module(package)  # importing the package registers the family files
    return getattr(importlib.import_module(module), name)


def test_every_family_has_specs() -> None:
    for family in ops.FAMILIES:
        assert ops.by_family(family), f"no op in family {family}"


def test_type_rules_are_complete() -> None:
    for spec in ops.all_specs():
        assert callable(spec.infer), spec
        assert spec.doc.strip(), f"{spec.name} has no docstring of its meaning"
        assert spec.is_composite == (spec.decompose is not None), spec.name


@pytest.mark.parametrize("layer,module,table,package", LAYERS, ids=[x[0] for x in LAYERS])
def test_every_op_has_a_rule_in_its_family_file(layer, module, table, package) -> None:
    rules = _table(module, table, package)
    missing = [s.name for s in ops.all_specs() if s not in rules]
    assert not missing, f"ops without a {layer} rule: {missing}"
    for spec, rule in rules.items():
        assert isinstance(spec, ops.OpSpec), f"{layer} table is keyed by {spec!r}, not a spec"
        home = rule.__module__.rsplit(".", 1)[-1]
        assert home == spec.family, (
            f"the {layer} rule of {spec.name} lives in {rule.__module__}, expected "
            f"{package}.{spec.family}"
        )
