// Fused softmax attention for small head dims on CPU (float32), forward and backward.
//
// Plain C++ with GCC/Clang vector extensions (AVX-512 intrinsics for 2^x where available): no
// torch headers, so a cold build takes seconds. Called through ctypes from
// lengen/kernels/small_attention.py; parallel over (batch, head) with OpenMP, i.e. the libgomp
// torch has already loaded, so one thread pool.
//
// Layout: the VL lanes of a vector hold VL consecutive *queries*. A query block's scores against
// one key are then one vector (q . k_j for VL queries = D FMAs with k_j[c] broadcast), and the
// softmax over keys is a reduction across vectors, never across lanes: no horizontal sums
// anywhere in the forward pass. Keys are visited in chunks of KC with an online (rescaled)
// softmax, so the memory is O(VL * KC) per thread whatever the sequence length. Scores are kept
// in log2 units (log2 e folded into the query scale) so the exponential is a bare 2^x.
//
// Backward (flash-attention style, the log-sum-exp saved by the forward): per tile of VL
// queries x VL keys, recompute P, then dP = dO V^T, dS = P (dP - rowsum(dO * O)); dQ accumulates
// with lanes = queries; the P and dS tiles are transposed in registers (butterflies of two-input
// shuffles, vpermt2ps on AVX-512) so dK and dV accumulate with lanes = keys, again without
// horizontal sums. Head dims up to 16 (known at compile time) live in registers; wider ones (the
// 72-wide q/k of the relative encoding) go through register-blocked column passes.
//
// Semantics: F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale), plus an
// optional causal mask where the Tq queries are the last Tq of the Tk keys.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <utility>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#ifndef LG_VL
#if defined(__AVX512F__)
#define LG_VL 16  // one zmm register
#else
#define LG_VL 8   // one ymm register (AVX2), two NEON registers
#endif
#endif

namespace {

constexpr int VL = LG_VL;   // lanes per vector
constexpr int KC = 64;      // keys per online-softmax chunk in the forward pass
constexpr int MAXD = 256;   // largest head dim handled (the Python side checks)
constexpr int SMALLD = 16;  // head dims up to this, known at compile time, stay in registers

typedef float vf __attribute__((vector_size(VL * 4)));
typedef int32_t vi __attribute__((vector_size(VL * 4)));
typedef float vfu __attribute__((vector_size(VL * 4), aligned(4)));  // unaligned access

static inline vf bc(float x) {  // broadcast (vf{} + x would be an add, kept for -0.0)
    const vf r = {x};
    return __builtin_shuffle(r, vi{});
}
static inline vf loadu(const float* p) { return *reinterpret_cast<const vfu*>(p); }
static inline void storeu(float* p, vf x) { *reinterpret_cast<vfu*>(p) = x; }
static inline vf vmax(vf a, vf b) { return a > b ? a : b; }

// The first n (< VL) lanes from / to memory, the others 0 / untouched. Masked moves where
// AVX-512 has them; no local's address is taken either way (that would pin it in memory).
static inline vf load_n(const float* p, int n) {
#if defined(__AVX512F__) && LG_VL == 16
    return (vf)_mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1), p);
#elif defined(__AVX512VL__) && LG_VL == 8
    return (vf)_mm256_maskz_loadu_ps((__mmask8)((1u << n) - 1), p);
#else
    vf x = vf{};
    for (int l = 0; l < n; ++l) x[l] = p[l];
    return x;
#endif
}

static inline void store_n(float* p, vf x, int n) {
#if defined(__AVX512F__) && LG_VL == 16
    _mm512_mask_storeu_ps(p, (__mmask16)((1u << n) - 1), (__m512)x);
#elif defined(__AVX512VL__) && LG_VL == 8
    _mm256_mask_storeu_ps(p, (__mmask8)((1u << n) - 1), (__m256)x);
#else
    for (int l = 0; l < n; ++l) p[l] = x[l];
#endif
}

static inline vf lane_index() {
    vf r;
    for (int l = 0; l < VL; ++l) r[l] = (float)l;
    return r;
}

// 2^x for x <= 127 (here always x <= ~0; scores are kept in log2 units, log2(e) being folded
// into the query scale): round-to-nearest split x = n + f, |f| <= 1/2, a degree-5 polynomial for
// 2^f (relative error 2e-7), then scaling by 2^n. Exactly 0 far below (so -inf gives 0, not NaN).
static inline vf vexp2(vf x) {
#if defined(__AVX512F__) && LG_VL == 16
    x = vmax(x, bc(-200.0f));
    const vf n = (vf)_mm512_roundscale_ps((__m512)x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
#elif defined(__AVX512VL__) && LG_VL == 8
    x = vmax(x, bc(-200.0f));
    const vf n = (vf)_mm256_roundscale_ps((__m256)x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
#else
    const vi tiny = x < -126.0f;
    x = vmax(x, bc(-126.0f));
    const vf n = (x + 12582912.0f) - 12582912.0f;  // round to nearest (|x| < 2^22)
#endif
    const vf f = x - n;
    vf p = bc(1.3292095391e-3f);
    p = p * f + 9.6756937e-3f;
    p = p * f + 5.5506654e-2f;
    p = p * f + 2.4022116e-1f;
    p = p * f + 6.9314700e-1f;
    p = p * f + 1.0000001192f;
#if defined(__AVX512F__) && LG_VL == 16
    return (vf)_mm512_scalef_ps((__m512)p, (__m512)n);
#elif defined(__AVX512VL__) && LG_VL == 8
    return (vf)_mm256_scalef_ps((__m256)p, (__m256)n);
#else
    const vf scale = (vf)((__builtin_convertvector(n, vi) + 127) << 23);
    return tiny ? vf{} : p * scale;
#endif
}

constexpr float LOG2E = 1.44269504088896341f;

// In-register VL x VL transpose: log2(VL) butterfly stages of two-input shuffles (vpermt2ps),
// stage K exchanging the K-blocks of rows r and r + K. Masks are compile-time constants.
template <int K, bool First, int... L>
static inline vi tmask(std::integer_sequence<int, L...>) {
    return vi{(First ? ((L & K) ? VL + L - K : L) : ((L & K) ? VL + L : L + K))...};
}

template <int K>
__attribute__((always_inline)) static inline void tstage(vf* t) {
    const vi ma = tmask<K, true>(std::make_integer_sequence<int, VL>{});
    const vi mb = tmask<K, false>(std::make_integer_sequence<int, VL>{});
#pragma GCC unroll 64
    for (int r = 0; r < VL; ++r) {
        if (r & K) continue;
        const vf a = t[r], b = t[r + K];
        t[r] = __builtin_shuffle(a, b, ma);
        t[r + K] = __builtin_shuffle(a, b, mb);
    }
}

__attribute__((always_inline)) static inline void transpose(vf* x) {
    vf t[VL];
#pragma GCC unroll 64
    for (int r = 0; r < VL; ++r) t[r] = x[r];
    if constexpr (VL >= 16) tstage<8>(t);
    if constexpr (VL >= 8) tstage<4>(t);
    tstage<2>(t);
    tstage<1>(t);
#pragma GCC unroll 64
    for (int r = 0; r < VL; ++r) x[r] = t[r];
}

struct Args {
    int64_t B, H, Tq, Tk, D, DV;
    int64_t causal, nthreads, accum_bias_over_batch;
    double scale;
    const float* q; int64_t sq[3];
    const float* k; int64_t sk[3];
    const float* v; int64_t sv[3];
    const float* bias; int64_t sb[3];  // [b, h, i] strides; the key axis is contiguous
    float* o; int64_t so[3];
    float* lse; int64_t sl[2];         // [b, h] strides; the query axis is contiguous
    const float* dout; int64_t sdo[3];
    float* dq; int64_t sdq[3];
    float* dk; int64_t sdk[3];
    float* dv; int64_t sdv[3];
    float* dbias; int64_t sdb[3];      // accumulated (+=) into a zeroed buffer
};

// Load the bias tile rows i0..i0+qn-1, keys j0..j0+jn-1, transposed: out[jj][lane].
static inline void bias_tile(const float* bias, int64_t bs, int64_t i0, int qn, int64_t j0, int jn, vf* out) {
    if (jn == VL) {
        for (int l = 0; l < qn; ++l) out[l] = loadu(bias + (i0 + l) * bs + j0);
    } else {
        for (int l = 0; l < qn; ++l) out[l] = load_n(bias + (i0 + l) * bs + j0, jn);
    }
    for (int l = qn; l < VL; ++l) out[l] = vf{};
    transpose(out);
}

// Rows <-> column vectors for a dim CN <= VL known at compile time, through one in-register
// transpose of a VL x VL tile t instead of CN * VL scalar moves:
//   load_tile:  t[c][r] = src[r * stride + c]  (r < rn, c < CN; other entries 0)
//   store_tile: dst[r * stride + c] = t[c][r]  (r < rn, c < CN; t is clobbered)
// Callers copy between t and their own arrays element by element, so that register-resident
// arrays never have their address taken.
template <int CN>
__attribute__((always_inline)) static inline void load_tile(vf* t, const float* src, int64_t stride, int rn) {
    static_assert(CN <= VL, "one tile");
#pragma GCC unroll 64
    for (int r = 0; r < VL; ++r) t[r] = r < rn ? (CN == VL ? loadu(src + r * stride) : load_n(src + r * stride, CN)) : vf{};
    transpose(t);
}

template <int CN>
__attribute__((always_inline)) static inline void store_tile(vf* t, float* dst, int64_t stride, int rn) {
    static_assert(CN <= VL, "one tile");
#pragma GCC unroll 64
    for (int c = CN; c < VL; ++c) t[c] = vf{};
    transpose(t);
#pragma GCC unroll 64
    for (int r = 0; r < VL; ++r)
        if (r < rn) {
            if constexpr (CN == VL) storeu(dst + r * stride, t[r]);
            else store_n(dst + r * stride, t[r], CN);
        }
}

template <int DT>
constexpr bool one_tile() { return DT != 0 && DT <= VL; }

// ---------------------------------------------------------------------------------------------
// Register-blocked building blocks for head dims too wide to keep in registers. A column block
// of CN vectors stays in registers while the rows stream by, each row element broadcast.
//
//   dot:  s[n][t] += sum_c x[n][c] * M[t][c]     (scores q.k_t; dP = dO . v_t)
//   axpy: acc[n][c] += sum_t w[n][t] * M[t][c]   (P V; dQ += dS K; dK += dS^T Q; dV += P^T dO)
//
// x, acc: NQ rows of vectors (row stride xs / as); s, w: NQ rows (stride ss / ws); M: tn rows
// of floats (stride ms).

template <int NQ, int CN>
static inline void dot_cols(vf* s, int ss, const vf* x, int xs, const float* M, int64_t ms, int tn) {
    // TB rows at a time: NQ * TB independent FMA chains instead of NQ long ones
    constexpr int TB = NQ == 1 ? 4 : 2;
    vf xr[NQ][CN];
    #pragma GCC unroll 32
    for (int n = 0; n < NQ; ++n)
        #pragma GCC unroll 32
        for (int c = 0; c < CN; ++c) xr[n][c] = x[n * xs + c];
    int t = 0;
    for (; t + TB <= tn; t += TB) {
        vf a[NQ][TB];
        #pragma GCC unroll 32
        for (int n = 0; n < NQ; ++n)
            #pragma GCC unroll 32
            for (int u = 0; u < TB; ++u) a[n][u] = s[n * ss + t + u];
        #pragma GCC unroll 32
        for (int c = 0; c < CN; ++c)
            #pragma GCC unroll 32
            for (int u = 0; u < TB; ++u) {
                const vf b = bc(M[(t + u) * ms + c]);
                #pragma GCC unroll 32
                for (int n = 0; n < NQ; ++n) a[n][u] += xr[n][c] * b;
            }
        #pragma GCC unroll 32
        for (int n = 0; n < NQ; ++n)
            #pragma GCC unroll 32
            for (int u = 0; u < TB; ++u) s[n * ss + t + u] = a[n][u];
    }
    for (; t < tn; ++t) {
        const float* m = M + t * ms;
        vf a[NQ];
        #pragma GCC unroll 32
        for (int n = 0; n < NQ; ++n) a[n] = s[n * ss + t];
        #pragma GCC unroll 32
        for (int c = 0; c < CN; ++c) {
            const vf b = bc(m[c]);
            #pragma GCC unroll 32
            for (int n = 0; n < NQ; ++n) a[n] += xr[n][c] * b;
        }
        #pragma GCC unroll 32
        for (int n = 0; n < NQ; ++n) s[n * ss + t] = a[n];
    }
}

template <int NQ, int CN>
static inline void axpy_cols(vf* acc, int as, const vf* w, int ws, const float* M, int64_t ms, int tn) {
    vf ar[NQ][CN];
    #pragma GCC unroll 32
    for (int n = 0; n < NQ; ++n)
        #pragma GCC unroll 32
        for (int c = 0; c < CN; ++c) ar[n][c] = acc[n * as + c];
    for (int t = 0; t < tn; ++t) {
        const float* m = M + t * ms;
        vf wt[NQ];
        #pragma GCC unroll 32
        for (int n = 0; n < NQ; ++n) wt[n] = w[n * ws + t];
        #pragma GCC unroll 32
        for (int c = 0; c < CN; ++c) {
            const vf b = bc(m[c]);
            #pragma GCC unroll 32
            for (int n = 0; n < NQ; ++n) ar[n][c] += wt[n] * b;
        }
    }
    #pragma GCC unroll 32
    for (int n = 0; n < NQ; ++n)
        #pragma GCC unroll 32
        for (int c = 0; c < CN; ++c) acc[n * as + c] = ar[n][c];
}

// Column block width: as wide as the registers allow (NQ * CN accumulators), a divisor of D
// when one is close.
constexpr int block_width(int nq, int d) {
    const int mx = nq == 1 ? 24 : 12;
    if (d <= mx) return d;
    for (int c = mx; c >= mx / 2; --c)
        if (d % c == 0) return c;
    return mx;
}

template <bool Dot, int NQ, int CN>
static inline void cols(vf* s, int ss, const vf* x, int xs, const float* M, int64_t ms, int tn) {
    if constexpr (CN > 0) {
        if constexpr (Dot) dot_cols<NQ, CN>(s, ss, x, xs, M, ms, tn);
        else axpy_cols<NQ, CN>(s, ss, x, xs, M, ms, tn);
    }
}

// All D columns: compile-time blocks when DT is known, blocks of 8 and a tail otherwise.
template <bool Dot, int NQ, int DT>
static inline void all_cols(vf* s, int ss, const vf* x, int xs, const float* M, int64_t ms, int tn, int D) {
    if constexpr (DT != 0) {
        constexpr int CB = block_width(NQ, DT);
        int c0 = 0;
        for (; c0 + CB <= DT; c0 += CB) {
            if constexpr (Dot) cols<Dot, NQ, CB>(s, ss, x + c0, xs, M + c0, ms, tn);
            else cols<Dot, NQ, CB>(s + c0, ss, x, xs, M + c0, ms, tn);
        }
        if constexpr (Dot) cols<Dot, NQ, DT % CB>(s, ss, x + c0, xs, M + c0, ms, tn);
        else cols<Dot, NQ, DT % CB>(s + c0, ss, x, xs, M + c0, ms, tn);
    } else {
        int c0 = 0;
        for (; c0 + 8 <= D; c0 += 8) {
            if constexpr (Dot) cols<Dot, NQ, 8>(s, ss, x + c0, xs, M + c0, ms, tn);
            else cols<Dot, NQ, 8>(s + c0, ss, x, xs, M + c0, ms, tn);
        }
        vf* so = Dot ? s : s + c0;
        const vf* xo = Dot ? x + c0 : x;
        switch (D - c0) {
            case 1: cols<Dot, NQ, 1>(so, ss, xo, xs, M + c0, ms, tn); break;
            case 2: cols<Dot, NQ, 2>(so, ss, xo, xs, M + c0, ms, tn); break;
            case 3: cols<Dot, NQ, 3>(so, ss, xo, xs, M + c0, ms, tn); break;
            case 4: cols<Dot, NQ, 4>(so, ss, xo, xs, M + c0, ms, tn); break;
            case 5: cols<Dot, NQ, 5>(so, ss, xo, xs, M + c0, ms, tn); break;
            case 6: cols<Dot, NQ, 6>(so, ss, xo, xs, M + c0, ms, tn); break;
            case 7: cols<Dot, NQ, 7>(so, ss, xo, xs, M + c0, ms, tn); break;
            default: break;
        }
    }
}

template <int DT>
constexpr bool in_registers() { return DT != 0 && DT <= SMALLD; }

// ---------------------------------------------------------------------------------------------
// forward

template <int DT, int DVT, int NQ>
static void fwd_block(const Args& a, const float* Q, const float* K, const float* V, const float* Bi,
                      float* O, float* L, int64_t i0) {
    constexpr bool smallD = in_registers<DT>(), smallDV = in_registers<DVT>();
    constexpr int DA = DT ? DT : MAXD, DVA = DVT ? DVT : MAXD;
    const int D = DT ? DT : (int)a.D;
    const int DV = DVT ? DVT : (int)a.DV;
    const int64_t Tq = a.Tq, Tk = a.Tk, off = Tk - Tq;
    const int64_t qs = a.sq[2], ks = a.sk[2], vs = a.sv[2], bs = a.sb[2], os = a.so[2];
    const float scale = (float)a.scale * LOG2E;  // scores in log2 units
    const int qn = (int)std::min<int64_t>(NQ * VL, Tq - i0);

    vf qv[NQ][DA];
    if constexpr (one_tile<DT>()) {
        for (int n = 0; n < NQ; ++n) {
            vf t[VL];
            load_tile<DT>(t, Q + (i0 + n * VL) * qs, qs, std::min(VL, qn - n * VL));
            for (int c = 0; c < DT; ++c) qv[n][c] = t[c] * scale;
        }
    } else {
        for (int n = 0; n < NQ; ++n)
            for (int c = 0; c < D; ++c) qv[n][c] = vf{};
        for (int r = 0; r < qn; ++r) {
            const float* qr = Q + (i0 + r) * qs;
            for (int c = 0; c < D; ++c) qv[r / VL][c][r % VL] = qr[c] * scale;
        }
    }

    vf m[NQ], l[NQ], acc[NQ][DVA];
    for (int n = 0; n < NQ; ++n) {
        m[n] = bc(-INFINITY);
        l[n] = vf{};
        for (int c = 0; c < DV; ++c) acc[n][c] = vf{};
    }
    const vf lanes = lane_index();
    const int64_t jmax = a.causal ? std::min<int64_t>(Tk, i0 + qn + off) : Tk;

    vf sbuf[NQ][KC];
    vf btile[NQ][KC];
    for (int64_t j0 = 0; j0 < jmax; j0 += KC) {
        const int jn = (int)std::min<int64_t>(KC, jmax - j0);
        if (Bi) {
            for (int n = 0; n < NQ; ++n) {
                const int64_t in0 = i0 + n * VL;
                const int rn = (int)std::max<int64_t>(0, std::min<int64_t>(VL, Tq - in0));
                for (int t = 0; t < jn; t += VL)
                    bias_tile(Bi, bs, in0, rn, j0 + t, std::min(VL, jn - t), &btile[n][t]);
            }
        }
        if constexpr (!smallD) {  // scores, column block by column block
            for (int n = 0; n < NQ; ++n)
                for (int jj = 0; jj < jn; ++jj) sbuf[n][jj] = Bi ? btile[n][jj] * LOG2E : vf{};
            all_cols<true, NQ, DT>(&sbuf[0][0], KC, &qv[0][0], DA, K + j0 * ks, ks, jn, D);
        }
        vf mc[NQ];
        for (int n = 0; n < NQ; ++n) mc[n] = m[n];
        for (int jj = 0; jj < jn; ++jj) {
            const int64_t j = j0 + jj;
            vf s[NQ];
            if constexpr (smallD) {
                const float* kr = K + j * ks;
                for (int n = 0; n < NQ; ++n) s[n] = Bi ? btile[n][jj] * LOG2E : vf{};
                for (int c = 0; c < D; ++c) {
                    const vf kc = bc(kr[c]);
                    for (int n = 0; n < NQ; ++n) s[n] += qv[n][c] * kc;
                }
            } else {
                for (int n = 0; n < NQ; ++n) s[n] = sbuf[n][jj];
            }
            if (a.causal && j > i0 + off) {
                for (int n = 0; n < NQ; ++n) {
                    // masked where j > i + off, i = i0 + n*VL + lane
                    const float lim = (float)(j - off - i0 - n * VL);
                    s[n] = lanes < lim ? bc(-INFINITY) : s[n];
                }
            }
            for (int n = 0; n < NQ; ++n) {
                sbuf[n][jj] = s[n];
                mc[n] = vmax(mc[n], s[n]);
            }
        }
        vf ms[NQ];
        for (int n = 0; n < NQ; ++n) {
            ms[n] = mc[n] == -INFINITY ? vf{} : mc[n];
            const vf alpha = vexp2(m[n] - ms[n]);
            l[n] *= alpha;
            for (int c = 0; c < DV; ++c) acc[n][c] *= alpha;
            m[n] = mc[n];
        }
        if constexpr (smallDV) {
            for (int jj = 0; jj < jn; ++jj) {
                const float* vr = V + (j0 + jj) * vs;
                vf p[NQ];
                for (int n = 0; n < NQ; ++n) {
                    p[n] = vexp2(sbuf[n][jj] - ms[n]);
                    l[n] += p[n];
                }
                for (int c = 0; c < DV; ++c) {
                    const vf vc = bc(vr[c]);
                    for (int n = 0; n < NQ; ++n) acc[n][c] += p[n] * vc;
                }
            }
        } else {
            for (int jj = 0; jj < jn; ++jj)
                for (int n = 0; n < NQ; ++n) {
                    const vf p = vexp2(sbuf[n][jj] - ms[n]);
                    l[n] += p;
                    sbuf[n][jj] = p;
                }
            all_cols<false, NQ, DVT>(&acc[0][0], DVA, &sbuf[0][0], KC, V + j0 * vs, vs, jn, DV);
        }
    }
    for (int n = 0; n < NQ; ++n) {
        const vf inv = 1.0f / l[n];
        for (int c = 0; c < DV; ++c) acc[n][c] *= inv;
    }
    if constexpr (one_tile<DVT>()) {
        for (int n = 0; n < NQ; ++n) {
            vf t[VL];
            for (int c = 0; c < DVT; ++c) t[c] = acc[n][c];
            store_tile<DVT>(t, O + (i0 + n * VL) * os, os, std::min(VL, qn - n * VL));
        }
    } else {
        for (int r = 0; r < qn; ++r) {
            float* orow = O + (i0 + r) * os;
            for (int c = 0; c < DV; ++c) orow[c] = acc[r / VL][c][r % VL];
        }
    }
    if (L) {
        // copies: lane access by a runtime index must not pin the loop state m, l in memory
        float ms[NQ * VL], ls[NQ * VL];
        for (int n = 0; n < NQ; ++n) {
            const vf mm = m[n] == -INFINITY ? vf{} : m[n];
            std::memcpy(ms + n * VL, &mm, sizeof(vf));
            std::memcpy(ls + n * VL, &l[n], sizeof(vf));
        }
        for (int r = 0; r < qn; ++r) L[i0 + r] = ms[r] + std::log2(ls[r]);  // log2 units
    }
}

template <int DT, int DVT>
static void fwd_bh(const Args& a, int64_t b, int64_t h) {
    const float* Q = a.q + b * a.sq[0] + h * a.sq[1];
    const float* K = a.k + b * a.sk[0] + h * a.sk[1];
    const float* V = a.v + b * a.sv[0] + h * a.sv[1];
    const float* Bi = a.bias ? a.bias + b * a.sb[0] + h * a.sb[1] : nullptr;
    float* O = a.o + b * a.so[0] + h * a.so[1];
    float* L = a.lse ? a.lse + b * a.sl[0] + h * a.sl[1] : nullptr;
    int64_t i0 = 0;
    for (; i0 + VL < a.Tq; i0 += 2 * VL) fwd_block<DT, DVT, 2>(a, Q, K, V, Bi, O, L, i0);
    if (i0 < a.Tq) fwd_block<DT, DVT, 1>(a, Q, K, V, Bi, O, L, i0);
}

// ---------------------------------------------------------------------------------------------
// backward

struct Workspace {
    vf* dk = nullptr;  // [ceil(Tk / VL)][D]: dK^T per key tile, lanes = keys
    vf* dv = nullptr;  // [ceil(Tk / VL)][DV]
    ~Workspace() { std::free(dk); std::free(dv); }
};

template <int DT, int DVT>
static void bwd_bh(const Args& a, int64_t b, int64_t h, Workspace& w) {
    constexpr bool smallD = in_registers<DT>(), smallDV = in_registers<DVT>();
    constexpr int DA = DT ? DT : MAXD, DVA = DVT ? DVT : MAXD;
    const int D = DT ? DT : (int)a.D;
    const int DV = DVT ? DVT : (int)a.DV;
    const int64_t Tq = a.Tq, Tk = a.Tk, off = Tk - Tq;
    const float scale = (float)a.scale;
    const float* Q = a.q + b * a.sq[0] + h * a.sq[1];
    const float* K = a.k + b * a.sk[0] + h * a.sk[1];
    const float* V = a.v + b * a.sv[0] + h * a.sv[1];
    const float* O = a.o + b * a.so[0] + h * a.so[1];
    const float* dO = a.dout + b * a.sdo[0] + h * a.sdo[1];
    const float* L = a.lse + b * a.sl[0] + h * a.sl[1];
    const float* Bi = a.bias ? a.bias + b * a.sb[0] + h * a.sb[1] : nullptr;
    float* dBi = a.dbias ? a.dbias + b * a.sdb[0] + h * a.sdb[1] : nullptr;
    const int64_t qs = a.sq[2], ks = a.sk[2], vs = a.sv[2], os = a.so[2], dos = a.sdo[2], bs = a.sb[2],
                  dbs = a.sdb[2];
    const int64_t nkt = (Tk + VL - 1) / VL;
    for (int64_t t = 0; t < nkt * D; ++t) w.dk[t] = vf{};
    for (int64_t t = 0; t < nkt * DV; ++t) w.dv[t] = vf{};
    const vf lanes = lane_index();

    for (int64_t i0 = 0; i0 < Tq; i0 += VL) {
        const int qn = (int)std::min<int64_t>(VL, Tq - i0);
        vf qv[DA], dov[DVA], dq[DA];
        for (int c = 0; c < D; ++c) dq[c] = vf{};
        vf lse = vf{}, Di = vf{};
        if constexpr (one_tile<DT>()) {
            vf t[VL];
            load_tile<DT>(t, Q + i0 * qs, qs, qn);
            for (int c = 0; c < DT; ++c) qv[c] = t[c] * (scale * LOG2E);
        } else {
            for (int c = 0; c < D; ++c) qv[c] = vf{};
            for (int r = 0; r < qn; ++r) {
                const float* qr = Q + (i0 + r) * qs;
                for (int c = 0; c < D; ++c) qv[c][r] = qr[c] * (scale * LOG2E);
            }
        }
        if constexpr (one_tile<DVT>()) {  // Di = rowsum(dO * O)
            vf t[VL];
            load_tile<DVT>(t, dO + i0 * dos, dos, qn);
            for (int c = 0; c < DVT; ++c) dov[c] = t[c];
            load_tile<DVT>(t, O + i0 * os, os, qn);
            for (int c = 0; c < DVT; ++c) Di += dov[c] * t[c];
        } else {
            for (int c = 0; c < DV; ++c) dov[c] = vf{};
            for (int r = 0; r < qn; ++r) {
                const float* dr = dO + (i0 + r) * dos;
                const float* orow = O + (i0 + r) * os;
                float dsum = 0.0f;
                for (int c = 0; c < DV; ++c) {
                    dov[c][r] = dr[c];
                    dsum += dr[c] * orow[c];
                }
                Di[r] = dsum;
            }
        }
        for (int r = 0; r < qn; ++r) lse[r] = L[i0 + r];
        const int64_t jmax = a.causal ? std::min<int64_t>(Tk, i0 + qn + off) : Tk;
        for (int64_t j0 = 0; j0 < jmax; j0 += VL) {
            const int jn = (int)std::min<int64_t>(VL, jmax - j0);
            vf P[VL], S[VL];
            if (Bi) {
                bias_tile(Bi, bs, i0, qn, j0, jn, S);
                for (int jj = 0; jj < jn; ++jj) S[jj] *= LOG2E;
            } else {
                for (int jj = 0; jj < jn; ++jj) S[jj] = vf{};
            }
            if constexpr (!smallD) all_cols<true, 1, DT>(S, 0, qv, 0, K + j0 * ks, ks, jn, D);
            if constexpr (!smallDV) {
                for (int jj = 0; jj < jn; ++jj) P[jj] = vf{};
                all_cols<true, 1, DVT>(P, 0, dov, 0, V + j0 * vs, vs, jn, DV);  // dP
            }
            for (int jj = 0; jj < jn; ++jj) {
                const int64_t j = j0 + jj;
                const float* kr = K + j * ks;
                const float* vr = V + j * vs;
                vf s = S[jj];
                if constexpr (smallD)
                    for (int c = 0; c < D; ++c) s += qv[c] * kr[c];
                if (a.causal && j > i0 + off) s = lanes < (float)(j - off - i0) ? bc(-INFINITY) : s;
                const vf p = vexp2(s - lse);
                vf dp = vf{};
                if constexpr (smallDV)
                    for (int c = 0; c < DV; ++c) dp += dov[c] * vr[c];
                else
                    dp = P[jj];
                const vf ds = p * (dp - Di);
                if constexpr (smallD)
                    for (int c = 0; c < D; ++c) dq[c] += ds * kr[c];
                P[jj] = p;
                S[jj] = ds;
            }
            for (int jj = jn; jj < VL; ++jj) P[jj] = S[jj] = vf{};
            if constexpr (!smallD) all_cols<false, 1, DT>(dq, 0, S, 0, K + j0 * ks, ks, jn, D);
            transpose(P);
            transpose(S);  // now row r = query i0 + r, lanes = keys j0..j0+VL-1
            if (dBi) {
                for (int r = 0; r < qn; ++r) {
                    float* drow = dBi + (i0 + r) * dbs + j0;
                    if (jn == VL) storeu(drow, loadu(drow) + S[r]);
                    else store_n(drow, load_n(drow, jn) + S[r], jn);
                }
            }
            vf* dkt = w.dk + (j0 / VL) * D;
            vf* dvt = w.dv + (j0 / VL) * DV;
            if constexpr (smallD) {
                vf dkr[DA];
                for (int c = 0; c < D; ++c) dkr[c] = dkt[c];
                for (int r = 0; r < qn; ++r) {
                    const float* qr = Q + (i0 + r) * qs;
                    for (int c = 0; c < D; ++c) dkr[c] += S[r] * qr[c];
                }
                for (int c = 0; c < D; ++c) dkt[c] = dkr[c];
            } else {
                all_cols<false, 1, DT>(dkt, 0, S, 0, Q + i0 * qs, qs, qn, D);
            }
            if constexpr (smallDV) {
                vf dvr[DVA];
                for (int c = 0; c < DV; ++c) dvr[c] = dvt[c];
                for (int r = 0; r < qn; ++r) {
                    const float* dr = dO + (i0 + r) * dos;
                    for (int c = 0; c < DV; ++c) dvr[c] += P[r] * dr[c];
                }
                for (int c = 0; c < DV; ++c) dvt[c] = dvr[c];
            } else {
                all_cols<false, 1, DVT>(dvt, 0, P, 0, dO + i0 * dos, dos, qn, DV);
            }
        }
        float* dQ = a.dq + b * a.sdq[0] + h * a.sdq[1] + i0 * a.sdq[2];
        if constexpr (one_tile<DT>()) {
            vf t[VL];
            for (int c = 0; c < DT; ++c) t[c] = dq[c] * scale;
            store_tile<DT>(t, dQ, a.sdq[2], qn);
        } else {
            for (int r = 0; r < qn; ++r)
                for (int c = 0; c < D; ++c) dQ[r * a.sdq[2] + c] = dq[c][r] * scale;
        }
    }
    float* dK = a.dk + b * a.sdk[0] + h * a.sdk[1];
    float* dV = a.dv + b * a.sdv[0] + h * a.sdv[1];
    for (int64_t kt = 0; kt < nkt; ++kt) {
        const vf* dkt = w.dk + kt * D;
        const vf* dvt = w.dv + kt * DV;
        const int rn = (int)std::min<int64_t>(VL, Tk - kt * VL);
        float* kr = dK + kt * VL * a.sdk[2];
        float* vr = dV + kt * VL * a.sdv[2];
        if constexpr (one_tile<DT>()) {
            vf t[VL];
            for (int c = 0; c < DT; ++c) t[c] = dkt[c] * scale;
            store_tile<DT>(t, kr, a.sdk[2], rn);
        } else {
            for (int r = 0; r < rn; ++r)
                for (int c = 0; c < D; ++c) kr[r * a.sdk[2] + c] = dkt[c][r] * scale;
        }
        if constexpr (one_tile<DVT>()) {
            vf t[VL];
            for (int c = 0; c < DVT; ++c) t[c] = dvt[c];
            store_tile<DVT>(t, vr, a.sdv[2], rn);
        } else {
            for (int r = 0; r < rn; ++r)
                for (int c = 0; c < DV; ++c) vr[r * a.sdv[2] + c] = dvt[c][r];
        }
    }
}

// ---------------------------------------------------------------------------------------------
// dispatch

template <typename F>
static void parallel_items(const Args& a, int64_t items, F&& body) {
    // Small problems (the shortest training lengths) run on the calling thread: a parallel
    // region costs more than it saves there, and far more on a machine whose cores are shared
    // (every thread must be scheduled before the region ends).
    const double work = (double)(a.B * a.H) * (double)a.Tq * (double)a.Tk * (double)(a.D + a.DV);
    const int nt = work < (double)(1 << 21) ? 1 : (int)std::max<int64_t>(1, std::min<int64_t>(a.nthreads, items));
    const int64_t chunk = std::max<int64_t>(1, items / (nt * 8));
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        Workspace w;
        const int64_t nkt = (a.Tk + VL - 1) / VL;
        if (a.dout) {
            w.dk = (vf*)std::aligned_alloc(64, (size_t)(nkt * a.D) * sizeof(vf) + 64);
            w.dv = (vf*)std::aligned_alloc(64, (size_t)(nkt * a.DV) * sizeof(vf) + 64);
        }
#pragma omp for schedule(dynamic, chunk)
        for (int64_t it = 0; it < items; ++it) body(it, w);
    }
}

template <int DT, int DVT>
static void run_fwd(const Args& a) {
    // head-major: consecutive items share a head, hence the slice of a batch-broadcast bias
    parallel_items(a, a.B * a.H, [&](int64_t it, Workspace&) { fwd_bh<DT, DVT>(a, it % a.B, it / a.B); });
}

template <int DT, int DVT>
static void run_bwd(const Args& a) {
    if (a.dbias && a.accum_bias_over_batch) {
        // the bias gradient sums over the batch: one work item per head, batch inside it
        parallel_items(a, a.H, [&](int64_t h, Workspace& w) {
            for (int64_t b = 0; b < a.B; ++b) bwd_bh<DT, DVT>(a, b, h, w);
        });
    } else {
        parallel_items(a, a.B * a.H, [&](int64_t it, Workspace& w) { bwd_bh<DT, DVT>(a, it % a.B, it / a.B, w); });
    }
}

template <bool Fwd>
static void dispatch(const Args& a) {
#define LG_CASE(d, dv)                                   \
    if (a.D == d && a.DV == dv) {                        \
        if (Fwd) run_fwd<d, dv>(a); else run_bwd<d, dv>(a); \
        return;                                          \
    }
    LG_CASE(8, 8)
    LG_CASE(72, 8)
    LG_CASE(64, 64)
#undef LG_CASE
    if (Fwd) run_fwd<0, 0>(a); else run_bwd<0, 0>(a);
}

}  // namespace

extern "C" {

int lengen_attn_abi() { return 1; }
int lengen_attn_lanes() { return VL; }
int lengen_attn_maxd() { return MAXD; }
int64_t lengen_attn_args_size() { return (int64_t)sizeof(Args); }

int lengen_attn_fwd(const Args* a) {
    if (a->D < 1 || a->D > MAXD || a->DV < 1 || a->DV > MAXD) return 1;
    dispatch<true>(*a);
    return 0;
}

int lengen_attn_bwd(const Args* a) {
    if (a->D < 1 || a->D > MAXD || a->DV < 1 || a->DV > MAXD) return 1;
    dispatch<false>(*a);
    return 0;
}

// Test hook: transpose one VL x VL tile (row-major) in place.
void lengen_attn_test_transpose(float* x) {
    vf t[VL];
    for (int r = 0; r < VL; ++r) t[r] = loadu(x + r * VL);
    transpose(t);
    for (int r = 0; r < VL; ++r) storeu(x + r * VL, t[r]);
}

// Test hook: the vector 2^x on n floats (n a multiple of VL).
void lengen_attn_test_exp2(float* x, int64_t n) {
    for (int64_t i = 0; i + VL <= n; i += VL) storeu(x + i, vexp2(loadu(x + i)));
}

}  // extern "C"
