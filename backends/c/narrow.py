"""Exact conversions between double (and int64_t, uint64_t) and the f16/bf16 bit patterns.
Those with double are branch-free, so that loops over f16 and bf16 tensors vectorise (`omp simd`):
integer selects and integer arithmetic on the double's bits, no data-dependent branch and no
float-to-integer conversion.

- `gdv_round_<f16|bf16>(double x)`: the bits of x rounded once to nearest-even from its exact
  value. Normal results: the double's bits are rounded at the narrow format's last place (a
  carry into the exponent is the right result, up to infinity) and rebiased. Subnormal results:
  |x| is scaled (exactly) to units of the least subnormal and rounded to an integer by adding
  2^52, whose low bits are then that integer; 2^(1-emax) rounds up to the least normal's bits.
  Overflow gives infinity (ties at the largest finite value go to the even neighbour, infinity),
  infinities and signed zeros are kept, any NaN becomes the quiet NaN of its sign.
- `gdv_widen_<f16|bf16>(uint16_t h)`: the double of the bits, exactly (NaN stays NaN, sign
  kept): bf16 is the top half of an f32; f16 subnormals are m * 2^-24, by the 2^52 trick in
  reverse.

Tested bit for bit against the reference's rounding (`gdv.ir.numerics.float_to_float`) on every
f16 and bf16 value, the midpoints between neighbours and one double ulp either side of them,
and random doubles across every binade (tests/backends/c/test_narrow.py).
"""

from __future__ import annotations

from gdv.ir.dtypes import DType

FORMATS: dict[DType, tuple[int, int]] = {DType.F16: (10, 15), DType.BF16: (7, 127)}
"""Per narrow dtype: stored significand bits t and emax."""

_TWO52 = "UINT64_C(0x4330000000000000)"  # the bits of 2^52


def _round(dtype: DType, suffix: str) -> str:
    t, emax = FORMATS[dtype]
    shift = 52 - t
    rebias = (1023 - emax) << t
    min_normal = (1023 + 1 - emax) << 52
    scale = emax - 1 + t
    inf = (2 * emax + 1) << t
    qnan = inf | (1 << (t - 1))
    return f"""static inline uint16_t gdv_round_{suffix}(double x)
{{
  uint64_t u;
  memcpy(&u, &x, sizeof u);
  const uint64_t sign = (u >> 48) & 0x8000u;
  const uint64_t a = u & UINT64_C(0x7fffffffffffffff);
  /* normal: round at the last place, to nearest-even; rebias (unused, and harmless, below) */
  const uint64_t rn = (a + UINT64_C({(1 << (shift - 1)) - 1}) + ((a >> {shift}) & 1u)) >> {shift};
  const uint64_t nb = rn - UINT64_C({rebias});
  /* subnormal: |x| in units of the least subnormal (exact), plus 2^52 rounds it to an integer */
  const uint64_t ab = a < UINT64_C({min_normal:#x}) ? a : 0;
  double ax;
  memcpy(&ax, &ab, sizeof ax);
  const double tz = ax * 0x1p{scale} + 0x1p52;
  uint64_t tb;
  memcpy(&tb, &tz, sizeof tb);
  const uint64_t sb = tb - {_TWO52};
  uint64_t r = a < UINT64_C({min_normal:#x}) ? sb : (nb < {inf:#x}u ? nb : {inf:#x}u);
  r = a > UINT64_C(0x7ff0000000000000) ? {qnan:#x}u : r;
  return (uint16_t)(sign | r);
}}
"""


WIDEN = """static inline double gdv_widen_bf16(uint16_t h)
{
  const uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return (double)f;
}
static inline double gdv_widen_f16(uint16_t h)
{
  const uint64_t s = (uint64_t)(h >> 15) << 63;
  const uint64_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  /* subnormal or zero: m * 2^-24, exactly ((2^52 + m) - 2^52 is m) */
  const uint64_t tb = UINT64_C(0x4330000000000000) | m;
  double tz;
  memcpy(&tz, &tb, sizeof tz);
  const double sub = (tz - 0x1p52) * 0x1p-24;
  uint64_t subb;
  memcpy(&subb, &sub, sizeof subb);
  const uint64_t normal = ((e + 1008) << 52) | (m << 42);
  const uint64_t special = UINT64_C(0x7ff0000000000000) | (m << 42);  /* inf, or NaN */
  const uint64_t u = s | (e == 0 ? subb : (e == 31 ? special : normal));
  double d;
  memcpy(&d, &u, sizeof d);
  return d;
}
"""


def _from_int(dtype: DType, suffix: str) -> str:
    """`gdv_i2<suffix>(int64_t v)` and `gdv_u2<suffix>(uint64_t v)`: v rounded once to
    nearest-even (as the reference's round-to-odd path gives), overflow to infinity, from its
    sign and magnitude (`gdv_m2<suffix>`). Integer conversions are rare in kernels: these keep
    their loop and branches."""
    t, emax = FORMATS[dtype]
    inf = (2 * emax + 1) << t
    return f"""static inline uint16_t gdv_m2{suffix}(uint16_t sign, uint64_t a)
{{
  if (a == 0) return 0;
  int e = 63;
  while (!(a >> e)) e--;
  if (e > {emax}) return (uint16_t)(sign | {inf:#06x}u);
  const int shift = e - {t};
  uint64_t kept;
  if (shift <= 0) {{
    kept = a << -shift;
  }} else {{
    kept = a >> shift;
    const uint64_t rem = a & ((UINT64_C(1) << shift) - 1);
    const uint64_t half = UINT64_C(1) << (shift - 1);
    if (rem > half || (rem == half && (kept & 1u))) kept++;
  }}
  return (uint16_t)(sign | (((uint64_t)(e - ({1 - emax})) << {t}) + kept));
}}
static inline uint16_t gdv_i2{suffix}(int64_t v)
{{
  return gdv_m2{suffix}(v < 0 ? 0x8000u : 0u, v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v);
}}
static inline uint16_t gdv_u2{suffix}(uint64_t v)
{{
  return gdv_m2{suffix}(0u, v);
}}
"""


def helpers() -> str:
    """The C of gdv_widen_*, gdv_round_*, gdv_i2* and gdv_u2* for f16 and bf16."""
    out = [WIDEN]
    for dtype, suffix in ((DType.F16, "f16"), (DType.BF16, "bf16")):
        out += [_round(dtype, suffix), _from_int(dtype, suffix)]
    return "".join(out)
