/* Gaussian noise from Philox4x32-10 (Salmon et al. 2011, "Parallel random numbers: as easy as
   1, 2, 3"), the counter-based generator torch uses on CUDA, vectorized (the rounds with AVX-512
   or AVX2 intrinsics where the build has them, the rest by the compiler): about 4x cheaper per
   number than torch's CPU sampler (mt19937, one scalar stream per generator). Compiled at first
   use by trainers/torch_common/philox.py.

   The values depend only on (key, n, std, add): every operation is an IEEE-754 single-precision
   add, multiply, square root or integer conversion, built with -ffp-contract=off, so a scalar, AVX2
   or AVX-512 build gives the same bits. */
#include <stdint.h>
#include <string.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u
#define LANES 256 /* counters per pass: 1,024 numbers */

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#if defined(__AVX512F__)
/* Ten Philox rounds on LANES counters, 16 at a time in AVX-512 registers. Each 32 x 32 -> 64-bit
   product takes two vpmuludq (even lanes, then odd lanes shifted down) and two masked moves; gcc's own
   vectorization of the portable loop below widens to 64-bit lanes and multiplies with vpmullq, which
   made the rounds ~80% of the sampler's time. Integer arithmetic: the same bits as the portable loop. */
#define VEC 16
typedef __m512i vec;
static inline vec set1(uint32_t v) { return _mm512_set1_epi32((int)v); }
static inline vec load(const uint32_t *p) { return _mm512_loadu_si512(p); }
static inline void store(uint32_t *p, vec v) { _mm512_storeu_si512(p, v); }
static inline vec xor3(vec a, vec b, vec c) { return _mm512_ternarylogic_epi32(a, b, c, 0x96); }
static inline void mulhilo(vec m, vec c, vec *hi, vec *lo) {
    vec even = _mm512_mul_epu32(m, c), odd = _mm512_mul_epu32(m, _mm512_srli_epi64(c, 32));
    *hi = _mm512_mask_mov_epi32(_mm512_srli_epi64(even, 32), 0xAAAA, odd);
    *lo = _mm512_mask_mov_epi32(even, 0xAAAA, _mm512_slli_epi64(odd, 32));
}
#elif defined(__AVX2__)
/* The same with AVX2 registers, 8 counters at a time. */
#define VEC 8
typedef __m256i vec;
static inline vec set1(uint32_t v) { return _mm256_set1_epi32((int)v); }
static inline vec load(const uint32_t *p) { return _mm256_loadu_si256((const __m256i *)p); }
static inline void store(uint32_t *p, vec v) { _mm256_storeu_si256((__m256i *)p, v); }
static inline vec xor3(vec a, vec b, vec c) { return _mm256_xor_si256(_mm256_xor_si256(a, b), c); }
static inline void mulhilo(vec m, vec c, vec *hi, vec *lo) {
    vec even = _mm256_mul_epu32(m, c), odd = _mm256_mul_epu32(m, _mm256_srli_epi64(c, 32));
    *hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
    *lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
}
#endif

#ifdef VEC
static void philox_rounds(uint32_t *restrict c0, uint32_t *restrict c1, uint32_t *restrict c2,
                          uint32_t *restrict c3, uint32_t k0, uint32_t k1) {
    const vec m0 = set1(PHILOX_M0), m1 = set1(PHILOX_M1);
    for (int i = 0; i < LANES; i += VEC) {
        vec x0 = load(c0 + i), x1 = load(c1 + i), x2 = load(c2 + i), x3 = load(c3 + i);
        uint32_t a = k0, b = k1;
        for (int round = 0; round < 10; round++) {
            vec hi0, lo0, hi1, lo1;
            mulhilo(m0, x0, &hi0, &lo0);
            mulhilo(m1, x2, &hi1, &lo1);
            x0 = xor3(hi1, x1, set1(a));
            x2 = xor3(hi0, x3, set1(b));
            x1 = lo1;
            x3 = lo0;
            a += PHILOX_W0;
            b += PHILOX_W1;
        }
        store(c0 + i, x0);
        store(c1 + i, x1);
        store(c2 + i, x2);
        store(c3 + i, x3);
    }
}
#else
/* Ten Philox rounds on LANES counters at once (structure of arrays, so each round is one vector
   loop of 32x32 -> 64-bit multiplies). */
static void philox_rounds(uint32_t *restrict c0, uint32_t *restrict c1, uint32_t *restrict c2,
                          uint32_t *restrict c3, uint32_t k0, uint32_t k1) {
    for (int round = 0; round < 10; round++) {
        _Pragma("omp simd")
        for (int i = 0; i < LANES; i++) {
            uint64_t p0 = (uint64_t)PHILOX_M0 * c0[i];
            uint64_t p1 = (uint64_t)PHILOX_M1 * c2[i];
            uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1[i] ^ k0;
            uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3[i] ^ k1;
            c1[i] = (uint32_t)p1;
            c3[i] = (uint32_t)p0;
            c0[i] = n0;
            c2[i] = n2;
        }
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
}
#endif

/* One Philox4x32-10 block, for the known-answer test against Random123's published vectors. */
void dpaudit_philox4x32_10(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c[4][LANES];
    memset(c, 0, sizeof c);
    for (int j = 0; j < 4; j++) c[j][0] = counter[j];
    philox_rounds(c[0], c[1], c[2], c[3], key[0], key[1]);
    for (int j = 0; j < 4; j++) out[j] = c[j][0];
}

/* Box-Muller radius sqrt(-2 ln u) of u = (floor(w / 2) + 1/2) 2^-31 in (0, 1): u >= 2^-32, so the
   radius reaches 6.66 (torch's CPU sampler, 24-bit u, stops at 5.77). ln is Cephes' logf
   polynomial on the mantissa; checked over all 2^31 inputs: relative error < 1e-7, never NaN. */
static inline float radius(uint32_t w) {
    float u = ((float)(int32_t)(w >> 1) + 0.5f) * 4.656612873077393e-10f;
    union { float f; int32_t i; } bits = { u };
    int32_t e = ((bits.i >> 23) & 0xff) - 126;
    bits.i = (bits.i & 0x007fffff) | 0x3f000000; /* mantissa in [1/2, 1) */
    float x = bits.f;
    int32_t below = x < 0.707106781186547524f;
    e -= below;
    x = x * (float)(1 + below) - 1.0f; /* in [sqrt(1/2) - 1, sqrt(2) - 1); the doubling is exact */
    float z = x * x;
    float y = 7.0376836292e-2f;
    y = y * x - 1.1514610310e-1f;
    y = y * x + 1.1676998740e-1f;
    y = y * x - 1.2420140846e-1f;
    y = y * x + 1.4249322787e-1f;
    y = y * x - 1.6668057665e-1f;
    y = y * x + 2.0000714765e-1f;
    y = y * x - 2.4999993993e-1f;
    y = y * x + 3.3333331174e-1f;
    y = y * x * z;
    float fe = (float)e;
    y += -2.12194440e-4f * fe;
    y += -0.5f * z;
    float ln = x + y + 0.693359375f * fe; /* <= 0 for every input */
    return __builtin_sqrtf(-2.0f * ln);
}

/* (cos, sin) of a uniform angle: the quarter turn from the top 2 bits of w, the offset in
   [-pi/4, pi/4) from the other 30 (Cephes' sinf/cosf polynomials, no range reduction needed);
   checked over all 2^32 inputs: absolute error < 1e-7. */
static inline void circle(uint32_t w, float *c, float *s) {
    float t = ((float)(int32_t)(w & 0x3fffffffu) + 0.5f) * 9.313225746154785e-10f - 0.5f;
    float a = t * 1.5707963267948966f, z = a * a;
    float sn = a + a * z * ((-1.9515295891e-4f * z + 8.3321608736e-3f) * z - 1.6666654611e-1f);
    float cs = 1.0f - 0.5f * z + z * z * ((2.443315711809948e-5f * z - 1.388731625493765e-3f) * z + 4.166664568298827e-2f);
    /* Rotate by (w >> 30) quarter turns with bit operations, so the loop has no branch: an odd
       quarter maps (cos, sin) to (-sin, cos); the top bit (two quarters) negates both. */
    union { float f; uint32_t u; } bc = { cs }, bs = { sn };
    uint32_t swap = 0u - ((w >> 30) & 1u), flip = w & 0x80000000u;
    uint32_t c1 = (bc.u & ~swap) | ((bs.u ^ 0x80000000u) & swap);
    uint32_t s1 = (bs.u & ~swap) | (bc.u & swap);
    bc.u = c1 ^ flip;
    bs.u = s1 ^ flip;
    *c = bc.f;
    *s = bs.f;
}

/* Pass p of the stream under key: 1,024 numbers std z into dst. Counter (256 p + i, its high word,
   key[2], key[3]) under the Philox key (key[0], key[1]), i < 256, gives words (w0, w1, w2, w3);
   Box-Muller turns (w0, w1) into dst[i] and dst[256 + i], (w2, w3) into the next two quarters. So all
   128 bits of the key are secret. */
static void normal_pass(uint64_t pass, const uint32_t key[4], float std, float *restrict dst) {
    uint32_t c0[LANES], c1[LANES], c2[LANES], c3[LANES];
    uint64_t first = pass * LANES;
    _Pragma("omp simd")
    for (int i = 0; i < LANES; i++) {
        uint64_t block = first + (uint64_t)i;
        c0[i] = (uint32_t)block;
        c1[i] = (uint32_t)(block >> 32);
        c2[i] = key[2];
        c3[i] = key[3];
    }
    philox_rounds(c0, c1, c2, c3, key[0], key[1]);
    _Pragma("omp simd")
    for (int i = 0; i < LANES; i++) {
        float r0 = radius(c0[i]), r1 = radius(c2[i]), cos0, sin0, cos1, sin1;
        circle(c1[i], &cos0, &sin0);
        circle(c3[i], &cos1, &sin1);
        dst[i] = std * (r0 * cos0);
        dst[LANES + i] = std * (r0 * sin0);
        dst[2 * LANES + i] = std * (r1 * cos1);
        dst[3 * LANES + i] = std * (r1 * sin1);
    }
}

/* out[i] = std z_i (or out[i] += std z_i when add), i < n, z_i independent N(0, 1): the numbers
   0 .. n - 1 of the stream under key (pass p holds numbers 1024 p .. 1024 p + 1023). */
void dpaudit_philox_normal(float *restrict out, int64_t n, const uint32_t key[4], float std, int add) {
    float z[4 * LANES];
    for (int64_t lo = 0; lo < n; lo += 4 * LANES) {
        int64_t m = n - lo < 4 * LANES ? n - lo : 4 * LANES;
        float *dst = (m == 4 * LANES && !add) ? out + lo : z;
        normal_pass((uint64_t)(lo / (4 * LANES)), key, std, dst);
        if (dst == z) {
            if (add) {
                for (int64_t i = 0; i < m; i++) out[lo + i] += z[i];
            } else {
                memcpy(out + lo, z, (size_t)m * sizeof(float));
            }
        }
    }
}

/* out[i] += std z_{start + i}, i < n: numbers start .. start + n - 1 of the same stream, added in
   place; sums[0] += sum of out[i]^2 before the add and sums[1] += sum of (std z)^2 (in single
   precision within a pass, in double across passes). One pass over out gives the noised sum and
   both squared norms (the trainers' gradient-SNR telemetry), where a separate noise buffer costs a
   write, two norm passes and an add pass more. */
static void add_range(float *restrict out, int64_t start, int64_t n, const uint32_t key[4], float std,
                      double sums[2]) {
    float z[4 * LANES];
    double before = 0.0, added = 0.0;
    int64_t done = 0;
    while (done < n) {
        int64_t at = start + done, pass = at / (4 * LANES), offset = at - pass * 4 * LANES;
        int64_t m = 4 * LANES - offset < n - done ? 4 * LANES - offset : n - done;
        normal_pass((uint64_t)pass, key, std, z);
        float *dst = out + done;
        const float *src = z + offset;
        float pass_before = 0.0f, pass_added = 0.0f; /* <= 1,024 terms: single precision is plenty */
        _Pragma("omp simd reduction(+:pass_before, pass_added)")
        for (int64_t i = 0; i < m; i++) {
            float g = dst[i], v = src[i];
            pass_before += g * g;
            pass_added += v * v;
            dst[i] = g + v;
        }
        before += pass_before;
        added += pass_added;
        done += m;
    }
    sums[0] += before;
    sums[1] += added;
}

/* add_range over `count` stretches of one stream: outs[j] (lengths[j] floats) gets the numbers
   starts[j] .. starts[j] + lengths[j] - 1. One call for a piece of the noise that spans many
   tensors (a BERT's ~200 parameters), instead of one call per tensor. */
void dpaudit_philox_add_ranges(int64_t count, float *const *outs, const int64_t *starts, const int64_t *lengths,
                               const uint32_t key[4], float std, double sums[2]) {
    for (int64_t j = 0; j < count; j++) add_range(outs[j], starts[j], lengths[j], key, std, sums);
}
