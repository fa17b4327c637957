"""The f32 functions of backends/c/vmath.py (gdv_vexpf, gdv_vtanhf, gdv_verff, gdv_vsigmoidf)
against a double-precision reference, on every f32 input.

    python benchmarks/vmath_ulp.py [--stride N] [--only exp,tanh,erf,sigmoid] [--no-fma]
    python benchmarks/vmath_ulp.py --fit

A C program (the functions' own C text from vmath.HELPERS, compiled by the C target's
toolchain with its flags) evaluates each function on every bit pattern (or every N-th with
--stride, N a power of two) in vectorised `omp simd` loops, as generated kernels call them, and
compares with glibc's double exp, tanh, erf (within a double ulp or two, i.e. 2^-28 f32 ulp)
and 1 / (1 + exp(-x)) in double for sigmoid. The error is |got - ref| in f32 ulps of the
reference: ulp(v) = 2^(min(max(e, -126), 127) - 23) where 2^e <= |v| < 2^(e+1); an f32
infinity, and a reference whose correctly rounded f32 value is infinite, count as 2^128 (so an
inf result where the exact value is beyond the overflow threshold is 0 ulp off, and a finite
result there far off). NaN must come out exactly where the reference is NaN, and the
sign must match the reference's (zeros included: tanh(-0) = -0). Reported per function: the
largest error and its input, how many results are not the correctly rounded one (error above
1/2 ulp), how many are more than 1 ulp off, and NaN or sign mismatches. --no-fma measures the
functions as compiled for a target without FMA (GDV_FMAF a separate multiply and add).

--fit recomputes the f32 coefficient tables (vmath.EXPF_Q, SIGMOIDF_Q, ERFF_R, ERFCF_PIECES) with
mpmath, as the vmath docstring describes, and prints each with its fit's largest relative error.

tests/backends/c/test_transcendentals.py runs the same program on a strided sample plus edge
values and fails if an error exceeds vmath.F32_MAX_ULP.
"""

from __future__ import annotations

import argparse
import ctypes
import time

import numpy as np

from gdv.backends.c import vmath
from gdv.backends.c.toolchain import build

FUNCS = {
    "exp": ("gdv_vexpf", "exp(d)"),
    "tanh": ("gdv_vtanhf", "tanh(d)"),
    "erf": ("gdv_verff", "erf(d)"),
    "sigmoid": ("gdv_vsigmoidf", "1.0 / (1.0 + exp(-d))"),
}
"""name: (gdv's f32 function, the double reference as C on `double d`)."""

_STATS = 7
"""Per function: max error, its input's bits, count > 1/2 ulp, count > 1 ulp, NaN mismatches,
sign mismatches, inputs checked."""


def _source(fma: bool = True) -> str:
    needed = {h for fn, _ in FUNCS.values() for h in vmath.REQUIRES[fn]}
    helpers = "".join(text for h, text in vmath.HELPERS.items() if h in needed)
    refs = "\n".join(f"    case {k}: return {ref};" for k, (_, ref) in enumerate(FUNCS.values()))
    calls = "\n".join(
        f"    case {k}:\n"
        "#pragma omp simd\n"
        f"      for (int i = 0; i < n; i++) y[i] = {fn}(x[i]);\n"
        "      break;"
        for k, (fn, _) in enumerate(FUNCS.values())
    )
    return (
        "#include <math.h>\n#include <stdint.h>\n#include <string.h>\n"
        + ("" if fma else "#undef __FMA__  /* GDV_FMAF as a separate multiply and add */\n")
        + helpers
        + f"""
static double gdv_ref(int which, float x)
{{
  const double d = (double)x;
  switch (which) {{
{refs}
  }}
  return 0.0;
}}

static void gdv_eval(int which, const float *x, float *y, int n)
{{
  switch (which) {{
{calls}
  }}
}}

static double gdv_ulp32(double v)
{{
  int e;
  frexp(fabs(v), &e);  /* |v| = m 2^e, 1/2 <= m < 1 */
  e -= 1;
  if (e < -126) e = -126;
  if (e > 127) e = 127;
  return ldexp(1.0, e - 23);
}}

/* Fold the n results of x into st (see _STATS). */
static void gdv_fold(int which, const float *x, const float *y, int n, double *st)
{{
  for (int i = 0; i < n; i++) {{
    const double r = gdv_ref(which, x[i]);
    const float g = y[i];
    double err;
    if (isnan(r) || isnan(g)) {{
      err = 0.0;
      if (isnan(r) != isnan(g)) {{ st[4] += 1; err = INFINITY; }}
    }} else {{
      if (!signbit(r) != !signbit(g)) st[5] += 1;
      /* beyond the largest f32 and half its ulp the correctly rounded value is inf: both
         count as 2^128 there (so an inf result is 0 ulp off, a finite one very far) */
      const double rv = fabs(r) >= 0x1.ffffffp127 ? copysign(0x1p128, r) : r;
      const double gv = isinf(g) ? copysign(0x1p128, g) : (double)g;
      err = fabs(gv - rv) / gdv_ulp32(rv);
    }}
    if (err > 0.5) st[2] += 1;
    if (err > 1.0) st[3] += 1;
    if (err > st[0]) {{
      uint32_t b;
      memcpy(&b, &x[i], sizeof b);
      st[0] = err;
      st[1] = (double)b;
    }}
  }}
  st[6] += n;
}}

static void gdv_merge(double *into, const double *st)
{{
  if (st[0] > into[0] || (st[0] == into[0] && st[1] < into[1])) {{
    into[0] = st[0];
    into[1] = st[1];
  }}
  for (int j = 2; j < {_STATS}; j++) into[j] += st[j];
}}

/* Every stride-th bit pattern from 0 (stride a power of two, at most 2^20). */
void gdv_sweep(int which, uint64_t stride, double *out)
{{
  const int64_t chunks = (int64_t)(UINT64_C(1) << 32) / (int64_t)(stride << 12);
  for (int j = 0; j < {_STATS}; j++) out[j] = 0.0;
#pragma omp parallel
  {{
    double st[{_STATS}] = {{0}};
    float x[4096], y[4096];
#pragma omp for schedule(dynamic, 16)
    for (int64_t c = 0; c < chunks; c++) {{
      for (int i = 0; i < 4096; i++) {{
        const uint32_t b = (uint32_t)(((uint64_t)c * 4096 + (uint64_t)i) * stride);
        memcpy(&x[i], &b, sizeof b);
      }}
      gdv_eval(which, x, y, 4096);
      gdv_fold(which, x, y, 4096, st);
    }}
#pragma omp critical
    gdv_merge(out, st);
  }}
}}

/* The n inputs whose bits are given. */
void gdv_list(int which, const uint32_t *bits, int64_t n, double *out)
{{
  for (int j = 0; j < {_STATS}; j++) out[j] = 0.0;
  float x[4096], y[4096];
  for (int64_t s = 0; s < n; s += 4096) {{
    const int m = (int)(n - s < 4096 ? n - s : 4096);
    memcpy(x, bits + s, sizeof(float) * (size_t)m);
    gdv_eval(which, x, y, m);
    double st[{_STATS}] = {{0}};
    gdv_fold(which, x, y, m, st);
    gdv_merge(out, st);
  }}
}}
"""
    )


def _lib(fma: bool = True) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(build(_source(fma))))
    lib.gdv_sweep.argtypes = [ctypes.c_int, ctypes.c_uint64, ctypes.c_void_p]
    lib.gdv_list.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p]
    return lib


def _report(st: np.ndarray) -> dict:
    x = np.array([int(st[1])], dtype=np.uint32).view(np.float32)[0]
    return {
        "max_ulp": float(st[0]),
        "at": float(x),
        "at_bits": f"0x{int(st[1]):08x}",
        "above_half_ulp": int(st[2]),
        "above_one_ulp": int(st[3]),
        "nan_mismatches": int(st[4]),
        "sign_mismatches": int(st[5]),
        "inputs": int(st[6]),
    }


def sweep(name: str, stride: int = 1, fma: bool = True) -> dict:
    """The errors of function `name` on every stride-th f32 bit pattern (`fma`: GDV_FMAF fused
    where the target has FMA, else always a separate multiply and add)."""
    assert stride & (stride - 1) == 0 and 1 <= stride <= 1 << 20, stride
    out = np.zeros(_STATS)
    _lib(fma).gdv_sweep(list(FUNCS).index(name), stride, out.ctypes.data)
    return _report(out)


def on(name: str, x: np.ndarray, fma: bool = True) -> dict:
    """The errors of function `name` on the f32 values `x`."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    out = np.zeros(_STATS)
    _lib(fma).gdv_list(list(FUNCS).index(name), bits.ctypes.data, bits.size, out.ctypes.data)
    return _report(out)


def _f32(v) -> float:
    return float(np.float32(float(v)))


def _fit(f, scale, a, b, n: int, fixed: tuple[float, ...] = ()) -> tuple[list[float], float]:
    """Coefficients c (lowest degree first, f32 values) of P(t) = sum(c_i t^i) ~ f(t) on [a, b],
    minimising (P - f) / scale, the error it makes in the function's result relative to that
    result: least squares weighted by 1/|scale| on 12n + 40 Chebyshev nodes (mpmath, 40
    digits); the lowest free coefficient rounded to f32 and the higher ones refitted, in turn.
    Returns them and the largest |P - f| / |scale| on 3001 points of [a, b]."""
    import mpmath

    m = 12 * n + 40
    ts = [(a + b) / 2 + (b - a) / 2 * mpmath.cos(mpmath.pi * (j + 0.5) / m) for j in range(m)]
    fs = [f(t) for t in ts]
    ws = [1 / abs(scale(t)) for t in ts]
    c = [mpmath.mpf(v) for v in fixed]
    while len(c) < n:
        k = len(c)
        lhs, rhs = mpmath.matrix(m, n - k), mpmath.matrix(m, 1)
        for j, t in enumerate(ts):
            rhs[j] = (fs[j] - sum(ci * t**i for i, ci in enumerate(c))) * ws[j]
            for i in range(k, n):
                lhs[j, i - k] = t**i * ws[j]
        solution, _ = mpmath.qr_solve(lhs, rhs)
        c.append(mpmath.mpf(_f32(solution[0])))
    worst = max(
        abs(sum(ci * t**i for i, ci in enumerate(c)) - f(t)) / abs(scale(t))
        for t in (a + (b - a) * mpmath.mpf(j) / 3000 for j in range(3001))
    )
    return [float(v) for v in c], float(worst)


def fit() -> None:
    """Print the f32 coefficient tables of vmath.py, fitted afresh (a few seconds)."""
    import mpmath

    mpmath.mp.dps = 40

    def nz(t):  # the functions below at 0: their limit, closely enough
        return t if t != 0 else mpmath.mpf(10) ** -20

    def sq(s):
        return mpmath.sqrt(nz(s))

    h = mpmath.log(2) / 2 * mpmath.mpf("1.01")
    x2 = mpmath.mpf("0.91") ** 2
    (c1, _), (c2, _) = vmath.ERFCF_PIECES

    def g(centre):
        def at(t):
            return mpmath.erfc(t + centre) * mpmath.exp((t + centre) ** 2)

        return at

    def g_fit(lo: str, hi: str, centre: str):
        return (g(mpmath.mpf(centre)),) * 2 + (
            (mpmath.mpf(lo) - mpmath.mpf(centre), mpmath.mpf(hi) - mpmath.mpf(centre)),
            10,
            (),
        )

    tables = {  # name: (f, scale, interval, coefficients, fixed ones)
        "EXPF_Q": (
            lambda r: (mpmath.exp(nz(r)) - 1 - nz(r)) / nz(r) ** 2,
            lambda r: mpmath.exp(r) / nz(r) ** 2,  # e^r = 1 + r + r^2 Q
            (-h, h),
            6,
            (0.5,),
        ),
        "SIGMOIDF_Q": (
            lambda r: (mpmath.exp(nz(r)) - 1 - nz(r)) / nz(r) ** 2,
            lambda r: mpmath.exp(r) / nz(r) ** 2,  # EXPF_Q with one coefficient fewer
            (-h, h),
            5,
            (0.5,),
        ),
        "ERFF_R": (
            lambda s: mpmath.erf(sq(s)) / sq(s) - 1,
            lambda s: mpmath.erf(sq(s)) / sq(s),  # erf = x + x R
            (0, x2),
            7,
            (),
        ),
        "ERFCF_PIECES[0]": g_fit("0.89", "2.01", c1),
        "ERFCF_PIECES[1]": g_fit("1.99", "4.01", c2),
    }
    current = {
        "EXPF_Q": vmath.EXPF_Q,
        "SIGMOIDF_Q": getattr(vmath, "SIGMOIDF_Q", ()),
        "ERFF_R": vmath.ERFF_R,
        "ERFCF_PIECES[0]": vmath.ERFCF_PIECES[0][1],
        "ERFCF_PIECES[1]": vmath.ERFCF_PIECES[1][1],
    }
    for name, (f, scale, (a, b), n, fixed) in tables.items():
        coeffs, worst = _fit(f, scale, mpmath.mpf(a), mpmath.mpf(b), n, fixed)
        same = tuple(float.fromhex(v) for v in current[name]) == tuple(coeffs)
        print(f"{name}: error 2^{float(mpmath.log(worst, 2)):.1f} of the result", end="")
        print(" (vmath's table)" if same else " (differs from vmath's table)")
        for v in coeffs:
            print(f"    {v.hex()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stride", type=int, default=1)
    parser.add_argument("--only", default=",".join(FUNCS))
    parser.add_argument("--no-fma", action="store_true", help="GDV_FMAF unfused")
    parser.add_argument("--fit", action="store_true", help="refit the coefficient tables")
    args = parser.parse_args()
    if args.fit:
        fit()
        return
    for name in args.only.split(","):
        start = time.perf_counter()
        r = sweep(name, args.stride, fma=not args.no_fma)
        print(
            f"{name:8} max {r['max_ulp']:.4f} ulp at {r['at']!r} ({r['at_bits']}); "
            f"{r['above_half_ulp']} not correctly rounded, {r['above_one_ulp']} above 1 ulp, "
            f"{r['nan_mismatches']} NaN and {r['sign_mismatches']} sign mismatches; "
            f"{r['inputs']} inputs, {time.perf_counter() - start:.1f} s",
            flush=True,
        )


if __name__ == "__main__":
    main()
