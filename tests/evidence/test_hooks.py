"""Hooks: `gdv.hooks` entry points see every obligation and the bundle; `--hook CMD` gets the
bundle's path; either can veto the compile (exit 1, the hook named)."""

from __future__ import annotations

import stat
from pathlib import Path

from gdv.cli import main


class _EntryPoint:
    def __init__(self, name: str, obj: object) -> None:
        self.name, self.value, self.obj = name, f"tests:{name}", obj

    def load(self) -> object:
        return self.obj


class _Auditor:
    def __init__(self, veto_bundle: bool = False, veto_id: str | None = None) -> None:
        self.seen: list[str] = []
        self.bundles: list[Path] = []
        self.veto_bundle, self.veto_id = veto_bundle, veto_id

    def on_obligation(self, result: dict) -> bool:
        self.seen.append(result["id"])
        return result["id"] != self.veto_id

    def on_bundle(self, path: Path, manifest: dict) -> bool | None:
        self.bundles.append(path)
        assert manifest["verdict"] == "proved"
        return False if self.veto_bundle else None


def _install(monkeypatch, **hooks: object) -> None:
    def entry_points(group: str) -> list[_EntryPoint]:
        assert group == "gdv.hooks"
        return [_EntryPoint(name, obj) for name, obj in hooks.items()]

    monkeypatch.setattr("gdv.evidence.hooks.entry_points", entry_points)


def _compile(src: Path, out: Path, *extra: str) -> int:
    args = ["compile", str(src), "--jobs", "1", "--no-cache", "--emit-evidence", str(out)]
    return main([*args, *extra])


def test_entry_point_hooks_see_everything_and_may_accept(monkeypatch, small_source, tmp_path):
    auditor = _Auditor()
    _install(monkeypatch, audit=auditor)
    assert _compile(small_source, tmp_path / "e") == 0
    assert len(auditor.seen) >= 5 and any(i.startswith("lower-to-kernels/") for i in auditor.seen)
    assert auditor.bundles == [tmp_path / "e"]


def test_entry_point_hooks_veto(monkeypatch, small_source, tmp_path, capsys) -> None:
    _install(monkeypatch, audit=_Auditor(veto_bundle=True))
    assert _compile(small_source, tmp_path / "e") == 1
    assert "hook audit vetoed the compile: returned False" in capsys.readouterr().err
    first = _Auditor()
    _install(monkeypatch, first=first)
    _compile(small_source, tmp_path / "e")
    _install(monkeypatch, a_ok=_Auditor(), picky=_Auditor(veto_id=first.seen[2]))
    assert _compile(small_source, tmp_path / "e") == 1
    assert f"hook picky vetoed the compile: returned False on {first.seen[2]}" in (
        capsys.readouterr().err
    )


def test_a_hook_that_raises_vetoes(monkeypatch, small_source, tmp_path, capsys) -> None:
    class Broken:
        def on_bundle(self, path: Path, manifest: dict) -> bool:
            raise RuntimeError("database unreachable")

    _install(monkeypatch, broken=Broken())
    assert _compile(small_source, tmp_path / "e") == 1
    err = capsys.readouterr().err
    assert "hook broken vetoed the compile: raised RuntimeError: database unreachable" in err


def _script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_external_hooks(monkeypatch, small_source, tmp_path, capsys) -> None:
    _install(monkeypatch)
    ok = _script(tmp_path / "ok.sh", 'test -f "$1/manifest.json" && test -d "$1/ir"\n')
    no = _script(
        tmp_path / "no.sh", 'test -f "$1/manifest.json" || exit 9\necho "no f16" >&2\nexit 1\n'
    )
    assert _compile(small_source, tmp_path / "e", "--hook", str(ok)) == 0
    assert _compile(small_source, tmp_path / "e", "--hook", str(ok), "--hook", str(no)) == 1
    err = capsys.readouterr().err
    assert f"hook {no} vetoed the compile: exit status 1: no f16" in err
    assert _compile(small_source, tmp_path / "e", "--hook", str(tmp_path / "missing")) == 1
    assert "vetoed the compile: not found" in capsys.readouterr().err
