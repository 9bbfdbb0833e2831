/* One query over a KV cache or a ring: dense's and sliding_window's decode step (variants/_native.py builds it).

A decode step reads its whole state once per token, so it runs at the speed of memory only when it streams that state
in one pass and does nothing else per token: no per-operation dispatch, no temporaries the size of the state. Each
function here is one such pass, in float32 (a large call split over threads). Layouts are given as element strides;
the last dimension of every tensor is contiguous. */

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>

#define BLOCK 256          /* keys scored at once: their scores stay in L1 between the score and the value pass */
#include "common.h"

/* One query against M keys: out = softmax(q k^T * scale) v over the keys `keep` marks (NULL: all), an online softmax
   over blocks of BLOCK keys (running max m, sum l, unnormalised acc). A query that sees no key gets zeros. */
static inline __attribute__((always_inline)) void one_query(
    const float *restrict q, const float *restrict k, int64_t k_sm, const float *restrict v, int64_t v_sm,
    const uint8_t *restrict keep, float *restrict out, int64_t M, int64_t D, float scale)
{
    float qs[D], acc[D], s[BLOCK];
    for (int64_t d = 0; d < D; d++) {
        qs[d] = q[d] * scale;
        acc[d] = 0.0f;
    }
    float m = HIDDEN, l = 0.0f;
    for (int64_t j0 = 0; j0 < M; j0 += BLOCK) {
        int64_t n = M - j0 < BLOCK ? M - j0 : BLOCK;
        int64_t seen = 0;
        float top = HIDDEN;
        for (int64_t j = 0; j < n; j++) {
            const float *kr = k + (j0 + j) * k_sm;
            float dot = 0.0f;
            for (int64_t d = 0; d < D; d++) dot += qs[d] * kr[d];
            int visible = keep == 0 || keep[j0 + j];
            s[j] = visible ? dot : HIDDEN;
            seen += visible;
            top = s[j] > top ? s[j] : top;
        }
        if (!seen) continue;
        float next = top > m ? top : m, fade = expf(m - next);
        l *= fade;
        for (int64_t d = 0; d < D; d++) acc[d] *= fade;
        for (int64_t j = 0; j < n; j++) {
            s[j] = expf(s[j] - next);
            l += s[j];
        }
        for (int64_t j = 0; j < n; j++) {
            const float *vr = v + (j0 + j) * v_sm;
            float p = s[j];
            for (int64_t d = 0; d < D; d++) acc[d] += p * vr[d];
        }
        m = next;
    }
    float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (int64_t d = 0; d < D; d++) out[d] = acc[d] * inv;
}

struct one_query_call {
    const float *q, *k, *v;
    const uint8_t *keep;
    float *out;
    int64_t q_sb, q_sh, k_sb, k_sh, k_sm, v_sb, v_sh, v_sm, keep_sb, H, H_kv, M, D;
    float scale;
    int64_t first, last; /* the (batch, K/V head) pairs [first, last) one thread takes */
};

static void *one_query_pairs(void *arg)
{
    const struct one_query_call *c = arg;
    int64_t G = c->H / c->H_kv;
    for (int64_t pair = c->first; pair < c->last; pair++) {
        int64_t b = pair / c->H_kv, hk = pair % c->H_kv;
        const float *kh = c->k + b * c->k_sb + hk * c->k_sh, *vh = c->v + b * c->v_sb + hk * c->v_sh;
        const uint8_t *kb = c->keep ? c->keep + b * c->keep_sb : 0;
        for (int64_t h = hk * G; h < (hk + 1) * G; h++) { /* a K/V head's G query heads: its keys stay in cache */
            const float *qh = c->q + b * c->q_sb + h * c->q_sh;
            float *oh = c->out + (b * c->H + h) * c->D;
            if (c->D == 64) one_query(qh, kh, c->k_sm, vh, c->v_sm, kb, oh, c->M, 64, c->scale); /* the common */
            else if (c->D == 128) one_query(qh, kh, c->k_sm, vh, c->v_sm, kb, oh, c->M, 128, c->scale); /* dims */
            else one_query(qh, kh, c->k_sm, vh, c->v_sm, kb, oh, c->M, c->D, c->scale);
        }
    }
    return 0;
}

/* q (B, H, 1, D) at strides (q_sb, q_sh); k, v (B, H_kv, M, D) at strides (sb, sh, sm); keep (B, M) bytes at stride
   keep_sb, or NULL; out (B, H, 1, D) contiguous. Query head h reads K/V head h / (H / H_kv). The (batch, K/V head)
   pairs are split over up to `threads` threads (this one and threads - 1 started for the call) when there are at
   least PARALLEL_BYTES of keys and values to read; a thread that cannot start leaves its pairs to this one. */
#define PARALLEL_BYTES (4 << 20)
#define MAX_THREADS 64
void attend_one_query_f32(
    const float *q, int64_t q_sb, int64_t q_sh,
    const float *k, int64_t k_sb, int64_t k_sh, int64_t k_sm,
    const float *v, int64_t v_sb, int64_t v_sh, int64_t v_sm,
    const uint8_t *keep, int64_t keep_sb, float *out,
    int64_t B, int64_t H, int64_t H_kv, int64_t M, int64_t D, float scale, int64_t threads)
{
    int64_t pairs = B * H_kv;
    if (2 * pairs * M * D * (int64_t)sizeof(float) < PARALLEL_BYTES) threads = 1;
    threads = threads < pairs ? threads : pairs;
    threads = threads < MAX_THREADS ? (threads > 1 ? threads : 1) : MAX_THREADS;
    struct one_query_call calls[MAX_THREADS];
    pthread_t started[MAX_THREADS];
    int running[MAX_THREADS] = {0};
    for (int64_t t = 0; t < threads; t++) {
        calls[t] = (struct one_query_call){q, k, v, keep, out, q_sb, q_sh, k_sb, k_sh, k_sm, v_sb, v_sh, v_sm,
                                           keep_sb, H, H_kv, M, D, scale, pairs * t / threads,
                                           pairs * (t + 1) / threads};
        if (t > 0) running[t] = pthread_create(&started[t], 0, one_query_pairs, &calls[t]) == 0;
    }
    one_query_pairs(&calls[0]);
    for (int64_t t = 1; t < threads; t++) {
        if (running[t]) pthread_join(started[t], 0);
        else one_query_pairs(&calls[t]);
    }
}
