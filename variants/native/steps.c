/* The decode steps of the running-sum variants, distilled and window_linear, each one pass over its state.

variants/_native.py compiles this file with decode.c into one library; variants/_native_steps.py calls them.

Their state is small (running sums (2F, D) per K/V head, and window_linear's ring of the last W keys), so a step in
torch is dispatch-bound: about 20 to 35 operations a token. Each function here is that step as one pass over the state,
in float32, on one thread, computing what the variant's pure step function computes and updating the state in place.
Layouts are given as element strides for the token's q, k, v (views of a longer sequence); the state is contiguous. */

#include <math.h>
#include <stdint.h>

#include "common.h"

/* proj (n) = b + x W for n <= CHUNK columns of W (D rows, F apart): two partial sums over d, so the multiply-adds
   do not wait on one another, in registers. */
#define CHUNK 64
static inline __attribute__((always_inline)) void project_chunk(
    const float *restrict x, const float *restrict W, int64_t F, const float *restrict b, float *restrict proj,
    int64_t D, int64_t n)
{
    float a0[CHUNK], a1[CHUNK];
    for (int64_t f = 0; f < n; f++) {
        a0[f] = b[f];
        a1[f] = 0.0f;
    }
    int64_t d = 0;
    for (; d + 2 <= D; d += 2) {
        const float *Wd = W + d * F;
        for (int64_t f = 0; f < n; f++) a0[f] += x[d] * Wd[f];
        for (int64_t f = 0; f < n; f++) a1[f] += x[d + 1] * Wd[F + f];
    }
    for (; d < D; d++)
        for (int64_t f = 0; f < n; f++) a0[f] += x[d] * W[d * F + f];
    for (int64_t f = 0; f < n; f++) proj[f] = a0[f] + a1[f];
}

/* Hedgehog's feature map of one vector x (D): proj = x W + b over F directions (W (D, F) row-major, b (F)), CHUNK
   directions at a time, then phi = [softmax(proj), softmax(-proj)] (2F), each softmax shifted by its max so every
   exp() is <= 1. */
static inline __attribute__((always_inline)) void hedgehog(
    const float *restrict x, const float *restrict W, const float *restrict b, float *restrict phi, int64_t D,
    int64_t F)
{
    float *proj = phi + F; /* the second half holds proj until the first half is written */
    int64_t f0 = 0;
    for (; f0 + CHUNK <= F; f0 += CHUNK) project_chunk(x, W + f0, F, b + f0, proj + f0, D, CHUNK);
    if (f0 < F) project_chunk(x, W + f0, F, b + f0, proj + f0, D, F - f0);
    float hi = proj[0], lo = proj[0];
    for (int64_t f = 1; f < F; f++) {
        hi = proj[f] > hi ? proj[f] : hi;
        lo = proj[f] < lo ? proj[f] : lo;
    }
    float up = 0.0f, down = 0.0f;
    for (int64_t f = 0; f < F; f++) {
        float e = expf(proj[f] - hi), e_neg = expf(lo - proj[f]);
        phi[f] = e;
        proj[f] = e_neg; /* phi[F + f] */
        up += e;
        down += e_neg;
    }
    float inv_up = 1.0f / up, inv_down = 1.0f / down;
    for (int64_t f = 0; f < F; f++) {
        phi[f] *= inv_up;
        phi[F + f] *= inv_down;
    }
}

/* One K/V head's running sums kv (2F, D), z (2F) gain phi_k v^T and phi_k (phi_k (2F), v (D)) in place, and its G
   query heads read them in the same pass: num[g] = phi_q[g] kv (D), den[g] = phi_q[g].z, for phi_q (G, 2F). */
static inline __attribute__((always_inline)) void update_and_read_sums_for(
    float *restrict kv, float *restrict z, const float *restrict phi_k, const float *restrict v,
    const float *restrict phi_q, float *restrict num, float *restrict den, int64_t G, int64_t F2, int64_t D)
{
    for (int64_t i = 0; i < G * D; i++) num[i] = 0.0f;
    for (int64_t g = 0; g < G; g++) den[g] = 0.0f;
    for (int64_t f = 0; f < F2; f++) {
        float *row = kv + f * D, pk = phi_k[f], zf = z[f] + pk;
        z[f] = zf;
        for (int64_t d = 0; d < D; d++) row[d] += pk * v[d];
        for (int64_t g = 0; g < G; g++) {
            float pq = phi_q[g * F2 + f];
            float *ng = num + g * D;
            for (int64_t d = 0; d < D; d++) ng[d] += pq * row[d];
            den[g] += pq * zf;
        }
    }
}

static inline __attribute__((always_inline)) void update_and_read_sums(
    float *restrict kv, float *restrict z, const float *restrict phi_k, const float *restrict v,
    const float *restrict phi_q, float *restrict num, float *restrict den, int64_t G, int64_t F2, int64_t D)
{
    if (G == 1) update_and_read_sums_for(kv, z, phi_k, v, phi_q, num, den, 1, F2, D); /* num stays in registers */
    else update_and_read_sums_for(kv, z, phi_k, v, phi_q, num, den, G, F2, D);
}

/* One token of token-major (B, heads, 1, D) at strides (sb, sh): its row for batch b, head h. */
struct token {
    const float *at;
    int64_t sb, sh;
};
static inline const float *row_of(struct token t, int64_t b, int64_t h) { return t.at + b * t.sb + h * t.sh; }

/* distilled's step for one (batch, K/V head) pair; see distilled_step_f32. */
static inline __attribute__((always_inline)) void distilled_pair(
    struct token q, struct token k, struct token v, float *kv, float *z, const float *W, const float *bias,
    float *out, int64_t b, int64_t hk, int64_t H, int64_t H_kv, int64_t P, int64_t D, int64_t F)
{
    int64_t G = H / H_kv, F2 = 2 * F, p = P == 1 ? 0 : hk;
    float phi_k[F2], phi_q[G * F2], num[G * D], den[G];
    const float *Wp = W + p * D * F, *bp = bias + p * F;
    hedgehog(row_of(k, b, hk), Wp, bp, phi_k, D, F);
    for (int64_t g = 0; g < G; g++) hedgehog(row_of(q, b, hk * G + g), Wp, bp, phi_q + g * F2, D, F);
    int64_t pair = b * H_kv + hk;
    update_and_read_sums(kv + pair * F2 * D, z + pair * F2, phi_k, row_of(v, b, hk), phi_q, num, den, G, F2, D);
    for (int64_t g = 0; g < G; g++) {
        float inv = 1.0f / (den[g] > 1e-6f ? den[g] : 1e-6f); /* distilled's _EPS */
        float *o = out + (b * H + hk * G + g) * D;
        for (int64_t d = 0; d < D; d++) o[d] = num[g * D + d] * inv;
    }
}

/* distilled's decode step (variants/_distilled_math.py step_sums) in one pass over its sums. out (B, H, 1, D)
   contiguous; q (B, H, 1, D), k, v (B, H_kv, 1, D) at strides (sb, sh); kv (B, H_kv, 2F, D) and z (B, H_kv, 2F)
   contiguous, updated in place: kv += phi(k) v^T, z += phi(k); out = phi(q) kv / max(phi(q).z, 1e-6). The feature map
   of K/V head hk is W (P, D, F), bias (P, F) at p = hk (P = H_kv) or 0 (P = 1); query head h reads K/V head
   h / (H / H_kv). The per-token arguments come first, the state's in one struct (the caller keeps it between
   tokens: one argument, not nine). */
struct distilled_state { /* mirrored by variants/_native_steps.py's DistilledArgs */
    float *kv, *z;         /* (B, H_kv, 2F, D), (B, H_kv, 2F) */
    const float *W, *bias; /* (P, D, F), (P, F) */
    int64_t B, H_kv, P, D, F;
};
void distilled_step_f32(
    float *out, int64_t H, const float *q, int64_t q_sb, int64_t q_sh, const float *k, int64_t k_sb, int64_t k_sh,
    const float *v, int64_t v_sb, int64_t v_sh, const struct distilled_state *s)
{
    struct token tq = {q, q_sb, q_sh}, tk = {k, k_sb, k_sh}, tv = {v, v_sb, v_sh};
    float *kv = s->kv, *z = s->z;
    const float *W = s->W, *bias = s->bias;
    int64_t H_kv = s->H_kv, P = s->P, D = s->D, F = s->F;
    for (int64_t b = 0; b < s->B; b++)
        for (int64_t hk = 0; hk < H_kv; hk++) {
            /* the common sizes compiled for (the feature map's projection stays in registers) */
            if (D == 64 && F == 128) distilled_pair(tq, tk, tv, kv, z, W, bias, out, b, hk, H, H_kv, P, 64, 128);
            else if (D == 64 && F == 32) distilled_pair(tq, tk, tv, kv, z, W, bias, out, b, hk, H, H_kv, P, 64, 32);
            else if (D == 64) distilled_pair(tq, tk, tv, kv, z, W, bias, out, b, hk, H, H_kv, P, 64, F);
            else distilled_pair(tq, tk, tv, kv, z, W, bias, out, b, hk, H, H_kv, P, D, F);
        }
}

/* One query head of window_linear's step: the exact softmax over the ring's real slots joined with the far sums' part
   (num (D), den) under one normaliser: out = (sum_j e_j v_j + g num) / max(sum_j e_j + g den, 1e-30), e_j =
   exp(q.k_j scale - m), g = exp(log_gamma - m), m = max(max_j q.k_j scale, log_gamma). */
static inline __attribute__((always_inline)) void ring_and_sums(
    const float *restrict q, const float *restrict rk, const float *restrict rv, const uint8_t *restrict real,
    const float *restrict num, float den, float log_gamma, float *restrict out, int64_t Wn, int64_t D, float scale)
{
    float s[Wn], acc[D];
    float m = log_gamma;
    for (int64_t j = 0; j < Wn; j++) {
        const float *kr = rk + j * D;
        float dot = 0.0f;
        for (int64_t d = 0; d < D; d++) dot += q[d] * kr[d];
        s[j] = real[j] ? dot * scale : HIDDEN;
        m = s[j] > m ? s[j] : m;
    }
    float l = 0.0f;
    for (int64_t j = 0; j < Wn; j++) {
        s[j] = expf(s[j] - m);
        l += s[j];
    }
    for (int64_t d = 0; d < D; d++) acc[d] = 0.0f;
    for (int64_t j = 0; j < Wn; j++) {
        const float *vr = rv + j * D;
        for (int64_t d = 0; d < D; d++) acc[d] += s[j] * vr[d];
    }
    float g = expf(log_gamma - m), total = l + g * den;
    float inv = 1.0f / (total > 1e-30f ? total : 1e-30f); /* _window_linear_math.TINY */
    for (int64_t d = 0; d < D; d++) out[d] = (acc[d] + g * num[d]) * inv;
}

/* The window and the sums of one step of window_linear, all in one struct: see window_linear_step_f32. */
struct window_linear_call {
    struct token q, k, v;
    float *ring_k, *ring_v, *kv, *z, *out;
    const float *W, *bias, *log_gamma;
    int64_t slot, H, H_kv, P, Wn; /* D and F are the pair function's arguments: constants for the common sizes */
    float scale;
};

/* window_linear's step for one (batch, K/V head) pair, the leaving key's reality given (its slot is already marked
   real for the token). */
static inline __attribute__((always_inline)) void window_linear_pair(
    const struct window_linear_call *c, const uint8_t *real, int leaving_real, int64_t b, int64_t hk, int64_t D,
    int64_t F)
{
    int64_t G = c->H / c->H_kv, F2 = 2 * F, p = c->P == 1 ? 0 : hk, pair = b * c->H_kv + hk;
    float phi_k[F2], phi_q[G * F2], num[G * D], den[G], zeros[D];
    const float *Wp = c->W + p * D * F, *bp = c->bias + p * F;
    float *rk = c->ring_k + pair * c->Wn * D, *rv = c->ring_v + pair * c->Wn * D;
    const float *leaving_v = rv + c->slot * D;
    if (leaving_real) hedgehog(rk + c->slot * D, Wp, bp, phi_k, D, F);
    else { /* an empty or padded slot: phi = 0, v = 0, the sums unchanged */
        for (int64_t f = 0; f < F2; f++) phi_k[f] = 0.0f;
        for (int64_t d = 0; d < D; d++) zeros[d] = 0.0f;
        leaving_v = zeros;
    }
    for (int64_t g = 0; g < G; g++) hedgehog(row_of(c->q, b, hk * G + g), Wp, bp, phi_q + g * F2, D, F);
    update_and_read_sums(c->kv + pair * F2 * D, c->z + pair * F2, phi_k, leaving_v, phi_q, num, den, G, F2, D);
    const float *kt = row_of(c->k, b, hk), *vt = row_of(c->v, b, hk);
    for (int64_t d = 0; d < D; d++) { /* the token takes the slot */
        rk[c->slot * D + d] = kt[d];
        rv[c->slot * D + d] = vt[d];
    }
    for (int64_t g = 0; g < G; g++) {
        int64_t h = hk * G + g;
        ring_and_sums(row_of(c->q, b, h), rk, rv, real, num + g * D, den[g], c->log_gamma[p],
                      c->out + (b * c->H + h) * D, c->Wn, D, c->scale);
    }
}

/* window_linear's decode step (variants/_window_linear_math.py window_linear_step) in one pass over its state.
   out (B, H, 1, D) contiguous; q (B, H, 1, D), k, v (B, H_kv, 1, D) at strides (sb, sh); the ring ring_k, ring_v
   (B, H_kv, Wn, D) and ring_real (B, Wn) bytes, the sums kv (B, H_kv, 2F, D) and z (B, H_kv, 2F) contiguous, updated
   in place: the key leaving slot *slot joins the sums (phi 0 if the slot is not real), the token takes the slot, then
   each query attends to the ring exactly and to the sums through phi(q) (ring_and_sums). W (P, D, F), bias (P, F),
   log_gamma (P) as distilled's. Returns 0, or 1 (nothing done) for a slot outside the ring. */
struct window_linear_state { /* mirrored by variants/_native_steps.py's WindowLinearArgs */
    float *ring_k, *ring_v;                  /* (B, H_kv, Wn, D) */
    uint8_t *ring_real;                      /* (B, Wn) */
    float *kv, *z;                           /* (B, H_kv, 2F, D), (B, H_kv, 2F) */
    const float *W, *bias, *log_gamma;       /* (P, D, F), (P, F), (P) */
    int64_t B, H_kv, P, Wn, D, F;
    float scale;
};
int window_linear_step_f32(
    float *out, int64_t H, const float *q, int64_t q_sb, int64_t q_sh, const float *k, int64_t k_sb, int64_t k_sh,
    const float *v, int64_t v_sb, int64_t v_sh, const int64_t *slot, const struct window_linear_state *s)
{
    int64_t Wn = s->Wn, D = s->D, F = s->F;
    if (*slot < 0 || *slot >= Wn) return 1;
    struct window_linear_call c = {{q, q_sb, q_sh}, {k, k_sb, k_sh}, {v, v_sb, v_sh}, s->ring_k, s->ring_v, s->kv,
                                   s->z, out, s->W, s->bias, s->log_gamma, *slot, H, s->H_kv, s->P, Wn, s->scale};
    for (int64_t b = 0; b < s->B; b++) {
        uint8_t *real = s->ring_real + b * Wn;
        int leaving_real = real[c.slot];
        real[c.slot] = 1;
        for (int64_t hk = 0; hk < s->H_kv; hk++) {
            /* the common sizes compiled for */
            if (D == 64 && F == 32) window_linear_pair(&c, real, leaving_real, b, hk, 64, 32);
            else if (D == 64) window_linear_pair(&c, real, leaving_real, b, hk, 64, F);
            else window_linear_pair(&c, real, leaving_real, b, hk, D, F);
        }
    }
    return 0;
}
