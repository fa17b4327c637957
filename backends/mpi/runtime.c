/* gdv's MPI collectives (docs/IR_SPEC.md section 7), built from point-to-point messages only.
 *
 * Every fold is written out in the order the op declares: "rank" is a pipelined chain (member
 * m adds its value to the accumulator of members 0 .. m-1, piece by piece), "tree" reduces
 * tree(lo, n) on member lo from the halves on members lo and lo + ceil(n/2), "ring" is the ring
 * algorithm's reduce-scatter (chunk c starts on member c+1 and ends on member c) followed by its
 * all-gather. No MPI reduction (MPI_Allreduce, MPI_Reduce, ...) is called: their order is not
 * defined.
 *
 * A group is given as the MPI ranks of its members in member order (`ranks`, `p` of them) and
 * this process's member index `me`. Buffers are contiguous; the caller lays the operand out so
 * that the blocks an op moves are contiguous. Every function adds the bytes this process sent
 * to `*sent` and returns 0, or -1 when memory runs out.
 *
 * Compiled with -ffp-contract=off -fno-fast-math: each fold step is one IEEE operation. */

#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum {
  GDV_F64 = 0, GDV_F32 = 1, GDV_I64 = 2, GDV_I32 = 3, GDV_I8 = 4,
  GDV_I16 = 5, GDV_U64 = 6, GDV_U32 = 7, GDV_U16 = 8, GDV_U8 = 9
};
enum { GDV_ADD = 0, GDV_MAX = 1, GDV_MIN = 2 };
enum { GDV_RANK = 0, GDV_TREE = 1, GDV_RING = 2 };

#define PIECE ((int64_t)1 << 30) /* MPI counts are int: larger messages go in pieces */

static size_t elem_size(int dt) {
  switch (dt) {
  case GDV_F64: case GDV_I64: case GDV_U64: return 8;
  case GDV_F32: case GDV_I32: case GDV_U32: return 4;
  case GDV_I16: case GDV_U16: return 2;
  default: return 1;
  }
}

/* IR max/min (IR_SPEC section 3): NaN if either is NaN; max(-0.0, +0.0) = +0.0 and
 * min(-0.0, +0.0) = -0.0 in either order. The same choices as the reference backend's. */
#define FMAX(a, b) \
  ((a) != (a) ? (a) : (b) != (b) ? (b) : (a) > (b) ? (a) : ((a) == (b) && signbit(b)) ? (a) : (b))
#define FMIN(a, b) \
  ((a) != (a) ? (a) : (b) != (b) ? (b) : (a) < (b) ? (a) : ((a) == (b) && signbit(a)) ? (a) : (b))
#define IMAX(a, b) ((a) > (b) ? (a) : (b))
#define IMIN(a, b) ((a) < (b) ? (a) : (b))

#define FOLD_FLOAT(T)                                                        \
  {                                                                          \
    T *a = (T *)acc;                                                         \
    const T *b = (const T *)x;                                               \
    if (op == GDV_ADD) for (int64_t i = 0; i < n; i++) a[i] = a[i] + b[i];   \
    else if (op == GDV_MAX) for (int64_t i = 0; i < n; i++) a[i] = FMAX(a[i], b[i]); \
    else for (int64_t i = 0; i < n; i++) a[i] = FMIN(a[i], b[i]);            \
    return;                                                                  \
  }

/* Integer add wraps: done on the unsigned type of the same width (defined in C; the cast back
 * to U undoes the promotion of 8- and 16-bit operands to int). max and min compare in T, which
 * the promotions keep exact: unsigned types compare unsigned. */
#define FOLD_INT(T, U)                                                        \
  {                                                                           \
    T *a = (T *)acc;                                                          \
    const T *b = (const T *)x;                                                \
    if (op == GDV_ADD) {                                                      \
      U *ua = (U *)acc;                                                       \
      const U *ub = (const U *)x;                                             \
      for (int64_t i = 0; i < n; i++) ua[i] = (U)(ua[i] + ub[i]);             \
    } else if (op == GDV_MAX) for (int64_t i = 0; i < n; i++) a[i] = IMAX(a[i], b[i]); \
    else for (int64_t i = 0; i < n; i++) a[i] = IMIN(a[i], b[i]);             \
    return;                                                                   \
  }

/* acc[i] = op(acc[i], x[i]) for i < n: the accumulator is the left operand. */
static void fold(void *acc, const void *x, int64_t n, int dt, int op) {
  switch (dt) {
  case GDV_F64: FOLD_FLOAT(double)
  case GDV_F32: FOLD_FLOAT(float)
  case GDV_I64: FOLD_INT(int64_t, uint64_t)
  case GDV_I32: FOLD_INT(int32_t, uint32_t)
  case GDV_I8: FOLD_INT(int8_t, uint8_t)
  case GDV_I16: FOLD_INT(int16_t, uint16_t)
  case GDV_U64: FOLD_INT(uint64_t, uint64_t)
  case GDV_U32: FOLD_INT(uint32_t, uint32_t)
  case GDV_U16: FOLD_INT(uint16_t, uint16_t)
  case GDV_U8: FOLD_INT(uint8_t, uint8_t)
  }
}

/* Send `sbytes` to MPI rank `dst` and receive `rbytes` from `src` at once (either may be
 * MPI_PROC_NULL), in pieces of at most PIECE bytes; messages between two ranks arrive in the
 * order they were sent, so the pieces match. Non-blocking posts then one wait: no cycle of
 * sends can block. */
static int xchg(const void *sbuf, int64_t sbytes, int dst, void *rbuf, int64_t rbytes, int src,
                int tag, int64_t *sent) {
  int64_t ns = dst == MPI_PROC_NULL ? 0 : (sbytes + PIECE - 1) / PIECE;
  int64_t nr = src == MPI_PROC_NULL ? 0 : (rbytes + PIECE - 1) / PIECE;
  if (dst != MPI_PROC_NULL && ns == 0) ns = 1; /* an empty message still pairs with its receive */
  if (src != MPI_PROC_NULL && nr == 0) nr = 1;
  MPI_Request *req = malloc(sizeof(MPI_Request) * (size_t)(ns + nr + 1));
  if (!req) return -1;
  int64_t k = 0;
  for (int64_t i = 0; i < nr; i++) {
    int64_t off = i * PIECE, len = rbytes - off < PIECE ? rbytes - off : PIECE;
    MPI_Irecv((char *)rbuf + off, (int)len, MPI_BYTE, src, tag, MPI_COMM_WORLD, &req[k++]);
  }
  for (int64_t i = 0; i < ns; i++) {
    int64_t off = i * PIECE, len = sbytes - off < PIECE ? sbytes - off : PIECE;
    MPI_Isend((const char *)sbuf + off, (int)len, MPI_BYTE, dst, tag, MPI_COMM_WORLD, &req[k++]);
  }
  MPI_Waitall((int)k, req, MPI_STATUSES_IGNORE);
  free(req);
  if (dst != MPI_PROC_NULL) *sent += sbytes;
  return 0;
}

#define NONE MPI_PROC_NULL

/* tree(lo, n) into `acc` on member lo (the members of [lo, lo + n) that are not lo only send). */
static int tree_reduce(void *acc, void *tmp, int64_t n_el, int dt, int op, const int *ranks,
                       int lo, int n, int me, int tag, int64_t *sent) {
  if (n == 1) return 0;
  int h = (n + 1) / 2;
  int rc = me < lo + h ? tree_reduce(acc, tmp, n_el, dt, op, ranks, lo, h, me, tag, sent)
                       : tree_reduce(acc, tmp, n_el, dt, op, ranks, lo + h, n - h, me, tag, sent);
  if (rc) return rc;
  int64_t bytes = n_el * (int64_t)elem_size(dt);
  if (me == lo + h) return xchg(acc, bytes, ranks[lo], 0, 0, NONE, tag, sent);
  if (me == lo) {
    if (xchg(0, 0, NONE, tmp, bytes, ranks[lo + h], tag, sent)) return -1;
    fold(acc, tmp, n_el, dt, op); /* op(tree(lo, h), tree(lo + h, n - h)) */
  }
  return 0;
}

/* The value on member lo to every member of [lo, lo + n), down the same tree. */
static int tree_bcast(void *buf, int64_t bytes, const int *ranks, int lo, int n, int me, int tag,
                      int64_t *sent) {
  if (n == 1) return 0;
  int h = (n + 1) / 2;
  if (me == lo && xchg(buf, bytes, ranks[lo + h], 0, 0, NONE, tag, sent)) return -1;
  if (me == lo + h && xchg(0, 0, NONE, buf, bytes, ranks[lo], tag, sent)) return -1;
  return me < lo + h ? tree_bcast(buf, bytes, ranks, lo, h, me, tag, sent)
                     : tree_bcast(buf, bytes, ranks, lo + h, n - h, me, tag, sent);
}

/* The ring's reduce-scatter on `buf` (p chunks, chunk c = elements [starts[c], starts[c+1])):
 * at step s member m sends chunk m-1-s (its accumulator) to m+1 and folds its own value into
 * chunk m-2-s from m-1, so chunk c is folded from member c+1 round to member c, which holds it
 * at the end. `own` is this member's operand (read for its own values). */
static int ring_reduce_scatter(void *buf, const void *own, const int64_t *starts, int dt, int op,
                               const int *ranks, int p, int me, int tag, int64_t *sent) {
  size_t es = elem_size(dt);
  int64_t most = 0;
  for (int c = 0; c < p; c++)
    if (starts[c + 1] - starts[c] > most) most = starts[c + 1] - starts[c];
  char *tmp = malloc((size_t)(most * (int64_t)es) + 1);
  if (!tmp) return -1;
  int next = ranks[(me + 1) % p], prev = ranks[(me + p - 1) % p];
  for (int s = 0; s < p - 1; s++) {
    int cs = ((me - 1 - s) % p + 2 * p) % p, cr = ((me - 2 - s) % p + 2 * p) % p;
    int64_t sn = starts[cs + 1] - starts[cs], rn = starts[cr + 1] - starts[cr];
    if (xchg((char *)buf + starts[cs] * (int64_t)es, sn * (int64_t)es, next, tmp,
             rn * (int64_t)es, prev, tag, sent)) {
      free(tmp);
      return -1;
    }
    /* acc = op(received accumulator, own value) */
    char *dst = (char *)buf + starts[cr] * (int64_t)es;
    memcpy(dst, tmp, (size_t)(rn * (int64_t)es));
    fold(dst, (const char *)own + starts[cr] * (int64_t)es, rn, dt, op);
  }
  free(tmp);
  return 0;
}

/* The ring's all-gather: member m holds chunk m of `buf`; at step s it passes chunk m-s on. */
static int ring_all_gather(void *buf, const int64_t *starts, int64_t es, const int *ranks, int p,
                           int me, int tag, int64_t *sent) {
  int next = ranks[(me + 1) % p], prev = ranks[(me + p - 1) % p];
  for (int s = 0; s < p - 1; s++) {
    int cs = ((me - s) % p + p) % p, cr = ((me - 1 - s) % p + 2 * p) % p;
    if (xchg((char *)buf + starts[cs] * es, (starts[cs + 1] - starts[cs]) * es, next,
             (char *)buf + starts[cr] * es, (starts[cr + 1] - starts[cr]) * es, prev, tag, sent))
      return -1;
  }
  return 0;
}

/* The "rank" order as a pipelined chain: member m receives op(...op(v_0, v_1)..., v_{m-1})
 * from member m-1 piece by piece, folds v_m into each piece and passes it on to member m+1;
 * the last member's result then goes round the chain p-1 -> 0 -> 1 -> ... -> p-2. Each
 * element's fold is the left fold in member order, whatever the pieces. */
#define CHAIN_PIECE ((int64_t)1 << 18) /* bytes */

static int chain(void *out, const void *x, int64_t n, int dt, int op, const int *ranks, int p,
                 int me, int tag, int64_t *sent) {
  int64_t es = (int64_t)elem_size(dt), piece = CHAIN_PIECE / es;
  int64_t pieces = n ? (n + piece - 1) / piece : 1;
  MPI_Request *req = malloc(sizeof(MPI_Request) * (size_t)pieces);
  if (!req) return -1;
  for (int phase = 0; phase < 2; phase++) {
    /* phase 0: from member me-1 to me+1; phase 1 (broadcast): the chain starts at p-1 */
    int prev, next;
    if (phase == 0) {
      prev = me > 0 ? ranks[me - 1] : NONE;
      next = me < p - 1 ? ranks[me + 1] : NONE;
    } else {
      prev = me == p - 1 ? NONE : me == 0 ? ranks[p - 1] : ranks[me - 1];
      next = me == p - 1 ? ranks[0] : me < p - 2 ? ranks[me + 1] : NONE;
    }
    int k = 0;
    for (int64_t j = 0; j < pieces; j++) {
      int64_t off = j * piece, len = n - off < piece ? n - off : piece;
      char *at = (char *)out + off * es;
      if (prev != NONE) {
        MPI_Recv(at, (int)(len * es), MPI_BYTE, prev, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (phase == 0) fold(at, (const char *)x + off * es, len, dt, op);
      }
      if (next != NONE) {
        MPI_Isend(at, (int)(len * es), MPI_BYTE, next, tag, MPI_COMM_WORLD, &req[k++]);
        *sent += len * es;
      }
    }
    MPI_Waitall(k, req, MPI_STATUSES_IGNORE);
  }
  free(req);
  return 0;
}

int gdv_all_reduce(const void *x, void *out, int64_t n, int dt, int op, int order,
                   const int *ranks, int p, int me, const int64_t *starts, int tag,
                   int64_t *sent) {
  int64_t bytes = n * (int64_t)elem_size(dt);
  memcpy(out, x, (size_t)bytes);
  if (p == 1) return 0;
  if (p == 2 && order != GDV_RING) {
    /* Two members: "rank" and "tree" are both op(v0, v1). One exchange, then each member
     * folds the two values in that order itself: one message time instead of two. */
    void *other = malloc((size_t)bytes + 1);
    if (!other) return -1;
    int rc = xchg(x, bytes, ranks[1 - me], other, bytes, ranks[1 - me], tag, sent);
    if (!rc && me == 0) fold(out, other, n, dt, op);
    if (!rc && me == 1) {
      memcpy(out, other, (size_t)bytes);
      fold(out, x, n, dt, op);
    }
    free(other);
    return rc;
  }
  if (order == GDV_RANK) return chain(out, x, n, dt, op, ranks, p, me, tag, sent);
  if (order == GDV_TREE) {
    void *tmp = malloc((size_t)bytes + 1);
    if (!tmp) return -1;
    int rc = tree_reduce(out, tmp, n, dt, op, ranks, 0, p, me, tag, sent);
    free(tmp);
    if (rc) return rc;
    return tree_bcast(out, bytes, ranks, 0, p, me, tag, sent);
  }
  if (ring_reduce_scatter(out, x, starts, dt, op, ranks, p, me, tag, sent)) return -1;
  return ring_all_gather(out, starts, (int64_t)elem_size(dt), ranks, p, me, tag, sent);
}

/* tree(lo, n) of the p slots of `got` (slot m: member m's value), left in slot lo. */
static void tree_local(char *got, int64_t n_el, int dt, int op, int lo, int n) {
  if (n == 1) return;
  int h = (n + 1) / 2;
  int64_t bb = n_el * (int64_t)elem_size(dt);
  tree_local(got, n_el, dt, op, lo, h);
  tree_local(got, n_el, dt, op, lo + h, n - h);
  fold(got + bb * lo, got + bb * (lo + h), n_el, dt, op);
}

/* `x` is p blocks of `block` elements (block c: what member c keeps); `out` gets block `me` of
 * the fold. "rank" and "tree": member m receives block m of every member's operand (pairwise
 * exchange), then folds them in the declared order; "ring": the ring's reduce-scatter. */
int gdv_reduce_scatter(const void *x, void *out, int64_t block, int dt, int op, int order,
                       const int *ranks, int p, int me, int tag, int64_t *sent) {
  size_t es = elem_size(dt);
  int64_t bb = block * (int64_t)es;
  if (p == 1) {
    memcpy(out, x, (size_t)bb);
    return 0;
  }
  if (order == GDV_RING) {
    int64_t *starts = malloc(sizeof(int64_t) * (size_t)(p + 1));
    char *buf = malloc((size_t)(bb * p) + 1);
    if (!starts || !buf) {
      free(starts);
      free(buf);
      return -1;
    }
    for (int c = 0; c <= p; c++) starts[c] = c * block;
    memcpy(buf, x, (size_t)(bb * p));
    int rc = ring_reduce_scatter(buf, x, starts, dt, op, ranks, p, me, tag, sent);
    if (!rc) memcpy(out, buf + bb * me, (size_t)bb);
    free(starts);
    free(buf);
    return rc;
  }
  char *got = malloc((size_t)(bb * p) + 1); /* slot j: member j's block me */
  if (!got) return -1;
  memcpy(got + bb * me, (const char *)x + bb * me, (size_t)bb);
  for (int s = 1; s < p; s++) {
    int to = (me + s) % p, from = (me + p - s) % p;
    if (xchg((const char *)x + bb * to, bb, ranks[to], got + bb * from, bb, ranks[from], tag,
             sent)) {
      free(got);
      return -1;
    }
  }
  int rc = 0;
  if (order == GDV_RANK) {
    memcpy(out, got, (size_t)bb);
    for (int j = 1; j < p; j++) fold(out, got + bb * j, block, dt, op);
  } else {
    tree_local(got, block, dt, op, 0, p);
    memcpy(out, got, (size_t)bb);
  }
  free(got);
  return rc;
}

/* `out` is p slots of `bytes`: slot m gets member m's operand (the ring's all-gather). */
int gdv_all_gather(const void *x, void *out, int64_t bytes, const int *ranks, int p, int me,
                   int tag, int64_t *sent) {
  memcpy((char *)out + bytes * me, x, (size_t)bytes);
  if (p == 1) return 0;
  int64_t *starts = malloc(sizeof(int64_t) * (size_t)(p + 1));
  if (!starts) return -1;
  for (int c = 0; c <= p; c++) starts[c] = c * bytes;
  int rc = ring_all_gather(out, starts, 1, ranks, p, me, tag, sent);
  free(starts);
  return rc;
}

/* `x` is p blocks of `bytes`; slot j of `out` gets member j's block `me` (pairwise exchange). */
int gdv_all_to_all(const void *x, void *out, int64_t bytes, const int *ranks, int p, int me,
                   int tag, int64_t *sent) {
  memcpy((char *)out + bytes * me, (const char *)x + bytes * me, (size_t)bytes);
  for (int s = 1; s < p; s++) {
    int to = (me + s) % p, from = (me + p - s) % p;
    if (xchg((const char *)x + bytes * to, bytes, ranks[to], (char *)out + bytes * from, bytes,
             ranks[from], tag, sent))
      return -1;
  }
  return 0;
}

/* Send `x` to MPI rank `dst` and receive `out` from `src` (-1: none; a member that receives
 * nothing gets zeros, whose bytes are +0.0, 0 and false). `dst == src == self`: a copy. */
int gdv_permute(const void *x, void *out, int64_t bytes, int dst, int src, int self, int tag,
                int64_t *sent) {
  if (src < 0) memset(out, 0, (size_t)bytes);
  if (dst == self && src == self) {
    memcpy(out, x, (size_t)bytes);
    return 0;
  }
  return xchg(x, bytes, dst < 0 ? NONE : dst, out, bytes, src < 0 ? NONE : src, tag, sent);
}

/* carry_reduce (the exact `carry` order): `x` holds n_red vectors of n_kept elements, the
 * member's reduced positions in row-major order. Member 0 starts the fold with its first
 * vector; member m receives the accumulator of members 0 .. m-1 from member m-1, continues the
 * left fold over its own vectors and hands it to member m+1, so member p-1 ends with the left
 * fold of the joined blocks; it then sends that result to every other member. n_red > 0 (the
 * caller gives an empty reduction its identity without communication). */
int gdv_carry_reduce(const void *x, void *out, int64_t n_red, int64_t n_kept, int dt, int op,
                     const int *ranks, int p, int me, int tag, int64_t *sent) {
  int64_t bytes = n_kept * (int64_t)elem_size(dt);
  int64_t k = 0;
  int rc = 0;
  if (me == 0) {
    memcpy(out, x, (size_t)bytes);
    k = 1;
  } else if ((rc = xchg(0, 0, NONE, out, bytes, ranks[me - 1], tag, sent))) {
    return rc;
  }
  for (; k < n_red; k++) fold(out, (const char *)x + k * bytes, n_kept, dt, op);
  if (me < p - 1 && (rc = xchg(out, bytes, ranks[me + 1], 0, 0, NONE, tag, sent))) return rc;
  if (me == p - 1) {
    for (int m = 0; m < p - 1 && !rc; m++) rc = xchg(out, bytes, ranks[m], 0, 0, NONE, tag, sent);
    return rc;
  }
  return xchg(0, 0, NONE, out, bytes, ranks[p - 1], tag, sent);
}
