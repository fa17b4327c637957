"""Packaging follows the design card: every package folder is listed, no bare root imports."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ROOT_FOLDERS = ("gdv", "grammar", "ir", "passes", "validate", "backends", "evidence", "frontends")
BANNED = {"ir", "passes", "validate", "backends", "evidence", "grammar", "frontends"}


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _package_name(folder: Path) -> str:
    """gdv/commands -> gdv.commands; ir/ops -> gdv.ir.ops (root folders are gdv.<name>)."""
    top, *rest = folder.relative_to(ROOT).parts
    return ".".join(["gdv"] + ([] if top == "gdv" else [top]) + rest)


def test_every_package_folder_is_listed() -> None:
    cfg = _pyproject()["tool"]["setuptools"]
    listed = set(cfg["packages"])
    found = set()
    for top in ROOT_FOLDERS:
        base = ROOT / top
        if not base.is_dir():
            continue
        for init in base.rglob("__init__.py"):
            found.add(_package_name(init.parent))
    missing = sorted(found - listed)
    assert not missing, f"package folders missing from pyproject's package list: {missing}"
    stale = sorted(p for p in listed - found)
    assert not stale, f"listed packages with no folder: {stale}"


def test_root_folders_map_to_gdv_names() -> None:
    mapping = _pyproject()["tool"]["setuptools"]["package-dir"]
    for name, folder in mapping.items():
        assert name == ("gdv" if folder == "gdv" else f"gdv.{folder}")
        assert (ROOT / folder / "__init__.py").is_file()


def test_grammar_is_package_data() -> None:
    data = _pyproject()["tool"]["setuptools"]["package-data"]
    assert "*.lark" in data["gdv.grammar"]
    assert (ROOT / "grammar" / "gdv.lark").is_file()


def _python_files():
    for top in (*ROOT_FOLDERS, "tests", "benchmarks", "examples"):
        base = ROOT / top
        if base.is_dir():
            yield from base.rglob("*.py")


def test_no_bare_root_imports() -> None:
    offenders = []
    for path in _python_files():
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            offenders += [
                f"{path.relative_to(ROOT)}:{node.lineno}: {n}"
                for n in names
                if n.split(".")[0] in BANNED
            ]
    assert not offenders, "bare imports of root folders (use gdv.<name>):\n" + "\n".join(offenders)


def test_ir_imports_nothing_else_of_gdv() -> None:
    """Dependency direction (DESIGN.md): gdv.ir imports nothing of gdv outside gdv.ir."""
    for path in (ROOT / "ir").rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                mod = node.module
                if mod.startswith("gdv"):
                    assert mod.startswith("gdv.ir"), f"{path}: imports {mod}"
