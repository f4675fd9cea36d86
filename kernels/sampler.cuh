// sampler.cuh: the counter-based mini-batches of gpusvm/solvers/_sampling.py as device functions.
// A row of A_t is a pure function of (seed, t, j), computed with the same wrapping 64- and 32-bit
// integer arithmetic as the NumPy reference and the compiled CPU sampler, so that every backend
// draws bit-identical batches (../shared/docs/algorithms.md, "Mini-batches from a counter"):
//   key(seed, c) = M64(seed ^ M64(c))                       M64: splitmix64's finaliser
//   rk_r = low32(M64(key + (r + 1) G)), r < 6               G = 0x9E3779B97F4A7C15
//   pi(q): 6 Feistel rounds (L, R) <- (R, L ^ (F32(R ^ rk_r) & mask)) on 2 x half bits, repeated
//          while the result is >= n (cycle walking);       F32: murmur3's finaliser
//   with replacement: floor(M64(key ^ M64(j + G)) n / 2^64), from 32-bit halves (exact).
#ifndef GPUSVM_SAMPLER_CUH
#define GPUSVM_SAMPLER_CUH

namespace gpusvm {

constexpr unsigned long long GOLDEN = 0x9E3779B97F4A7C15ull;
constexpr int ROUNDS = 6;

__device__ __forceinline__ unsigned long long mix64(unsigned long long z) {
    z ^= z >> 30;
    z *= 0xBF58476D1CE4E5B9ull;
    z ^= z >> 27;
    z *= 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

__device__ __forceinline__ unsigned int fmix32(unsigned int x) {
    x ^= x >> 16;
    x *= 0x85EBCA6Bu;
    x ^= x >> 13;
    x *= 0xC2B2AE35u;
    return x ^ (x >> 16);
}

__device__ __forceinline__ unsigned long long stream_key(unsigned long long seed,
                                                         unsigned long long c) {
    return mix64(seed ^ mix64(c));
}

__device__ __forceinline__ void round_keys(unsigned long long key, unsigned int rk[ROUNDS]) {
#pragma unroll
    for (int r = 0; r < ROUNDS; ++r) {
        rk[r] = static_cast<unsigned int>(mix64(key + static_cast<unsigned long long>(r + 1) * GOLDEN)
                                          & 0xFFFFFFFFull);
    }
}

// pi(q) for 0 <= q < n (forward), or pi^{-1}(q) (inverse)
template <bool INVERSE>
__device__ __forceinline__ long long permute(unsigned long long q, long long n,
                                             const unsigned int rk[ROUNDS], int half,
                                             unsigned int mask) {
    unsigned long long x = q;
    do {
        unsigned int left = static_cast<unsigned int>(x >> half);
        unsigned int right = static_cast<unsigned int>(x) & mask;
#pragma unroll
        for (int i = 0; i < ROUNDS; ++i) {
            if (!INVERSE) {
                const unsigned int nr = left ^ (fmix32(right ^ rk[i]) & mask);
                left = right;
                right = nr;
            } else {
                const unsigned int nl = right ^ (fmix32(left ^ rk[ROUNDS - 1 - i]) & mask);
                right = left;
                left = nl;
            }
        }
        x = (static_cast<unsigned long long>(left) << half) | right;
    } while (x >= static_cast<unsigned long long>(n));
    return static_cast<long long>(x);
}

// floor(M64(key ^ M64(j + G)) n / 2^64): the high word of a 64 x 32-bit product, from halves
__device__ __forceinline__ long long uniform_row(long long n, unsigned long long key,
                                                 unsigned long long j) {
    const unsigned long long u = mix64(key ^ mix64(j + GOLDEN));
    const unsigned long long nn = static_cast<unsigned long long>(n);
    const unsigned long long hi = u >> 32;
    const unsigned long long lo = u & 0xFFFFFFFFull;
    return static_cast<long long>((hi * nn + ((lo * nn) >> 32)) >> 32);
}

// The rows of batch t drawn one position at a time, for sampling modes 0 (without replacement:
// row j = pi_{key(seed, t)}(j)) and 2 (epochs: position p = t k + j, row = pi_{key(seed, p div n)}
// (p mod n), first = 0 for a row of the next epoch that repeats one of this batch's tail of the
// previous epoch).  init() derives the round keys of t once (12 or 18 64-bit mixes); row(j) is
// then a Feistel walk (two for a repeated-epoch check): what gpusvm_sample writes at j, so that a
// kernel can draw exactly the positions it works on (the balanced gathers' fused sampling).
struct BatchDraw {
    unsigned int rk[ROUNDS];
    unsigned int rk1[ROUNDS];
    long long n;
    long long q0;
    long long tail;
    int half;
    unsigned int mask;
    int mode;

    __device__ __forceinline__ void init(const int mode_, const unsigned long long seed,
                                         const int n_, const int k, const int half_,
                                         const unsigned int mask_, const long long t) {
        mode = mode_;
        n = n_;
        half = half_;
        mask = mask_;
        if (mode == 0) {
            round_keys(stream_key(seed, static_cast<unsigned long long>(t)), rk);
            q0 = 0;
            tail = k;
            return;
        }
        const long long p0 = t * static_cast<long long>(k);
        const long long e0 = p0 / n;
        q0 = p0 - e0 * n;
        tail = n - q0;                                       // positions left in epoch e0
        round_keys(stream_key(seed, static_cast<unsigned long long>(e0)), rk);
        if (q0 + k > n) {
            round_keys(stream_key(seed, static_cast<unsigned long long>(e0 + 1)), rk1);
        }
    }

    // the row at position j < k; *first = 0 for a repeat of the previous epoch's tail, else 1
    __device__ __forceinline__ int row(const int j, int* first) const {
        if (mode == 0 || j < tail) {
            *first = 1;
            return static_cast<int>(permute<false>(q0 + j, n, rk, half, mask));
        }
        const long long r = permute<false>(j - tail, n, rk1, half, mask);
        *first = permute<true>(r, n, rk, half, mask) < q0 ? 1 : 0;
        return static_cast<int>(r);
    }
};

}  // namespace gpusvm

#endif  // GPUSVM_SAMPLER_CUH
