/* Gaussian noise from Philox4x32-10 (Salmon et al. 2011, "Parallel random numbers: as easy as
   1, 2, 3"), the counter-based generator torch uses on CUDA, vectorized (the rounds with AVX-512
   or AVX2 intrinsics where the build has them, the rest by the compiler). Compiled at first use by
   trainers/torch_common/philox.py.

   Each Philox block (four 32-bit words) gives two normals by Box-Muller with a 96-bit radius
   uniform (docs/privacy.md, "The noise sampler's tail is inside delta"): u = (w0 2^64 + w1 2^32 +
   w2 + 1/2) 2^-96, never 0, so the radius sqrt(-2 ln u) reaches sqrt(194 ln 2) = 11.596 standard
   deviations (a 32-bit u stops at 6.66, and a neighbour alone on a coordinate is revealed whenever
   its shift carries the noise past that edge); the angle comes from w3. The transform runs in double precision and the
   number is rounded to single precision once, after the multiplication by std.

   The values depend only on (key, n, std, add): every operation is an IEEE-754 add, multiply,
   divide, square root or integer conversion, built with -ffp-contract=off, so a scalar, AVX2 or
   AVX-512 build gives the same bits. */
#include <stdint.h>
#include <string.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u
#define LANES 256 /* counters (Philox blocks) per pass: 512 numbers */

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

/* -2 ln u for a normal double u in (0, 1]: fdlibm's log (Sun Microsystems 1993; also glibc's and
   musl's former one) without its special cases, branch-free so that it vectorizes: u = 2^k (1 + f)
   with 1 + f in [sqrt(2)/2, sqrt(2)), s = f / (2 + f), ln(1 + f) = 2 atanh(s) by its degree-14
   minimax polynomial. Relative error below 4e-16 (tests/trainers/test_noise_reach.py compares it with
   numpy's log at the extreme inputs and on random ones). */
static inline double minus_two_log(double u) {
    union { double d; uint64_t i; } bits = { u };
    uint64_t hx = bits.i >> 32;
    int64_t k = (int64_t)(hx >> 20) - 1023;
    hx &= 0x000fffffu;
    uint64_t half = (hx + 0x95f64u) & 0x100000u; /* the mantissa is >= sqrt(2): halve it */
    bits.i = ((hx | (half ^ 0x3ff00000u)) << 32) | (bits.i & 0xffffffffu);
    k += (int64_t)(half >> 20);
    double f = bits.d - 1.0;
    double s = f / (2.0 + f), z = s * s, w = z * z;
    double t1 = w * (3.999999999940941908e-01 + w * (2.222219843214978396e-01 + w * 1.531383769920937332e-01));
    double t2 = z * (6.666666666666735130e-01 + w * (2.857142874366239149e-01
                     + w * (1.818357216161805012e-01 + w * 1.479819860511658591e-01)));
    double r = t2 + t1, hfsq = 0.5 * f * f, dk = (double)(int32_t)k;
    double ln = dk * 6.93147180369123816490e-01 - ((hfsq - (s * (hfsq + r) + dk * 1.90821492927058770002e-10)) - f);
    return -2.0 * ln;
}

/* One Box-Muller pair from four 32-bit words: *a = r cos(t), *b = r sin(t), with
   r = sqrt(-2 ln u), u = (w0 2^64 + w1 2^32 + w2 + 1/2) 2^-96 in [2^-97, 1] (formed in double from the
   smallest term up: a term only matters when the words before it are 0, so the rounding of the sum
   costs nothing in the tail), and t = 2 pi (w3 + 1/2) 2^-32: the quarter turn from the top 2 bits
   of w3, the offset in (-pi/4, pi/4) from the other 30 (Cephes' sin and cos polynomials, absolute
   error < 2e-16 there, no range reduction needed). The largest radius, at w0 = w1 = w2 = 0, is
   sqrt(194 ln 2) = 11.596. */
static inline void gaussian_pair(uint32_t w0, uint32_t w1, uint32_t w2, uint32_t w3, double *a, double *b) {
    double u = ((double)w2 + 0.5) * 0x1p-96 + (double)w1 * 0x1p-64;
    u += (double)w0 * 0x1p-32;
    double r = __builtin_sqrt(minus_two_log(u));
    double t = ((double)(w3 & 0x3fffffffu) + 0.5) * 0x1p-30 - 0.5;
    double x = t * 1.57079632679489661923, z = x * x;
    double sn = x + x * z * (((((1.58962301576546568060e-10 * z - 2.50507477628578072866e-8) * z
                                + 2.75573136213857245213e-6) * z - 1.98412698295895385996e-4) * z
                              + 8.33333333332211858878e-3) * z - 1.66666666666666307295e-1);
    double cs = 1.0 - 0.5 * z + z * z * (((((-1.13585365213876817300e-11 * z + 2.08757008419747316778e-9) * z
                                            - 2.75573141792967388112e-7) * z + 2.48015872888517045348e-5) * z
                                          - 1.38888888888730564116e-3) * z + 4.16666666666665929218e-2);
    /* Rotate by (w3 >> 30) quarter turns with bit operations, so the loop has no branch: an odd
       quarter maps (cos, sin) to (-sin, cos); the top bit (two quarters) negates both. */
    union { double d; uint64_t u; } bc = { cs }, bs = { sn };
    uint64_t swap = 0u - (uint64_t)((w3 >> 30) & 1u), flip = (uint64_t)(w3 >> 31) << 63;
    uint64_t c1 = (bc.u & ~swap) | ((bs.u ^ 0x8000000000000000u) & swap);
    uint64_t s1 = (bs.u & ~swap) | (bc.u & swap);
    bc.u = c1 ^ flip;
    bs.u = s1 ^ flip;
    *a = r * bc.d;
    *b = r * bs.d;
}

/* The transform alone, on given words (n blocks of 4, in w0 w1 w2 w3 order): out[2 j] and
   out[2 j + 1] are block j's pair, in double precision. The tests feed it the extreme words (the
   sampler's reach) and words with w0 = 0 (its far tail); normal_pass below calls the same code. */
void dpaudit_gaussian_pairs(int64_t n, const uint32_t *words, double *out) {
    for (int64_t j = 0; j < n; j++)
        gaussian_pair(words[4 * j], words[4 * j + 1], words[4 * j + 2], words[4 * j + 3], out + 2 * j, out + 2 * j + 1);
}

/* Numbers per pass: one Box-Muller pair per Philox block. */
#define PASS (2 * LANES)

/* Pass p of the stream under key: 512 numbers std z into dst. Counter (256 p + i, its high word,
   key[2], key[3]) under the Philox key (key[0], key[1]), i < 256, gives words (w0, w1, w2, w3);
   Box-Muller turns them into dst[i] (cos) and dst[256 + i] (sin). So all 128 bits of the key are
   secret. */
static void normal_pass(uint64_t pass, const uint32_t key[4], double std, float *restrict dst) {
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
        double a, b;
        gaussian_pair(c0[i], c1[i], c2[i], c3[i], &a, &b);
        dst[i] = (float)(std * a);
        dst[LANES + i] = (float)(std * b);
    }
}

/* out[i] = std z_i (or out[i] += std z_i when add), i < n, z_i independent N(0, 1): the numbers
   0 .. n - 1 of the stream under key (pass p holds numbers 512 p .. 512 p + 511). */
void dpaudit_philox_normal(float *restrict out, int64_t n, const uint32_t key[4], double std, int add) {
    float z[PASS];
    for (int64_t lo = 0; lo < n; lo += PASS) {
        int64_t m = n - lo < PASS ? n - lo : PASS;
        float *dst = (m == PASS && !add) ? out + lo : z;
        normal_pass((uint64_t)(lo / PASS), key, std, dst);
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
static void add_range(float *restrict out, int64_t start, int64_t n, const uint32_t key[4], double std,
                      double sums[2]) {
    float z[PASS];
    double before = 0.0, added = 0.0;
    int64_t done = 0;
    while (done < n) {
        int64_t at = start + done, pass = at / PASS, offset = at - pass * PASS;
        int64_t m = PASS - offset < n - done ? PASS - offset : n - done;
        normal_pass((uint64_t)pass, key, std, z);
        float *dst = out + done;
        const float *src = z + offset;
        float pass_before = 0.0f, pass_added = 0.0f; /* <= 512 terms: single precision is plenty */
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
                               const uint32_t key[4], double std, double sums[2]) {
    for (int64_t j = 0; j < count; j++) add_range(outs[j], starts[j], lengths[j], key, std, sums);
}
