"""gdv's own exp, tanh, erf (and, in f32, sigmoid) for the C target: branch-free C that GCC
vectorises inside `omp simd` loops (libm calls do not), in double precision (gdv_vexp,
gdv_vtanh, gdv_verf: used for f16 and bf16 results, rounded once) and in f32 arithmetic
(gdv_vexpf, gdv_vtanhf, gdv_verff, gdv_vsigmoidf: used for f32 results, 16 lanes per AVX-512
register instead of 8).

Each function is `static inline` and `#pragma omp declare simd notinbranch`: no calls (fabs and
copysign are bit operations, fma an instruction where the target has FMA), no data-dependent
branches, integer work on the value's bits through memcpy. Selects are made on the bits
(`gdv_sel`, `gdv_self`) and exp clamps its argument with integer min/max: with -ftrapping-math
GCC may keep a float select or comparison as a branch, and the loop would then not vectorise.
`GDV_FMA(a, b, c)` (double) and `GDV_FMAF(a, b, c)` (float) are explicit fused multiply-adds
(one rounding) where the target has FMA, else a separate multiply and add; the bounds below
hold either way (for the f32 functions both ways were measured on every input).

Accuracy of the double functions, measured against mpmath
(tests/backends/c/test_transcendentals.py and ~180 000 random points): exp, tanh and erf within
1 ulp of double (max seen 0.93, 0.98, 0.90 ulp); edges exact (NaN in, NaN out; exp overflows
to +inf, underflows through the subnormals to +0; tanh and erf are odd, +-1 at +-inf, -0 at
-0). They are used where the result dtype is f16 or bf16: the double result is rounded once to
the dtype, which then gives the correctly rounded narrow value nearly always (on every f16 and
bf16 input tested) and never one more than 1 narrow ulp away. f64 results keep libm: these are
not correctly rounded in double, and numpy's and the C library's agree more often.

Accuracy of the f32 functions, measured on every one of the 2^32 f32 inputs against glibc's
double exp, tanh, erf and 1 / (1 + exp(-x)) in double (error in f32 ulps of that reference, which
is itself within 2^-28 f32 ulp of the exact value): `python benchmarks/vmath_ulp.py` (and
`--no-fma`; 1 to 2 minutes a function on 2 shared cores, Zen 4 with AVX-512, GCC 12.2):

  function  max error, FMA (input)         not correctly rounded   max error, no FMA (input)
  expf      0.7644 ulp (-87.71553)         2 459 771 (0.057%)      0.7644 ulp (same)
  tanhf     2.4188 ulp (0.0077671753)    167 925 106 (3.9%)       2.4245 ulp (0.031202640)
  erff      0.8350 ulp (0.89482313)       28 914 184 (0.67%)       0.9778 ulp (0.89737391)
  sigmoidf  2.4019 ulp (-4.1572938)      125 473 578 (2.9%)        2.4019 ulp (same)

(the not-correctly-rounded counts are out of all 2^32 inputs, with FMA; without it 2 593 954,
167 858 902, 125 520 900 and 125 515 213). F32_MAX_ULP records the larger of the two maxima.
For exp and erf every result is thus one of the two f32 neighbours of the exact value
(within 1 ulp of the correctly rounded one), and the correctly rounded one itself for all but
the counted inputs. tanh and sigmoid are the exceptions, by choice: tanh up to 2.42 ulp
(62 299 018 inputs, 1.5%, more than 1 ulp off), for a 1.6x faster GELU (below); sigmoid up to
2.41 ulp (8 336 455 inputs, 0.19%, more than 1 ulp off), for a 2.5x faster sigmoid (below).
NaN in, NaN out; exp overflows to +inf from 88.7228 (the exact threshold) and underflows
through the subnormals to +0; tanh and erf are odd (f(-x) = -f(x) bit for bit, -0 at -0) and
+-1 at +-inf; sigmoid is 0.5 at +-0, 1 at +inf, +0 at -inf, and subnormal (not 0) from -87.3
to -103.9, where 1 + e^-x would overflow. The f32 functions carry the error terms that
matter in float pairs (exp's r and 1 + r, e^x itself inside erf and sigmoid) and round once
at the end, which is why they stay within 1 ulp without any double arithmetic; tanh trades
the pairs for speed (GELU's kernel is bound by it).
erf's small-|x| polynomial is the least accurate part (x R(x^2) is up to an eighth of the
result there, and the inner Horner steps round; without FMA twice each).

How the double functions' coefficients were obtained (`mpmath.chebyfit` at 60 digits,
near-minimax, each fit's error far below a double ulp of the result; rounded to the nearest
double):
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

How the f32 functions are built (each coefficient table fitted with mpmath at 40 digits:
least squares on Chebyshev nodes weighted so that the error minimised is the one the
polynomial makes in the function's result, relative to that result (near-minimax); the
coefficients rounded to f32 lowest degree first, the higher ones refitted after each rounding
so that they absorb its error; `python benchmarks/vmath_ulp.py --fit` recomputes them and the
fits' errors, relative to the result, quoted here):
- expf: x clamped to [-104, 89] on its bits; k = round(x / ln2) by adding 1.5 2^23;
  ln2 = LN2F_HI + LN2F_LO with LN2F_HI's 15 bits, so k*LN2F_HI is exact (|k| <= 150) and so is
  x - k*LN2F_HI (Sterbenz), computed by one FMA (the same value: no rounding either way, and
  one vector instruction fewer in exp, tanh, erf and sigmoid; 3-4% faster alone, e.g. exp
  0.402 to 0.388 ns an element, erf 1.29 to 1.26, the same bits on all 2^32 inputs);
  r + rl = x - k ln2 (Fast2Sum); e^r = 1 + r + r^2 Q(r) + rl with
  Q fitted with 6 coefficients on |r| <= 1.01 ln2/2 (2^-32.8), 1 + r carried exactly as a
  pair and the sum rounded once to p (p + pl exact); 2^k applied as two exact factors (p 2^k1
  normal, one rounding at 2^k2: overflow gives +inf, underflow goes through the subnormals).
- tanhf: one formula for every |x|: m / (m + 2) with m = e^(2|x|) - 1 = 2^k (e^r - 1) +
  (2^k - 1) (one rounding, by FMA where there is one), e^r - 1 = r + r^2 Q(r) with exp's Q and
  r = 2|x| - k ln2 rounded once (exact for |x| < ln2/4, where k = 0); |x| clamped to 10 (tanh
  rounds to 1 from 9.02) by a select that keeps a NaN. Three roundings (m, m + 2, the
  quotient) give the 2.42 ulp. About 30 vector operations; measured per element on one core
  with the data in cache (16 lanes, Zen 4), alone and inside GELU(tanh):
    this formula                                     0.34 ns    GELU 0.51-0.54 ns  2.42 ulp
    before: |x| < 0.90625 an odd polynomial (9 terms),
      above 1 - 2 / (m + 2); both computed           0.61 ns    GELU 0.82 ns       0.98 ulp
    this formula, m and m + 2 as exact float pairs
      and the quotient corrected by its remainder    0.64 ns    GELU 0.84 ns       1.00 ulp
    quotient corrected, m not a pair                 0.49 ns    GELU 0.70 ns       1.61 ulp
  (glibc's vector tanhf for AArch64, from Arm's optimized-routines, is the same m / (m + 2),
  documented at 2.57 ulp.) The pairs cost more than their operation count: they lengthen the
  chain of dependent operations, and fewer loop iterations then overlap.
  GDV_C_F32_IN_DOUBLE=1 still gives the double path (bit-exact to the reference) where 2.42
  ulp is too many.
- erff: |x| < 0.9: |x| + |x| R(x^2), R = erf(x)/x - 1 fitted with 7 coefficients on
  x^2 <= 0.91^2 (2^-30.1); 0.9 <= |x|: 1 - exp(-a^2) g(a), g = erfc(a) e^(a^2) fitted with 10
  coefficients in a - 1.5 on [0.89, 2.01] (2^-29.7) and 10 in a - 3 on [1.99, 4.01] (2^-27.0,
  where erfc/erf < 0.005 scales it down), the piece's coefficients chosen by selects (one
  polynomial over [0.89, 4.01] reached 0.97 ulp: its Horner roundings at |a - centre| ~ 1.7
  are too large where erfc/erf is 1/4); a - centre is exact (Sterbenz); a^2 = hi + lo exactly
  (Dekker's split into 12-bit halves), exp(-hi) as exp's p + pl times one power of two
  (-16 <= -hi keeps 2^k normal, where exp splits it in two: the same bits on every input,
  1.29 ns an element against 1.36, alone on one core), 1 - erfc by Fast2Sum;
  a is clamped to 4, where erfc(4) < 2^-25 makes the result round to 1 (it does from 3.92 on).
- sigmoidf: e = exp(-|x|) <= 1 (never overflows) as e^r - 1 = r + r^2 Q(r), Q with five
  coefficients (SIGMOIDF_Q: 2^-27.8 of e^r, where exp keeps six), then 2^k (1 + (e^r - 1))
  rounded once (one FMA, by 2^(k + 24), normal for every -150 <= k <= 0, then the exact
  scaling by 2^-24, which rounds a second time only into the subnormals); n / (1 + e) with
  n = 1 for x >= 0 and n = e below, 1 + e rounded once, one division. The error adds up
  from e (half an ulp of e, which near -4.16 is twice y's), 1 + e (2^-24 relative) and the
  division (half an ulp): 2.40 ulp at worst, measured.
  A NaN is not put back at the end: the clamp to -104 keeps it (a float compare, where an
  integer min on the bits had made it -104), and it runs through to the result.
  Per element, x sigmoid(x) on one core with the data in cache (16 lanes, Zen 4; the
  function's C compiled alone with the target's flags, 2026-12-05):
    this function                                    0.320 ns   2.41 ulp
    before: xc - kd LN2F_HI a multiply and a subtraction
      (the same value, exact)                        0.330 ns   2.41 ulp
    before: 2^k as two factors 2^k1 2^(k - k1), each
      built from its bits (the same bits on every
      f32 input, with FMA and without)               0.367 ns   2.41 ulp
    before: the clamp on the bits, the NaN put back
      by a select at the end                         0.397 ns   2.41 ulp
    before: six coefficients, 1 + e = d + dl exactly
      (Fast2Sum), rc = 1 / d, the quotient n rc
      corrected by its remainder n - qt (d + dl)     0.535 ns   1.48 ulp
    earlier: e as exp's pair p + pl, n / d and the
      remainder's quotient both divided              1.00 ns    0.80 ulp
  The FP pipes bound it (15 of the 26 vector instructions of x sigmoid(x)'s loop are FP
  arithmetic): the division itself costs 0.03 ns, one coefficient fewer and no correction the
  rest, the second power of two's five integer and float operations 0.037 ns.
  SiLU (x sigmoid(x)) follows every convolution of efficientnet_b0: 6.2 million sigmoids a
  call at 224x224, 6.2 ms of its 27 ms on one core before.
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


def _horner(var: str, coeffs: tuple[str, ...] | list[str], fma: str = "GDV_FMA") -> str:
    """C for the polynomial sum(coeffs[i] * var^i) (C expressions), Horner's order (`fma`
    steps: GDV_FMA for double, GDV_FMAF for float)."""
    expr = coeffs[-1]
    for c in reversed(coeffs[:-1]):
        expr = f"{fma}({expr}, {var}, {c})"
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


def _fma_macro(macro: str, fn: str, what: str) -> str:
    """The GDV_FMA / GDV_FMAF macro: one rounding where the target has FMA."""
    return (
        f"/* {what}: fused ({fn}, one rounding, one instruction) where the target has FMA,\n"
        "   else two roundings; the functions below are within their bounds either way */\n"
        "#if defined(__FMA__) || defined(__aarch64__)\n"
        f"#define {macro}(a, b, c) {fn}((a), (b), (c))\n"
        "#else\n"
        f"#define {macro}(a, b, c) ((a) * (b) + (c))\n"
        "#endif\n"
    )


def _select(name: str, ftype: str, utype: str) -> str:
    """`name(c, a, b)`: c ? a : b for `ftype` on its `utype` bits."""
    var = ftype[0]
    return (
        f"static inline {ftype} {name}(int c, {ftype} a, {ftype} b)\n"
        "{\n"
        "  /* c ? a : b on the bits: GCC (-ftrapping-math) may keep a float select as a branch */\n"
        f"  {utype} ua, ub;\n"
        "  memcpy(&ua, &a, sizeof ua);\n"
        "  memcpy(&ub, &b, sizeof ub);\n"
        f"  const {utype} u = ub ^ ((ua ^ ub) & (({utype})0 - ({utype})(c != 0)));\n"
        f"  {ftype} {var};\n"
        f"  memcpy(&{var}, &u, sizeof {var});\n"
        f"  return {var};\n"
        "}\n"
    )


def _pow2(name: str, ftype: str, itype: str, utype: str, bias: int, mant: int) -> str:
    """`name(k)`: 2^k for normal results, from its bits."""
    var = ftype[0]
    return (
        f"static inline {ftype} {name}({itype} k)\n"
        "{\n"
        f"  /* 2^k for {1 - bias} <= k <= {bias}, from its bits */\n"
        f"  const {utype} u = ({utype})(k + {bias}) << {mant};\n"
        f"  {ftype} {var};\n"
        f"  memcpy(&{var}, &u, sizeof {var});\n"
        f"  return {var};\n"
        "}\n"
    )


_FMA = _fma_macro("GDV_FMA", "fma", "a * b + c")
_SEL = _select("gdv_sel", "double", "uint64_t")
_POW2 = _pow2("gdv_pow2i", "double", "int64_t", "uint64_t", 1023, 52)

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

# --- f32 arithmetic ----------------------------------------------------------------------------

LN2F_HI = "0x1.62e4p-1"
LN2F_LO = "0x1.7f7d1cp-20"
INV_LN2F = "0x1.715476p+0"

EXPF_Q = (
    "0x1p-1",
    "0x1.555552p-3",
    "0x1.5554ep-5",
    "0x1.1115a8p-7",
    "0x1.6d56ecp-10",
    "0x1.9abfaep-13",
)
"""f32: (e^r - 1 - r) / r^2 on |r| <= 1.01 ln2/2, lowest degree first."""

SIGMOIDF_Q = (
    "0x1p-1",
    "0x1.555486p-3",
    "0x1.5555b6p-5",
    "0x1.1241cp-7",
    "0x1.6c6406p-10",
)
"""f32: EXPF_Q's function with one coefficient fewer (2^-27.8 of e^r), for sigmoid's e."""

ERFF_R = (
    "0x1.06eba8p-3",
    "-0x1.812742p-2",
    "0x1.ce2df6p-4",
    "-0x1.b80e5p-6",
    "0x1.54cde2p-8",
    "-0x1.aaa8f2p-11",
    "0x1.5ebabap-14",
)
"""f32: erf(x) / x - 1 as a polynomial in s = x^2, s <= 0.91^2."""

ERFCF_PIECES = (
    (
        "1.5",
        (
            "0x1.494dbp-2",
            "-0x1.4f1988p-3",
            "0x1.37ea1ep-4",
            "-0x1.0dc524p-5",
            "0x1.b65f4ep-7",
            "-0x1.51459cp-8",
            "0x1.ecf0e4p-10",
            "-0x1.58ef82p-11",
            "0x1.fca74p-13",
            "-0x1.5edd6ep-14",
        ),
    ),
    (
        "3.0",
        (
            "0x1.6e9828p-3",
            "-0x1.bd6ae4p-5",
            "0x1.043fb4p-6",
            "-0x1.25909p-8",
            "0x1.40b0c2p-10",
            "-0x1.53defcp-12",
            "0x1.5b37dp-14",
            "-0x1.5e9b18p-16",
            "0x1.9055c6p-18",
            "-0x1.73c7e6p-20",
        ),
    ),
)
"""f32: erfc(a) e^(a^2) on [0.89, 2.01] and [1.99, 4.01] (used below and from 2): (centre,
exact in f32; coefficients in a - centre, lowest degree first)."""


def _hornerf(var: str, coeffs: tuple[str, ...]) -> str:
    """C for the f32 polynomial sum(coeffs[i] * var^i), coefficients given as hex floats."""
    return _horner(var, [f"{c}f" for c in coeffs], "GDV_FMAF")


def _erfcf_horner() -> str:
    """C for the erfc piece's polynomial at `t`, each coefficient selected by `p0`."""
    (_, first), (_, second) = ERFCF_PIECES
    coeffs = [f"gdv_self(p0, {a}f, {b}f)" for a, b in zip(first, second, strict=True)]
    return _horner("t", coeffs, "GDV_FMAF")


_FMAF = _fma_macro("GDV_FMAF", "fmaf", "f32 a * b + c")
_SELF = _select("gdv_self", "float", "uint32_t")
_POW2F = _pow2("gdv_pow2if", "float", "int32_t", "uint32_t", 127, 23)


def _round_k(x: str) -> str:
    """C statements rounding the f32 `x` / ln2 to the integer k (and kd, k as a float) by adding
    1.5 2^23, for x = k ln2 + r with |r| <= ln2/2 (+ an ulp)."""
    return (
        f"  /* {x} = k ln2 + r, |r| <= ln2/2 (+ an ulp): adding 1.5 2^23 rounds to an integer */\n"
        "  const float big = 0x1.8p23f;\n"
        f"  const float kb = GDV_FMAF({x}, {INV_LN2F}f, big);\n"
        "  uint32_t kbits;\n"
        "  memcpy(&kbits, &kb, sizeof kbits);\n"
        "  const int32_t k = (int32_t)(kbits - 0x4b400000u);\n"
        "  const float kd = kb - big;\n"
    )


def _expf_parts(x: str, split: bool = True) -> str:
    """C statements splitting e^x for the f32 `x` (clamped to [-104, 89] first, on its bits)
    into p + pl, |pl| <= ulp(p)/2, and the two halves k1, k2 of the exponent:
    e^x = (p + pl) 2^k1 2^k2 within about 2^-29 relative (factors s1 = 2^k1, s2 = 2^k2).
    With `split` False, for an `x` the caller keeps within [-87.3, 0] (so that
    -126 <= k <= 0), one factor sk = 2^k instead: p sk and pl sk are then exact, as p s1 s2 and
    pl s1 s2 are. A NaN `x` is clamped to an end and sk is then meaningless: the caller's
    result must carry the NaN another way (erf's g does)."""
    return (
        f"  uint32_t ux;\n"
        f"  memcpy(&ux, &{x}, sizeof ux);\n"
        "  /* clamped to [-104, 89] on the bits (integer min/max; a NaN becomes one of the ends):\n"
        "     as unsigned, the negatives beyond -104 are the largest; as signed, positives are */\n"
        "  const uint32_t ulo = ux > 0xc2d00000u ? 0xc2d00000u : ux;  /* -104 */\n"
        "  const int32_t slo = (int32_t)ulo;\n"
        "  const int32_t sc = slo > 0x42b20000 ? 0x42b20000 : slo;  /* 89 */\n"
        "  float xc;\n"
        "  memcpy(&xc, &sc, sizeof xc);\n"
        + _round_k("xc")
        + "  /* LN2F_HI has 15 bits: kd * LN2F_HI is exact (|k| <= 150), so is the subtraction;\n"
        "     r + rl = xc - kd (LN2F_HI + LN2F_LO) (Fast2Sum: rl is exact where it matters) */\n"
        f"  const float rh = GDV_FMAF(-kd, {LN2F_HI}f, xc), rt = kd * {LN2F_LO}f;\n"
        "  const float r = rh - rt, rl = (rh - r) - rt;\n"
        f"  const float q = {_hornerf('r', EXPF_Q)};\n"
        "  /* e^r = 1 + r + (r^2 q + rl): o + ol = 1 + r exactly, p + pl = o + tail */\n"
        "  const float o = 1.0f + r, ol = (1.0f - o) + r;\n"
        "  const float tail = ol + GDV_FMAF(r * r, q, rl);\n"
        "  const float p = o + tail, pl = (o - p) + tail;\n"
        + (
            "  /* 2^k as two exact factors: p 2^k1 is normal, one rounding at the second */\n"
            "  const int32_t k1 = k >> 1;  /* floor(k / 2): >> on negatives is arithmetic */\n"
            "  const float s1 = gdv_pow2if(k1), s2 = gdv_pow2if(k - k1);\n"
            if split
            else "  const float sk = gdv_pow2if(k);  /* -126 <= k <= 0 */\n"
        )
    )


_EXPF = (
    _DECL + "static inline float gdv_vexpf(float x)\n"
    "{\n"
    "  /* beyond [-104, 89] the result is 0 or inf */\n"
    + _expf_parts("x")
    + "  const int nan = (ux & 0x7fffffffu) > 0x7f800000u;\n"
    "  return gdv_self(nan, x + x, (p * s1) * s2);\n"
    "}\n"
)

_TANHF = (
    _DECL + "static inline float gdv_vtanhf(float x)\n"
    "{\n"
    "  /* tanh|x| = m / (m + 2), m = e^(2|x|) - 1 = 2^k (e^r - 1) + (2^k - 1) with\n"
    "     2|x| = k ln2 + r. |x| is clamped to 10 (tanh rounds to 1 from 9.02); a NaN fails the\n"
    "     comparison, stays, and runs through every step below */\n"
    "  const float ax0 = fabsf(x);\n"
    "  const float ax = gdv_self(10.0f < ax0, 10.0f, ax0);\n"
    "  const float y = 2.0f * ax;\n"
    + _round_k("y")
    + "  /* kd LN2F_HI is exact, and so is y minus it; r is rounded once (exact when k = 0) */\n"
    f"  const float r = GDV_FMAF(-kd, {LN2F_LO}f, GDV_FMAF(-kd, {LN2F_HI}f, y));\n"
    f"  const float q = {_hornerf('r', EXPF_Q)};\n"
    "  const float em = GDV_FMAF(r * r, q, r);  /* e^r - 1 */\n"
    "  const float s = gdv_pow2if(k);\n"
    "  const float m = GDV_FMAF(s, em, s - 1.0f);\n"
    "  const float v = m / (m + 2.0f);\n"
    "  return copysignf(v, x);\n"
    "}\n"
)

_ERFF = (
    _DECL + "static inline float gdv_verff(float x)\n"
    "{\n"
    "  const float ax = fabsf(x);\n"
    "  const float s = x * x;\n"
    f"  const float small = GDV_FMAF(ax, {_hornerf('s', ERFF_R)}, ax);\n"
    "  /* 0.9 <= |x|: 1 - exp(-a^2) g(a), a^2 = hi + lo exactly; a = 4 beyond (erf rounds to\n"
    "     1 from 3.92 on) */\n"
    "  const float a = gdv_self(ax > 4.0f, 4.0f, gdv_self(ax < 0.9f, 0.9f, ax));\n"
    "  const int p0 = a < 2.0f;  /* the piece */\n"
    f"  const float t = a - gdv_self(p0, {ERFCF_PIECES[0][0]}f, {ERFCF_PIECES[1][0]}f);\n"
    f"  const float g = {_erfcf_horner()};\n"
    "  const float c = 4097.0f * a;  /* Dekker's split: a = ah + al, 12 bits each */\n"
    "  const float ah = c - (c - a), al = a - ah;\n"
    "  const float hi = a * a;\n"
    "  const float lo = ((ah * ah - hi) + 2.0f * (ah * al)) + al * al;\n"
    "  const float mx = -hi;  /* in [-16, -0.81]: 2^k one normal factor */\n"
    + _expf_parts("mx", split=False)
    + "  /* erfc = (eh + el) (1 - lo) g = ce + cl; 1 - ce = one + its error exactly (Fast2Sum,\n"
    "     ce <= 0.21) */\n"
    "  const float eh = p * sk, el = pl * sk;\n"
    "  const float ce = eh * g, cl = (el - eh * lo) * g;\n"
    "  const float one = 1.0f - ce;\n"
    "  const float large = one + (((1.0f - one) - ce) - cl);\n"
    "  return copysignf(gdv_self(ax < 0.9f, small, large), x);\n"
    "}\n"
)

_SIGMOIDF = (
    _DECL + "static inline float gdv_vsigmoidf(float x)\n"
    "{\n"
    "  /* 1 / (1 + e) for x >= 0, e / (1 + e) below, e = exp(-|x|) <= 1 (never overflows: the\n"
    "     results below -87.3 come out subnormal, not 0) */\n"
    "  const float mx = -fabsf(x);\n"
    "  /* clamped to -104, keeping a NaN (NaN < -104 is false): it runs through every step\n"
    "     below, and e, hence n / (1 + e), comes out NaN */\n"
    "  const float xc = mx < -104.0f ? -104.0f : mx;\n"
    + _round_k("xc")
    + "  /* kd LN2F_HI is exact, and so is xc minus it; r is rounded once */\n"
    f"  const float r = GDV_FMAF(-kd, {LN2F_LO}f, GDV_FMAF(-kd, {LN2F_HI}f, xc));\n"
    f"  const float q = {_hornerf('r', SIGMOIDF_Q)};\n"
    "  const float em = GDV_FMAF(r * r, q, r);  /* e^r - 1 */\n"
    "  /* e = 2^k (1 + em) rounded once: -150 <= k <= 0, so 2^(k + 24) is normal and its\n"
    "     product is rounded once to 24 bits; the exact scaling by 2^-24 rounds again only where\n"
    "     e is subnormal (the bits that two factors 2^k1 2^(k - k1) gave) */\n"
    "  const float s = gdv_pow2if(k + 24);\n"
    "  const float e = GDV_FMAF(s, em, s) * 0x1p-24f;\n"
    "  uint32_t sx;\n"
    "  memcpy(&sx, &x, sizeof sx);\n"
    "  const float n = gdv_self((int)(sx >> 31), e, 1.0f);\n"
    "  /* n / (1 + e): one division, 1 + e rounded once */\n"
    "  return n / (1.0f + e);\n"
    "}\n"
)

HELPERS: dict[str, str] = {
    "gdv_fma": _FMA,
    "gdv_sel": _DECL + _SEL,
    "gdv_pow2i": _DECL + _POW2,
    "gdv_vexp": _EXP,
    "gdv_vtanh": _TANH,
    "gdv_verf": _ERF,
    "gdv_fmaf": _FMAF,
    "gdv_self": _DECL + _SELF,
    "gdv_pow2if": _DECL + _POW2F,
    "gdv_vexpf": _EXPF,
    "gdv_vtanhf": _TANHF,
    "gdv_verff": _ERFF,
    "gdv_vsigmoidf": _SIGMOIDF,
}
"""The C text of each function by name, a function after the ones it calls."""

FAST: dict[str, str] = {"exp": "gdv_vexp", "tanh": "gdv_vtanh", "erf": "gdv_verf"}
"""The op each function computes (double -> double)."""

FASTF: dict[str, str] = {
    "exp": "gdv_vexpf",
    "tanh": "gdv_vtanhf",
    "erf": "gdv_verff",
    "sigmoid": "gdv_vsigmoidf",
}
"""The op each function computes (float -> float)."""

F32_MAX_ULP: dict[str, float] = {"exp": 0.77, "tanh": 2.43, "erf": 0.98, "sigmoid": 2.41}
"""The largest error of each f32 function over every f32 input, in ulps of the exact value
(rounded up to 0.01; with and without FMA: benchmarks/vmath_ulp.py, see the docstring above).
The tests fail if a strided sample exceeds it."""

REQUIRES: dict[str, list[str]] = {
    "gdv_vexp": ["gdv_fma", "gdv_sel", "gdv_pow2i", "gdv_vexp"],
    "gdv_vtanh": ["gdv_fma", "gdv_sel", "gdv_pow2i", "gdv_vexp", "gdv_vtanh"],
    "gdv_verf": ["gdv_fma", "gdv_sel", "gdv_pow2i", "gdv_vexp", "gdv_verf"],
    "gdv_vexpf": ["gdv_fmaf", "gdv_self", "gdv_pow2if", "gdv_vexpf"],
    **{
        f: ["gdv_fmaf", "gdv_self", "gdv_pow2if", "gdv_vexpf", f]
        for f in ("gdv_vtanhf", "gdv_verff", "gdv_vsigmoidf")
    },
}
"""The helpers a program calling the function needs (itself included)."""
