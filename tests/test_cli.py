"""The `gdv` command line (IR_SPEC.md section 6): `check` on every class of bad input (message,
position, exit status 3, no traceback), `fmt` canonical on the examples, `run` with its options,
`--version`."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gdv
from gdv.api import parse
from gdv.backends import reference
from gdv.cli import main
from gdv.ir.diagnostics import IRError

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.gdv"))
EXAMPLE_IDS = [p.stem for p in EXAMPLES]
ERROR_LINE = re.compile(r"^(?P<file>.+):(?P<line>\d+):(?P<col>\d+): error: (?P<msg>.+)$")


def gdv_main(capsys, *argv: str) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def assert_input_error(err: str, file: str | Path, line: int, col: int, *fragments: str) -> str:
    """`err` is exactly one `FILE:LINE:COL: error: MESSAGE` line; returns MESSAGE."""
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    m = ERROR_LINE.match(lines[0])
    assert m, err
    assert (m["file"], int(m["line"]), int(m["col"])) == (str(file), line, col), err
    for f in fragments:
        assert f in m["msg"], f"{f!r} not in {m['msg']!r}"
    assert "\x1b" not in err and "\x00" not in err
    return m["msg"]


def check_file(capsys, tmp_path: Path, content: str | bytes, name: str = "in.gdv"):
    path = tmp_path / name
    if isinstance(content, str):
        content = content.encode("utf-8")
    path.write_bytes(content)
    code, out, err = gdv_main(capsys, "check", path)
    return code, out, err, path


def assert_check_rejects(capsys, tmp_path, content, line, col, *fragments) -> str:
    code, out, err, path = check_file(capsys, tmp_path, content)
    assert code == 3, err
    assert out == ""
    return assert_input_error(err, path, line, col, *fragments)


OK_PROGRAM = "func @main(%x: f32[2]) -> f32[2] {\n  %y = neg(%x) : f32[2]\n  return %y\n}\n"

# --- gdv check: bad input, one test per class ------------------------------------------------


def test_check_ok(capsys, tmp_path) -> None:
    code, out, err, path = check_file(capsys, tmp_path, OK_PROGRAM)
    assert (code, err) == (0, "")
    assert out == f"{path}: ok (1 function(s), 1 op(s))\n"


def test_empty_file(capsys, tmp_path) -> None:
    assert_check_rejects(capsys, tmp_path, "", 1, 1, "empty input", "expected at least one 'func'")


def test_only_whitespace(capsys, tmp_path) -> None:
    assert_check_rejects(capsys, tmp_path, " \n\t\n", 1, 1, "empty input")


def test_only_comments(capsys, tmp_path) -> None:
    src = "// nothing here\n   // still nothing\n\n"
    assert_check_rejects(capsys, tmp_path, src, 1, 1, "empty input")


def test_nul_bytes(capsys, tmp_path) -> None:
    msg = assert_check_rejects(capsys, tmp_path, b"\x00\x00\x01func", 1, 1, "unexpected character")
    assert "\\x00" in msg


def test_nul_byte_inside_a_program(capsys, tmp_path) -> None:
    src = OK_PROGRAM.replace("neg(", "neg(\x00", 1)
    msg = assert_check_rejects(capsys, tmp_path, src, 2, 12, "unexpected character")
    assert "\\x00" in msg


def test_random_binary(capsys, tmp_path) -> None:
    data = bytes(np.random.default_rng(7).integers(0, 256, 4096, dtype=np.uint8))
    code, out, err, path = check_file(capsys, tmp_path, data)
    assert code == 3
    assert_input_error(err, path, *_first_error_position(data))


def _first_error_position(data: bytes) -> tuple[int, int]:
    try:
        parse(data, "x")
    except IRError as e:
        return e.loc.line, e.loc.col
    raise AssertionError("random bytes parsed")


def test_binary_png_header(capsys, tmp_path) -> None:
    data = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"
    assert_check_rejects(capsys, tmp_path, data, 1, 1, "not UTF-8", "byte 0x89")


def test_non_utf8(capsys, tmp_path) -> None:
    data = OK_PROGRAM.encode() + b"// caf\xe9\n"
    assert_check_rejects(capsys, tmp_path, data, 5, 7, "not UTF-8", "byte 0xe9")


def test_truncated_utf8_sequence(capsys, tmp_path) -> None:
    data = b"func @main() -> () {\n  return\n}\n// \xe2\x82"
    assert_check_rejects(capsys, tmp_path, data, 4, 4, "not UTF-8", "byte 0xe2")


def test_truncated_program(capsys, tmp_path) -> None:
    src = OK_PROGRAM[: OK_PROGRAM.index("neg(%x)") + len("neg(%x")]
    assert_check_rejects(
        capsys, tmp_path, src, 2, 14, "unexpected end of input", "expected ')' or ','"
    )


def test_truncated_after_last_op(capsys, tmp_path) -> None:
    src = OK_PROGRAM[: OK_PROGRAM.index("return")]
    assert_check_rejects(capsys, tmp_path, src, 3, 3, "unexpected end of input")


@pytest.mark.parametrize("example", EXAMPLES, ids=EXAMPLE_IDS)
def test_every_prefix_of_an_example_parses_or_gives_a_positioned_error(example: Path) -> None:
    text = example.read_text()
    name = str(example)
    accepted = 0
    for i in range(len(text) + 1):
        prefix = text[:i]
        try:
            parse(prefix, name)
            accepted += 1
        except IRError as e:
            assert e.loc.file == name
            lines = prefix.split("\n")
            assert 1 <= e.loc.line <= len(lines), (i, str(e))
            assert 1 <= e.loc.col <= len(lines[e.loc.line - 1]) + 1, (i, str(e))
            assert e.message and "\n" not in e.message
    # Only the whole program (and itself without the final newline) is valid.
    assert accepted == 2


@settings(max_examples=40)
@given(data=st.data())
def test_mutated_examples_never_crash(data) -> None:
    example = data.draw(st.sampled_from(EXAMPLES))
    text = bytearray(example.read_bytes())
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(text)))
        kind = data.draw(st.sampled_from(["delete", "insert", "replace", "duplicate"]))
        byte = data.draw(st.sampled_from(list(b'%@[](){},:="-.0123456789aefinx \n/\\\x00\xff')))
        if kind == "delete" and i < len(text):
            del text[i]
        elif kind == "insert":
            text.insert(i, byte)
        elif kind == "replace" and i < len(text):
            text[i] = byte
        else:
            j = data.draw(st.integers(i, min(len(text), i + 40)))
            text[i:i] = text[i:j]
    try:
        parse(bytes(text), "mutated.gdv")
    except IRError as e:
        assert e.loc.file == "mutated.gdv" and e.loc.line >= 1 and e.loc.col >= 1


def test_absurdly_nested_brackets(capsys, tmp_path) -> None:
    assert_check_rejects(capsys, tmp_path, "[" * 100_000, 1, 65, "nest deeper than 64")


def test_absurdly_nested_attribute_list(capsys, tmp_path) -> None:
    src = "func @main(%x: f32[2] {a = " + "[" * 100_000 + "0" + "]" * 100_000 + "}) -> () {"
    # '(' and '{' are still open there: the 65th open bracket is the 63rd '['.
    col = len("func @main(%x: f32[2] {a = ") + 63
    assert_check_rejects(capsys, tmp_path, src, 1, col, "nest deeper than 64")


def test_nesting_within_the_limit_is_fine(capsys, tmp_path) -> None:
    src = "func @main(%x: f32[2] {a = " + "[" * 60 + "]" * 60 + "}) -> () {\n  return\n}\n"
    code, _, err, _ = check_file(capsys, tmp_path, src)
    assert code == 0, err


def test_brackets_in_strings_and_comments_do_not_nest(capsys, tmp_path) -> None:
    src = (
        "// " + "[" * 1000 + "\n"
        'func @main(%x: f32[2] {s = "' + "(" * 1000 + '\\"{{"}) -> () {\n  return\n}\n'
    )
    code, _, err, _ = check_file(capsys, tmp_path, src)
    assert code == 0, err


def test_very_long_line_comment_is_fine(capsys, tmp_path) -> None:
    src = OK_PROGRAM + "// " + "x" * 20_000_000 + "\n"
    code, _, err, _ = check_file(capsys, tmp_path, src)
    assert code == 0, err


def test_very_long_line(capsys, tmp_path) -> None:
    src = OK_PROGRAM + "x" * 20_000_000 + "\n"
    msg = assert_check_rejects(capsys, tmp_path, src, 5, 1, "unexpected", "expected 'func'")
    assert len(msg) < 200


def test_input_over_the_size_limit(capsys, tmp_path) -> None:
    from gdv.ir.parser import MAX_SOURCE_BYTES

    src = OK_PROGRAM + "//" + " " * (MAX_SOURCE_BYTES - len(OK_PROGRAM))
    assert_check_rejects(capsys, tmp_path, src, 1, 1, "larger than the limit", "bytes")


def test_very_long_name(capsys, tmp_path) -> None:
    src = "func @main(%" + "a" * 10_000_000 + ": f32[2]) -> () {\n  return\n}\n"
    msg = assert_check_rejects(
        capsys, tmp_path, src, 1, 12, "is 10000000 characters", "more than 128"
    )
    assert len(msg) < 200


@pytest.mark.parametrize("sigil, col", [("%", 12), ("@", 6)])
def test_name_over_128_characters(capsys, tmp_path, sigil: str, col: int) -> None:
    name = "n" * 129
    if sigil == "%":
        src = f"func @main(%{name}: f32[2]) -> () {{\n  return\n}}\n"
    else:
        src = f"func @{name}() -> () {{\n  return\n}}\n"
    assert_check_rejects(capsys, tmp_path, src, 1, col, "is 129 characters", "more than 128")


def test_name_of_128_characters_is_fine(capsys, tmp_path) -> None:
    name = "n" * 128
    src = f"func @{name}(%{name}: f32[2]) -> f32[2] {{\n  return %{name}\n}}\n"
    code, _, err, _ = check_file(capsys, tmp_path, src)
    assert code == 0, err


def test_integer_literal_with_10000_digits(capsys, tmp_path) -> None:
    digits = "1" * 10_000
    src = f"func @main(%x: f32[{digits}]) -> () {{\n  return\n}}\n"
    assert_check_rejects(capsys, tmp_path, src, 1, 20, "more than 4000 digits")
    src = f"func @main(%x: f32[2] {{big = -{digits}}}) -> () {{\n  return\n}}\n"
    assert_check_rejects(capsys, tmp_path, src, 1, 30, "more than 4000 digits")


def test_unterminated_string(capsys, tmp_path) -> None:
    src = 'func @main(%x: f32[2] {note = "abc}) -> () {\n  return\n}\n'
    assert_check_rejects(capsys, tmp_path, src, 1, 31, "unterminated string")


def test_ansi_escape_in_a_name_is_escaped(capsys, tmp_path) -> None:
    src = "func @main(%x\x1b[31m: f32[2]) -> () {\n  return\n}\n"
    msg = assert_check_rejects(capsys, tmp_path, src, 1, 14, "unexpected character")
    assert "\\x1b" in msg


def test_ansi_escape_in_a_string_is_escaped(capsys, tmp_path) -> None:
    src = (
        'func @main(%x: f32[2]) -> i1[2] {\n  %y = cmp(%x, %x) {dir = "\\u001b[2J\\u0007"} : i1[2]'
        "\n  return %y\n}\n"
    )
    msg = assert_check_rejects(capsys, tmp_path, src, 2, 21, "attribute 'dir' of cmp")
    assert "\\x1b[2J\\x07" in msg


def test_raw_control_character_in_a_string(capsys, tmp_path) -> None:
    src = 'func @main(%x: f32[2] {note = "a\x1b[31mb"}) -> () {\n  return\n}\n'
    assert_check_rejects(capsys, tmp_path, src, 1, 31, "invalid string literal")


def test_carriage_return_and_bell_are_escaped(capsys, tmp_path) -> None:
    src = "func @main(%x: f32[2]) -> () {\n  \x07return\n}\n"
    msg = assert_check_rejects(capsys, tmp_path, src, 2, 3, "unexpected character")
    assert "\\x07" in msg


def test_missing_file(capsys, tmp_path) -> None:
    path = tmp_path / "nope.gdv"
    code, out, err = gdv_main(capsys, "check", path)
    assert code == 3 and out == ""
    assert_input_error(err, path, 1, 1, "cannot read", "No such file")


def test_directory_instead_of_file(capsys, tmp_path) -> None:
    code, out, err = gdv_main(capsys, "check", tmp_path)
    assert code == 3 and out == ""
    assert_input_error(err, tmp_path, 1, 1, "cannot read", "directory")


def test_unknown_dtype(capsys, tmp_path) -> None:
    src = "func @main(%x: f33[2]) -> () {\n  return\n}\n"
    assert_check_rejects(capsys, tmp_path, src, 1, 16, "unknown dtype 'f33'", "f32", "bf16")


def test_negative_dim(capsys, tmp_path) -> None:
    src = "func @main(%x: f32[2,-1]) -> () {\n  return\n}\n"
    assert_check_rejects(capsys, tmp_path, src, 1, 22, "dimension -1 is negative")


def test_verifier_errors_reach_the_cli(capsys, tmp_path) -> None:
    src = OK_PROGRAM.replace("neg(%x) : f32[2]", "neg(%x) : f32[3]")
    assert_check_rejects(capsys, tmp_path, src, 2, 18, "written f32[3]", "gives f32[2]")


def test_check_from_stdin(capsys, monkeypatch) -> None:
    import io

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"func @main(")))
    code, _, err = gdv_main(capsys, "check", "-")
    assert code == 3
    assert_input_error(err, "<stdin>", 1, 12, "unexpected end of input")


# Through a real process: exit status 3 and no traceback, for each class at once.
BAD_INPUTS = {
    "empty": b"",
    "binary": b"\x00\xff\xfe\x01",
    "truncated": OK_PROGRAM[:40].encode(),
    "nested": b"[" * 100_000,
    "digits": b"func @main(%x: f32[" + b"9" * 10_000 + b"]) -> () {\n  return\n}\n",
    "verifier": OK_PROGRAM.replace("neg(%x)", "neg(%q)").encode(),
}


def _gdv_process(*argv: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "GDV_DEBUG"}
    return subprocess.run(
        [sys.executable, "-m", "gdv", *argv],
        input=stdin,
        capture_output=True,
        timeout=120,
        env=env,
        cwd=ROOT,
    )


def test_bad_inputs_in_a_process(tmp_path) -> None:
    paths = []
    for name, data in BAD_INPUTS.items():
        paths.append(tmp_path / f"{name}.gdv")
        paths[-1].write_bytes(data)
    # One real process (its own stderr, no pytest capture) checks every file in turn.
    script = (
        "import sys\nfrom gdv.cli import main\n"
        "codes = [main(['check', p]) for p in sys.argv[1:]]\nprint(codes)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", script, *map(str, paths)], capture_output=True, timeout=120
    )
    assert r.stdout.decode().strip() == str([3] * len(paths)), r.stderr
    err = r.stderr.decode()
    assert "Traceback" not in err
    assert len(err.splitlines()) == len(paths)
    for path, line in zip(paths, err.splitlines(), strict=True):
        assert line.startswith(f"{path}:"), line
        assert ERROR_LINE.match(line), line


def test_exit_status_through_the_console_entry() -> None:
    r = _gdv_process("check", "/nonexistent/dir/x.gdv")
    assert r.returncode == 3
    assert b"Traceback" not in r.stderr
    assert r.stderr.decode().startswith("/nonexistent/dir/x.gdv:1:1: error: cannot read")
    r = _gdv_process("check", "-", stdin=b"\xff")
    assert r.returncode == 3
    assert r.stderr.decode().strip() == (
        "<stdin>:1:1: error: input is not UTF-8 text: byte 0xff cannot start or continue a "
        "character"
    )


# --- usage ---------------------------------------------------------------------------------


def test_version(capsys) -> None:
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"gdv {gdv.__version__}"


def test_no_command_and_unknown_command(capsys) -> None:
    assert main([]) == 3
    with pytest.raises(SystemExit) as e:
        main(["frobnicate"])
    assert e.value.code == 3
    assert "invalid choice" in capsys.readouterr().err


# --- gdv fmt -------------------------------------------------------------------------------


def test_examples_are_listed_in_their_readme() -> None:
    readme = (ROOT / "examples" / "README.md").read_text()
    assert len(EXAMPLES) >= 5
    assert [p.name for p in EXAMPLES if f"`{p.name}`" not in readme] == []


@pytest.mark.parametrize("example", EXAMPLES, ids=EXAMPLE_IDS)
def test_examples_check(capsys, example: Path) -> None:
    code, out, err = gdv_main(capsys, "check", example)
    assert (code, err) == (0, "")
    assert out.startswith(f"{example}: ok (1 function(s), ")


@pytest.mark.parametrize("example", EXAMPLES, ids=EXAMPLE_IDS)
def test_fmt_is_canonical(capsys, tmp_path, example: Path) -> None:
    code, once, err = gdv_main(capsys, "fmt", example)
    assert (code, err) == (0, "")
    formatted = tmp_path / "once.gdv"
    formatted.write_text(once)
    code, twice, err = gdv_main(capsys, "fmt", formatted)
    assert (code, err) == (0, "")
    assert twice == once
    assert parse(once) == parse(example.read_text())
    assert "//" not in once and "\n\n" not in once


def test_fmt_rejects_bad_input(capsys, tmp_path) -> None:
    path = tmp_path / "bad.gdv"
    path.write_text("func @main(")
    code, out, err = gdv_main(capsys, "fmt", path)
    assert (code, out) == (3, "")
    assert_input_error(err, path, 1, 12, "unexpected end of input")


# --- gdv run -------------------------------------------------------------------------------


def _load_npz(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


@pytest.mark.parametrize("example", EXAMPLES, ids=EXAMPLE_IDS)
def test_run_each_example(capsys, tmp_path, example: Path) -> None:
    out_path = tmp_path / "out.npz"
    code, out, err = gdv_main(capsys, "run", example, "--seed", "3", "--output", out_path)
    assert (code, err) == (0, ""), err
    assert out == f"wrote 1 output(s) to {out_path}\n"
    outputs = _load_npz(out_path)
    fn = parse(example.read_text()).entry
    assert sorted(outputs) == [f"out{i}" for i in range(len(fn.results))]
    for i, t in enumerate(fn.results):
        assert outputs[f"out{i}"].shape == t.shape
        assert outputs[f"out{i}"].dtype == t.dtype.np
        assert np.isfinite(outputs[f"out{i}"]).all()
    # The same as the API on the same seeded inputs.
    module = parse(example.read_text())
    expected = reference.run(module, reference.random_inputs(module.entry, 3))
    np.testing.assert_array_equal(outputs["out0"], expected[0])


def test_run_prints_outputs(capsys) -> None:
    code, out, err = gdv_main(capsys, "run", ROOT / "examples" / "mlp.gdv")
    assert (code, err) == (0, "")
    assert out.startswith("out0: f32[8,10]\n[[")


def test_run_seed_is_deterministic(capsys, tmp_path) -> None:
    mlp = ROOT / "examples" / "mlp.gdv"
    results = []
    for seed, name in (("5", "a"), ("5", "b"), ("6", "c")):
        path = tmp_path / f"{name}.npz"
        assert gdv_main(capsys, "run", mlp, "--seed", seed, "--output", path)[0] == 0
        results.append(_load_npz(path)["out0"])
    assert results[0].tobytes() == results[1].tobytes()
    assert results[0].tobytes() != results[2].tobytes()


TWO_OUT = (
    "func @main(%x: f32[3] {range = [1.0, 2.0]}, %n: i32[2]) -> (f32[3], i32[2]) {\n"
    "  %y = neg(%x) : f32[3]\n"
    "  %m = mul(%n, %n) : i32[2]\n"
    "  return %y, %m\n}\n"
)


def test_run_inputs_merge_later_file_wins(capsys, tmp_path) -> None:
    prog = tmp_path / "two.gdv"
    prog.write_text(TWO_OUT)
    first, second = tmp_path / "first.npz", tmp_path / "second.npz"
    np.savez(first, x=np.array([1, 2, 3], np.float32), n=np.array([3, 4], np.int32))
    np.savez(second, x=np.array([7, 8, 9], np.float32))
    out = tmp_path / "out.npz"
    code, _, err = gdv_main(
        capsys, "run", prog, "--inputs", first, "--inputs", second, "--output", out
    )
    assert (code, err) == (0, "")
    got = _load_npz(out)
    assert sorted(got) == ["out0", "out1"]
    np.testing.assert_array_equal(got["out0"], np.array([-7, -8, -9], np.float32))
    np.testing.assert_array_equal(got["out1"], np.array([9, 16], np.int32))
    # The other order: the first file's x wins now.
    code, _, err = gdv_main(
        capsys, "run", prog, "--inputs", second, "--inputs", first, "--output", out
    )
    assert (code, err) == (0, "")
    np.testing.assert_array_equal(_load_npz(out)["out0"], np.array([-1, -2, -3], np.float32))


def test_run_missing_inputs_are_random_within_range(capsys, tmp_path) -> None:
    prog = tmp_path / "two.gdv"
    prog.write_text(TWO_OUT)
    given = tmp_path / "n.npz"
    np.savez(given, n=np.array([1, -2], np.int32))
    out = tmp_path / "out.npz"
    code, _, err = gdv_main(capsys, "run", prog, "--inputs", given, "--output", out)
    assert (code, err) == (0, "")
    y = _load_npz(out)["out0"]
    assert ((-y >= 1.0) & (-y <= 2.0)).all()
    np.testing.assert_array_equal(_load_npz(out)["out1"], np.array([1, 4], np.int32))


def test_run_unknown_input_key(capsys, tmp_path) -> None:
    prog = tmp_path / "two.gdv"
    prog.write_text(TWO_OUT)
    good, bad = tmp_path / "good.npz", tmp_path / "bad.npz"
    np.savez(bad, z=np.zeros(3, np.float32))
    np.savez(good, x=np.zeros(3, np.float32))
    code, out, err = gdv_main(capsys, "run", prog, "--inputs", bad, "--inputs", good)
    assert (code, out) == (3, "")
    assert_input_error(err, bad, 1, 1, "input 'z' names no parameter of @main", "x, n")


@pytest.mark.parametrize(
    "array, fragments",
    [
        (np.zeros(3, np.float64), ("input %x is f64[3]", "expected f32[3]")),
        (np.zeros((3, 1), np.float32), ("input %x is f32[3,1]", "expected f32[3]")),
        (np.zeros(4, np.float32), ("input %x is f32[4]", "expected f32[3]")),
    ],
)
def test_run_wrong_input_dtype_or_shape(capsys, tmp_path, array, fragments) -> None:
    prog = tmp_path / "two.gdv"
    prog.write_text(TWO_OUT)
    given = tmp_path / "x.npz"
    np.savez(given, x=array)
    code, out, err = gdv_main(capsys, "run", prog, "--inputs", given)
    assert (code, out) == (3, "")
    assert_input_error(err, prog, 1, 12, *fragments)


@pytest.mark.parametrize(
    "content",
    [b"PK\x03\x04 not really a zip", b"", b"\x93NUMPY garbage"],
    ids=["zip", "empty", "npy"],
)
def test_run_corrupt_npz(capsys, tmp_path, content: bytes) -> None:
    bad = tmp_path / "bad.npz"
    bad.write_bytes(content)
    code, out, err = gdv_main(capsys, "run", ROOT / "examples" / "mlp.gdv", "--inputs", bad)
    assert (code, out) == (3, "")
    assert_input_error(err, bad, 1, 1, "cannot read inputs")


def test_run_npz_with_pickled_objects_is_refused(capsys, tmp_path) -> None:
    bad = tmp_path / "pickled.npz"
    np.savez(bad, x=np.array([{"a": 1}, None], dtype=object))
    code, out, err = gdv_main(capsys, "run", ROOT / "examples" / "mlp.gdv", "--inputs", bad)
    assert (code, out) == (3, "")
    assert_input_error(err, bad, 1, 1, "cannot read inputs")


def test_run_missing_npz(capsys, tmp_path) -> None:
    missing = tmp_path / "missing.npz"
    code, _, err = gdv_main(capsys, "run", ROOT / "examples" / "mlp.gdv", "--inputs", missing)
    assert code == 3
    assert_input_error(err, missing, 1, 1, "no such file")


def test_run_bogus_target(capsys) -> None:
    code, out, err = gdv_main(capsys, "run", ROOT / "examples" / "mlp.gdv", "--target", "bogus")
    assert (code, out) == (3, "")
    assert_input_error(err, "<command line>", 1, 1, "unknown target 'bogus'", "reference")


def test_run_bad_program(capsys, tmp_path) -> None:
    path = tmp_path / "bad.gdv"
    path.write_text(OK_PROGRAM.replace("f32[2] {", "f32[2] {\n  %z = sofmax(%x) : f32[2]"))
    code, out, err = gdv_main(capsys, "run", path)
    assert (code, out) == (3, "")
    assert_input_error(err, path, 2, 8, "unknown op 'sofmax'", "did you mean 'softmax'?")


def test_run_refuses_a_huge_program_up_front(capsys, tmp_path) -> None:
    path = tmp_path / "huge.gdv"
    path.write_text(
        "func @main(%x: f32[100000,100000,100]) -> f32[100000,100000,100] {\n"
        "  %y = neg(%x) : f32[100000,100000,100]\n  return %y\n}\n"
    )
    code, out, err = gdv_main(capsys, "run", path)
    assert (code, out) == (3, "")
    assert_input_error(err, path, 1, 12, "%x", "f32[100000,100000,100]", "4000000000000 bytes")


def test_run_refuses_a_huge_intermediate(capsys, tmp_path) -> None:
    path = tmp_path / "huge.gdv"
    path.write_text(
        "func @main(%x: f32[1]) -> f32[] {\n"
        "  %y = broadcast(%x) {dims = [0]} : f32[1000000000000]\n"
        "  %z = reduce_sum(%y) {axes = [0]} : f32[]\n  return %z\n}\n"
    )
    code, out, err = gdv_main(capsys, "run", path)
    assert (code, out) == (3, "")
    assert "Traceback" not in err and "internal error" not in err
    m = ERROR_LINE.match(err.strip())
    assert m and m["file"] == str(path) and "1000000000000" in m["msg"], err


def test_run_output_to_unwritable_place(capsys, tmp_path) -> None:
    target = tmp_path / "no" / "such" / "dir" / "out.npz"
    code, out, err = gdv_main(capsys, "run", ROOT / "examples" / "mlp.gdv", "--output", target)
    assert code == 3
    assert_input_error(err, target, 1, 1, "cannot write")


def test_run_bf16_outputs_feed_back_as_inputs(capsys, tmp_path) -> None:
    # np.savez keeps bf16 only as raw 2-byte voids; gdv run reads them back as bf16.
    prog = tmp_path / "bf.gdv"
    prog.write_text(
        "func @main(%x: bf16[3] {range = [1.0, 2.0]}) -> (bf16[3], i1[3]) {\n"
        "  %y = neg(%x) : bf16[3]\n"
        '  %c = cmp(%x, %y) {dir = "gt"} : i1[3]\n'
        "  return %y, %c\n}\n"
    )
    first, second = tmp_path / "first.npz", tmp_path / "second.npz"
    assert gdv_main(capsys, "run", prog, "--seed", "2", "--output", first)[0] == 0
    out = _load_npz(first)
    assert out["out0"].dtype.itemsize == 2 and out["out1"].dtype == np.bool_
    assert out["out1"].all()
    fed = tmp_path / "fed.npz"
    np.savez(fed, x=out["out0"])
    code, _, err = gdv_main(capsys, "run", prog, "--inputs", fed, "--output", second)
    assert (code, err) == (0, "")
    again = _load_npz(second)
    y = out["out0"].view(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(again["out0"].view(ml_dtypes.bfloat16), -y)
    assert not again["out1"].any()
