"""gdv's own double-precision exp, tanh and erf for the C target: branch-free C that GCC
vectorises inside `omp simd` loops (libm calls do not).

Each function is `static inline` and `#pragma omp declare simd notinbranch`: no calls (fabs and
copysign are bit operations, fma an instruction where the target has FMA), no data-dependent
branches, integer work on the double's bits through memcpy. Selects are made on the bits
(`gdv_sel`) and exp clamps its argument with integer min/max: with -ftrapping-math GCC may keep
a float select or comparison as a branch, and the loop would then not vectorise.
`GDV_FMA(a, b, c)` is an explicit fused multiply-add (one rounding) where the target has FMA,
else a separate multiply and add; the bounds below hold either way.

Accuracy, measured against mpmath (tests/backends/c/test_transcendentals.py and ~180 000
random points): exp, tanh and erf within 1 ulp of double (max seen 0.93, 0.98, 0.90 ulp);
edges exact (NaN in, NaN out; exp overflows to +inf, underflows through the subnormals to +0;
tanh and erf are odd, +-1 at +-inf, -0 at -0). They are used where the result dtype is f32, f16
or bf16: the double result is rounded once to the dtype, which then gives the correctly rounded
narrow value nearly always (every f16 and bf16 input, and all f32 sweeps tested) and never one
more than 1 narrow ulp away. f64 results keep libm: these are not correctly rounded in double,
and numpy's and the C library's agree more often.

How the coefficients were obtained (`mpmath.chebyfit` at 60 digits, near-minimax, each fit's
error far below a double ulp of the result; rounded to the nearest double):
- exp: x = k ln2 + r, |r| <= ln2/2; e^r = 1 + (r + r^2 Q(r)), Q fitted with 11 coefficients
  on |r| <= 1.01 ln2/2; ln2 = LN2_HI + LN2_LO with LN2_HI's last 11 bits zero, so k*LN2_HI is
  exact for |k| < 2048 and x - k*LN2_HI is exact. 2^k is applied as two exact factors, so
  results overflow to +inf and underflow through the subnormals with one rounding.
- tanh: |x| < 0.9: |x| + |x|^3 P(x^2), P fitted with 16 coefficients on x^2 <= 0.91^2;
  above, 1 - 2w / (1 + w) with w = exp(-2|x|), 1 + w carried as an exact sum h + l (below 0.9
  the final subtraction would lose more). The sign is copied from x (tanh(-0) = -0).
- erf: |x| < 0.9: |x| + |x| R(x^2), R = erf(x)/x - 1 fitted with 12 coefficients on
  x^2 <= 1.01; 0.9 <= |x|: 1 - erfc, erfc(a) = exp(-a^2) g(a) with g = erfc(a) e^(a^2) fitted
  with 17, 16 and 16 coefficients in a - mid on [0.9, 2], [2, 3.5], [3.5, 6] (each widened by
  0.01; the shorter ones padded with a zero), the piece's coefficients chosen by
  selects; a^2 = hi + lo exactly (Dekker's split), exp(-a^2) = e - e lo with e = exp(-hi);
  |x| >= 6 gives 1.
"""

from __future__ import annotations

LN2_HI = "0x1.62e42fefa3800p-1"
LN2_LO = "0x1.ef35793c76730p-45"
INV_LN2 = "0x1.71547652b82fep+0"

EXP_Q = (
    "0x1.0000000000000p-1",
    "0x1.5555555555557p-3",
    "0x1.5555555555556p-5",
    "0x1.111111110ff87p-7",
    "0x1.6c16c16c16212p-10",
    "0x1.a01a01aca0134p-13",
    "0x1.a01a01a741b3cp-16",
    "0x1.71ddffef9e7b1p-19",
    "0x1.27e4da1a3bf04p-22",
    "0x1.af52906239de4p-26",
    "0x1.1f75aba0b1e2ep-29",
)
"""(e^r - 1 - r) / r^2 on |r| <= 1.01 ln2/2, lowest degree first."""

TANH_P = (
    "-0x1.5555555555555p-2",
    "0x1.1111111111109p-3",
    "-0x1.ba1ba1ba1ad32p-5",
    "0x1.664f48827f2c3p-6",
    "-0x1.226e35535b12ep-7",
    "0x1.d6d3ce9ff521ep-9",
    "-0x1.7da33d8ca1873p-10",
    "0x1.355655a194227p-11",
    "-0x1.f55e7304a3f30p-13",
    "0x1.95bab6dfcee1ep-14",
    "-0x1.45e9c92f44b02p-15",
    "0x1.fd0c676e0e356p-17",
    "-0x1.6f03bd1af381cp-18",
    "0x1.bb2784f26443ep-20",
    "-0x1.7cd428d81aeb7p-22",
    "0x1.4f14e8bcc9394p-25",
)
"""(tanh(x) - x) / x^3 as a polynomial in s = x^2, s <= 0.91^2."""

ERF_P = (
    "0x1.06eba8214db68p-3",
    "-0x1.812746b0379bcp-2",
    "0x1.ce2f21a040c8cp-4",
    "-0x1.b82ce311f795bp-6",
    "0x1.565bccf8af8fdp-8",
    "-0x1.c02db027dca37p-11",
    "0x1.f9a2b84fcf5ebp-14",
    "-0x1.f4ca25375e286p-17",
    "0x1.b97e2190ae633p-20",
    "-0x1.5bfbf04992d1bp-23",
    "0x1.d6c838ed4bdf0p-27",
    "-0x1.aaa86ebc345f1p-31",
)
"""erf(x) / x - 1 as a polynomial in s = x^2, s <= 1.01."""

ERFC_PIECES = (
    (
        "p0",
        "1.45",
        (
            "0x1.51e1555fa2e8dp-2",
            "-0x1.5f371f5d033cep-3",
            "0x1.4cff1424023ebp-4",
            "-0x1.24c7f97f3813bp-5",
            "0x1.e2eb969f1bd8ap-7",
            "-0x1.78b650f2331ddp-8",
            "0x1.17bd142d148adp-9",
            "-0x1.8d7d5644896c0p-11",
            "0x1.0f4c173d8ccdcp-12",
            "-0x1.64f9bbf7044bfp-14",
            "0x1.c60ede12b3766p-16",
            "-0x1.17db54dbd6720p-17",
            "0x1.4ef2480830d6ep-19",
            "-0x1.843d243a30f68p-21",
            "0x1.b8a3ce38dd6c3p-23",
            "-0x1.0d7a014b993adp-24",
            "0x1.224b250cd94d7p-26",
        ),
    ),
    (
        "p1",
        "2.75",
        (
            "0x1.8c9eb68ff27d5p-3",
            "-0x1.0305781330098p-4",
            "0x1.43b98bac84070p-6",
            "-0x1.84e9ab30e71d0p-8",
            "0x1.c2c72fd5f9f66p-10",
            "-0x1.f99e41ebae4bdp-12",
            "0x1.131bb1e35927ap-13",
            "-0x1.2312b2c8f8424p-15",
            "0x1.2bfb23e54a09ap-17",
            "-0x1.2da2fa7f219e7p-19",
            "0x1.2863a4567ecf9p-21",
            "-0x1.1cda75cd999d0p-23",
            "0x1.0a7b838148b88p-25",
            "-0x1.ec076f902d7a5p-28",
            "0x1.f597c94ee3875p-30",
            "-0x1.bc603f6850261p-32",
            "0x0p+0",
        ),
    ),
    (
        None,
        "4.75",
        (
            "0x1.dc603a3e77e8cp-4",
            "-0x1.81149bc4a1042p-6",
            "0x1.317c144f8fe4cp-8",
            "-0x1.dc1af883a935ep-11",
            "0x1.6cc10c0e7d926p-13",
            "-0x1.12f17436d747bp-15",
            "0x1.9818c570518f5p-18",
            "-0x1.2a625d3aa8c3fp-20",
            "0x1.ae1e322bd02e9p-23",
            "-0x1.31c2ec54e87a1p-25",
            "0x1.ad391b6b2c348p-28",
            "-0x1.293c69e9ef062p-30",
            "0x1.909c125bb9678p-33",
            "-0x1.0ee94c30b02f0p-35",
            "0x1.b44f34f42c656p-38",
            "-0x1.1f15eb01f3e3fp-40",
            "0x0p+0",
        ),
    ),
)
"""erfc(a) e^(a^2) on [0.9, 2], [2, 3.5], [3.5, 6]: (the C flag "a is below the upper end",
None for the last; centre; coefficients in a - centre, lowest degree first). The flags are
computed in gdv_verf."""


def _horner(var: str, coeffs: tuple[str, ...] | list[str]) -> str:
    """C for the polynomial sum(coeffs[i] * var^i), Horner's order (GDV_FMA steps)."""
    expr = coeffs[-1]
    for c in reversed(coeffs[:-1]):
        expr = f"GDV_FMA({expr}, {var}, {c})"
    return expr


def _piece_coefficient(j: int) -> str:
    """C selecting coefficient j of the erfc piece that holds `a`."""
    expr = ERFC_PIECES[-1][2][j]
    for upper, _, coeffs in reversed(ERFC_PIECES[:-1]):
        expr = f"gdv_sel({upper}, {coeffs[j]}, {expr})"
    return expr


def _piece_centre() -> str:
    expr = ERFC_PIECES[-1][1]
    for upper, centre, _ in reversed(ERFC_PIECES[:-1]):
        expr = f"gdv_sel({upper}, {centre}, {expr})"
    return expr


_DECL = "#pragma omp declare simd notinbranch\n"

_FMA = (
    "/* a * b + c: fused (one rounding, fma inlined as an instruction) where the target has\n"
    "   FMA, else two roundings; the functions below are within their bounds either way */\n"
    "#if defined(__FMA__) || defined(__aarch64__)\n"
    "#define GDV_FMA(a, b, c) fma((a), (b), (c))\n"
    "#else\n"
    "#define GDV_FMA(a, b, c) ((a) * (b) + (c))\n"
    "#endif\n"
)

_SEL = (
    "static inline double gdv_sel(int c, double a, double b)\n"
    "{\n"
    "  /* c ? a : b on the bits: GCC (-ftrapping-math) may keep a float select as a branch */\n"
    "  uint64_t ua, ub;\n"
    "  memcpy(&ua, &a, sizeof ua);\n"
    "  memcpy(&ub, &b, sizeof ub);\n"
    "  const uint64_t u = ub ^ ((ua ^ ub) & ((uint64_t)0 - (uint64_t)(c != 0)));\n"
    "  double d;\n"
    "  memcpy(&d, &u, sizeof d);\n"
    "  return d;\n"
    "}\n"
)

_POW2 = (
    "static inline double gdv_pow2i(int64_t k)\n"
    "{\n"
    "  /* 2^k for -1022 <= k <= 1023, from its bits */\n"
    "  const uint64_t u = (uint64_t)(k + 1023) << 52;\n"
    "  double d;\n"
    "  memcpy(&d, &u, sizeof d);\n"
    "  return d;\n"
    "}\n"
)

_EXP = (
    _DECL + "static inline double gdv_vexp(double x)\n"
    "{\n"
    "  /* x = k ln2 + r, |r| <= ln2/2 (+ an ulp); beyond [-746, 710] the result is 0 or inf */\n"
    "  /* NaN found from the bits (a float comparison of a widened float may stay a branch) */\n"
    "  uint64_t ux;\n"
    "  memcpy(&ux, &x, sizeof ux);\n"
    "  const int nan = (ux & UINT64_C(0x7fffffffffffffff)) > UINT64_C(0x7ff0000000000000);\n"
    "  /* x clamped to [-746, 710] on its bits (integer min/max; a NaN becomes one of the ends):\n"
    "     as unsigned, the negatives beyond -746 are the largest; as signed, positives are */\n"
    "  const uint64_t lo = UINT64_C(0xc087500000000000);  /* -746 */\n"
    "  const uint64_t ulo = ux > lo ? lo : ux;\n"
    "  const int64_t slo = (int64_t)ulo;\n"
    "  const int64_t hi = INT64_C(0x4086300000000000);  /* 710 */\n"
    "  const int64_t sc = slo > hi ? hi : slo;\n"
    "  double xc;\n"
    "  memcpy(&xc, &sc, sizeof xc);\n"
    "  const double big = 0x1.8p52;  /* adding it rounds to an integer, held in the low bits */\n"
    f"  const double kb = GDV_FMA(xc, {INV_LN2}, big);\n"
    "  uint64_t kbits;\n"
    "  memcpy(&kbits, &kb, sizeof kbits);\n"
    "  const int64_t k = (int64_t)(kbits - UINT64_C(0x4338000000000000));\n"
    "  const double kd = kb - big;\n"
    f"  const double r = GDV_FMA(kd, -{LN2_LO}, GDV_FMA(kd, -{LN2_HI}, xc));\n"
    f"  const double q = {_horner('r', EXP_Q)};\n"
    "  const double p = 1.0 + GDV_FMA(r * r, q, r);\n"
    "  /* 2^k as two exact factors: p 2^k1 is normal, one rounding at the second */\n"
    "  const int64_t k1 = k >> 1;  /* floor(k / 2): GCC's >> on negatives is arithmetic */\n"
    "  const double y = (p * gdv_pow2i(k1)) * gdv_pow2i(k - k1);\n"
    "  return gdv_sel(nan, x + x, y);\n"
    "}\n"
)

_TANH = (
    _DECL + "static inline double gdv_vtanh(double x)\n"
    "{\n"
    "  const double ax = fabs(x);\n"
    "  const double s = x * x;\n"
    f"  const double small = GDV_FMA(ax * s, {_horner('s', TANH_P)}, ax);\n"
    "  /* 0.9 <= |x|: 1 - 2w / (1 + w), w = exp(-2|x|), 1 + w = h + l exactly */\n"
    "  const double w = gdv_vexp(-2.0 * ax);\n"
    "  const double h = 1.0 + w, l = (1.0 - h) + w;\n"
    "  const double c0 = (2.0 * w) / h;\n"
    "  /* 2w / (h + l) = c0 (1 - l/h + ...); l/h ~ 2^-53 needs only a rough 1/h = 2 - h */\n"
    "  const double t = 1.0 - c0;  /* t + ((1 - t) - c0) = 1 - c0 exactly (Fast2Sum) */\n"
    "  const double large = t + (((1.0 - t) - c0) + (c0 * l) * (2.0 - h));\n"
    "  return copysign(gdv_sel(ax < 0.9, small, large), x);\n"
    "}\n"
)

_ERF = (
    _DECL + "static inline double gdv_verf(double x)\n"
    "{\n"
    "  const double ax = fabs(x);\n"
    "  const double s = x * x;\n"
    f"  const double small = GDV_FMA(ax, {_horner('s', ERF_P)}, ax);\n"
    "  /* 0.9 <= |x|: 1 - exp(-a^2) g(a), a^2 = hi + lo exactly; a = 6 beyond (erf = 1) */\n"
    "  const double a = gdv_sel(ax > 6.0, 6.0, gdv_sel(ax < 0.9, 0.9, ax));\n"
    "  const int p0 = a < 2.0, p1 = a < 3.5;  /* the piece */\n"
    "  const double t = a - " + _piece_centre() + ";\n"
    "  double g = "
    + _piece_coefficient(len(ERFC_PIECES[0][2]) - 1)
    + ";\n"
    + "".join(
        f"  g = GDV_FMA(g, t, {_piece_coefficient(j)});\n"
        for j in reversed(range(len(ERFC_PIECES[0][2]) - 1))
    )
    + "  const double c = 134217729.0 * a;  /* Dekker's split: a = ah + al, 26 bits each */\n"
    "  const double ah = c - (c - a), al = a - ah;\n"
    "  const double hi = a * a;\n"
    "  const double lo = ((ah * ah - hi) + 2.0 * (ah * al)) + al * al;\n"
    "  const double e = gdv_vexp(-hi);\n"
    "  const double erfc = GDV_FMA(-e, lo, e) * g;\n"
    "  return copysign(gdv_sel(ax < 0.9, small, 1.0 - erfc), x);\n"
    "}\n"
)

HELPERS: dict[str, str] = {
    "gdv_fma": _FMA,
    "gdv_sel": _DECL + _SEL,
    "gdv_pow2i": _DECL + _POW2,
    "gdv_vexp": _EXP,
    "gdv_vtanh": _TANH,
    "gdv_verf": _ERF,
}
"""The C text of each function by name, a function after the ones it calls."""

FAST: dict[str, str] = {"exp": "gdv_vexp", "tanh": "gdv_vtanh", "erf": "gdv_verf"}
"""The op each function computes (double -> double)."""

REQUIRES: dict[str, list[str]] = {
    "gdv_vexp": ["gdv_fma", "gdv_sel", "gdv_pow2i", "gdv_vexp"],
    "gdv_vtanh": ["gdv_fma", "gdv_sel", "gdv_pow2i", "gdv_vexp", "gdv_vtanh"],
    "gdv_verf": ["gdv_fma", "gdv_sel", "gdv_pow2i", "gdv_vexp", "gdv_verf"],
}
"""The helpers a program calling the function needs (itself included)."""
