"""Exact conversions between double and the float8 bit patterns (IR_SPEC.md section 8).

- `gdv_dec_<s>(uint8_t b)`: the double of code b, read from a 256-entry table (16 for the 4-bit
  f4e2m1fn, whose code is the byte's low bits) of exact hex-float literals written from the
  format's definition (`Float8Format.value`): NaN codes give NAN, f8e5m2's infinity codes
  +-INFINITY.
- `gdv_enc_<s>(double x, int saturate)`: x rounded once to nearest-even. Positive codes
  0 .. max_code are the finite magnitudes in increasing order, so a binary search finds the
  largest code whose value is <= |x|; the next code up (or, above max, the value max + one ulp
  of the top binade, which the format lacks) is the other neighbour; |x| beyond their midpoint
  goes up, at the midpoint to the even code (its last mantissa bit is 0). saturate clips |x| to
  max first (infinities too, as ONNX's reference does); otherwise a magnitude that rounds above
  max is inf (f8e5m2) or NaN. Every NaN gives the format's NaN code; fnuz formats have no -0.
  f4e2m1fn has no NaN and no infinity: it always clips, and a NaN gives +0.

Tested bit for bit against the reference (`gdv.ir.numerics.float8_encode`, ml_dtypes) on every
code and on f32 edge values and random values (tests/validate/test_float8.py).
"""

from __future__ import annotations

import math

from gdv.ir.dtypes import FLOAT8_DTYPES, DType


def _literal(code: int, dtype: DType) -> str:
    fmt = dtype.float8
    if fmt.is_nan_code(code):
        return "NAN"
    if fmt.is_inf_code(code):
        return "-INFINITY" if code & fmt.sign_bit else "INFINITY"
    v = fmt.value(code)
    if v == 0 and code & fmt.sign_bit:
        return "-0.0"
    return float(v).hex()  # exact: a float8 value has at most 4 significant bits


def _helpers(dtype: DType) -> str:
    fmt = dtype.float8
    s = dtype.value
    table = ", ".join(_literal(c, dtype) for c in range(fmt.codes))
    sign = f"{fmt.sign_bit:#04x}u"
    nan = "0x00u" if fmt.nan_code is None else f"{fmt.nan_code:#04x}u"  # no NaN (f4): +0
    top = float(fmt.max)
    # max + one ulp of the top binade: the neighbour above max that the format does not have.
    beyond = top + 2.0 ** (math.floor(math.log2(top)) - fmt.mantissa_bits)
    overflow = (
        f"(uint8_t)((neg ? {sign} : 0u) | {fmt.max_code + 1:#04x}u)"
        if fmt.has_inf
        else f"(uint8_t){nan}"
    )
    saturate = "1" if fmt.nan_code is None else "saturate"  # no NaN, no inf: always clips
    zero = "if (mag == 0) return 0;\n  " if fmt.unsigned_zero else ""
    return f"""static const double gdv_tab_{s}[{fmt.codes}] = {{{table}}};
static inline double gdv_dec_{s}(uint8_t b)
{{
  return gdv_tab_{s}[b & {fmt.codes - 1}u];
}}
static inline uint8_t gdv_enc_{s}(double x, int saturate)
{{
  (void)saturate;
  if (isnan(x)) return (uint8_t){nan};
  const int neg = signbit(x) != 0;
  double a = fabs(x);
  if ({saturate} && a > {top.hex()}) a = {top.hex()};
  int lo = 0, hi = {fmt.max_code + 1};
  while (hi - lo > 1) {{
    const int mid = (lo + hi) / 2;
    if (gdv_tab_{s}[mid] <= a) lo = mid; else hi = mid;
  }}
  int mag = lo;
  if (gdv_tab_{s}[lo] != a) {{
    const double up = lo < {fmt.max_code} ? gdv_tab_{s}[lo + 1] : {beyond.hex()};
    const double half = (gdv_tab_{s}[lo] + up) * 0.5;  /* exact: few significant bits */
    if (a > half || (a == half && (lo & 1))) mag = lo + 1;
  }}
  if (mag > {fmt.max_code}) return {overflow};
  {zero}return (uint8_t)(neg ? (mag | {sign}) : mag);
}}
"""


HELPERS: dict[str, str] = {f"gdv_f8_{d.value}": _helpers(d) for d in FLOAT8_DTYPES}
"""Per float8 dtype, the helper block `decode` and `encode` call."""


def helper(dtype: DType) -> str:
    return f"gdv_f8_{dtype.value}"


def decode(expr: str, dtype: DType) -> str:
    """C for the double value of the float8 code `expr` (exact)."""
    return f"gdv_dec_{dtype.value}((uint8_t)({expr}))"


def encode(expr: str, dtype: DType, saturate: bool) -> str:
    """C for the float8 code of the double `expr`, rounded once."""
    return f"gdv_enc_{dtype.value}({expr}, {1 if saturate else 0})"
