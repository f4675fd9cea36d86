// optimal_bias.cu: bias="optimal" of Pegasos Sec. 4 on the device, per output, in O(k) and one
// launch (no sort, no host synchronisation): with s_g = y_gc m_gc - b_c (the raw scores) and the
// breakpoints bp_g = y_gc - s_g of the batch hinge loss sum_g w_g [1 - y_gc (s_g + b)]_+, the
// canonical minimiser (NumpyBackend.optimal_bias_m: the smallest breakpoint whose right
// derivative is >= 0) is the smallest breakpoint v with W(v) = sum{w_g : bp_g <= v} >= P, P the
// weight of the positive labels (without weights: the order statistic of rank max(P - 1, 0)).
// It is found by radix selection on the 64-bit order-preserving keys of the doubles (8 passes of
// 8 bits: a shared-memory histogram, a block scan, the first non-empty bucket whose cumulative
// weight reaches P, or the last non-empty one when rounding leaves every sum below P); then
// m_gc = 1 + y_gc (b - bp_g) (exactly 1 at the chosen breakpoint) and b_c = b.
// WT = 0: the histogram counts rows (unsigned int, exact); WT = 1: it sums the weights s_gc
// (double) besides the counts.
// grid: M blocks of BLOCK = 256 threads, block c for output c (one histogram bin per thread);
//   threads stride over g < k.
// in: Y[n x M] (T), sw[n x M] (WT), rows[k], k, M; in/out: state (S_B row), m[k x M] (double);
//   scratch: bp[M x k] (double, block c uses bp[c k ..]).
// traffic: per row and output 4 B rows + sizeof(T) B y gather + 8 B m read (+ 8 B weight), 8 B bp
//   written, 8 passes reading bp (8 B, from L2), 8 B m written: about 88 k B per output, through
//   one multiprocessor (L2-bound).
// determinism: the counts are exact; weighted sums are double shared atomics in any order, so a
//   breakpoint whose W(v) equals P to the last bit may be chosen differently run to run.
#include "common.cuh"
#include "outputs.cuh"

namespace gpusvm {

template <bool B, typename X, typename Y>
struct pick_type {
    using type = X;
};
template <typename X, typename Y>
struct pick_type<false, X, Y> {
    using type = Y;
};

// Inclusive prefix sum of x over the block (BLOCK threads); every thread must call it.
template <typename A>
__device__ __forceinline__ A block_inclusive_scan(A x) {
    __shared__ A warp_total[WARPS];
    const int lane = threadIdx.x % WARP;
    const int warp = threadIdx.x / WARP;
    for (int off = 1; off < WARP; off <<= 1) {
        const A up = __shfl_up_sync(FULL_MASK, x, off);
        if (lane >= off) {
            x += up;
        }
    }
    if (lane == WARP - 1) {
        warp_total[warp] = x;
    }
    __syncthreads();
    A before = 0;
    for (int w = 0; w < warp; ++w) {
        before += warp_total[w];
    }
    __syncthreads();                                   // warp_total is reused by the next call
    return x + before;
}

// Order-preserving map of a double to 64 bits (negative numbers flipped, positive ones marked).
__device__ __forceinline__ unsigned long long order_key(const double x) {
    const unsigned long long bits = static_cast<unsigned long long>(__double_as_longlong(x));
    return (bits >> 63) ? ~bits : (bits | 0x8000000000000000ull);
}
__device__ __forceinline__ double from_order_key(const unsigned long long key) {
    const unsigned long long bits = (key >> 63) ? (key & 0x7FFFFFFFFFFFFFFFull) : ~key;
    return __longlong_as_double(static_cast<long long>(bits));
}

}  // namespace gpusvm

template <typename T, int WT>
__global__ void __launch_bounds__(gpusvm::BLOCK, gpusvm::MIN_BLOCKS) gpusvm_optimal_bias(
    const T* __restrict__ Y,               // labels in {-1, +1}, n x M
    const double* __restrict__ sw,         // example weights, n x M (WT)
    const int* __restrict__ rows,          // the batch A_t, k
    const int k,                           // batch size
    const int M,                           // number of outputs
    double* __restrict__ state,            // scalar state, N_SLOTS x M (S_B read and written)
    double* __restrict__ m,                // margins, k x M (output c shifted to the new b_c)
    double* __restrict__ bp_all)           // scratch: the breakpoints, M x k
{
    using A = typename gpusvm::pick_type<WT != 0, double, unsigned int>::type;
    __shared__ unsigned int count[gpusvm::BLOCK];
    __shared__ A weight[gpusvm::BLOCK];
    __shared__ int first_ok;
    __shared__ int last_nonempty;
    __shared__ A below;                                 // weight of the keys below the prefix
    __shared__ A target;
    __shared__ unsigned long long chosen;
    const int tid = threadIdx.x;
    const int c = blockIdx.x;
    double* __restrict__ bp = bp_all + static_cast<long long>(c) * k;
    const double b = state[gpusvm::S_B * M + c];
    double pos[1] = {0.0};
    for (int g = tid; g < k; g += gpusvm::BLOCK) {
        const int r = rows[g];
        const double yg = static_cast<double>(Y[static_cast<long long>(r) * M + c]);
        const double s = yg * m[static_cast<long long>(g) * M + c] - b;   // exact: y = +-1
        bp[g] = yg - s;                                 // read back by this thread only
        pos[0] += yg > 0.0 ? gpusvm::weight_of<WT>(sw, r, M, c) : 0.0;
    }
    gpusvm::block_sum<1>(pos);
    if (tid == 0) {
        below = 0;
        chosen = 0ull;
        target = static_cast<A>(pos[0]);                // exact: a count below 2^31 without weights
    }
    __syncthreads();
    unsigned long long prefix = 0ull;                   // key bits fixed so far
    unsigned long long fixed = 0ull;                    // which bits
    for (int shift = 56; shift >= 0; shift -= 8) {
        if constexpr (WT != 0) {
            count[tid] = 0u;
        }
        weight[tid] = 0;
        if (tid == 0) {
            first_ok = gpusvm::BLOCK;
            last_nonempty = -1;
        }
        __syncthreads();
        for (int g = tid; g < k; g += gpusvm::BLOCK) {
            const unsigned long long key = gpusvm::order_key(bp[g]);
            if ((key & fixed) == prefix) {
                const unsigned int bin = static_cast<unsigned int>((key >> shift) & 0xFFull);
                if constexpr (WT != 0) {
                    gpusvm::red_add(&count[bin], 1u);
                    gpusvm::red_add(&weight[bin], sw[static_cast<long long>(rows[g]) * M + c]);
                } else {
                    gpusvm::red_add(&weight[bin], 1u);
                }
            }
        }
        __syncthreads();
        const A base = below;
        const A w = weight[tid];
        const unsigned int cnt = WT != 0 ? count[tid] : static_cast<unsigned int>(w);
        const A incl = gpusvm::block_inclusive_scan<A>(w);
        if (cnt > 0u) {
            atomicMax(&last_nonempty, tid);
            if (base + incl >= target) {
                atomicMin(&first_ok, tid);
            }
        }
        __syncthreads();
        const int pick = first_ok < gpusvm::BLOCK ? first_ok : last_nonempty;
        if (tid == pick) {
            chosen = prefix | (static_cast<unsigned long long>(tid) << shift);
            below = base + (incl - w);
        }
        __syncthreads();
        prefix = chosen;
        fixed |= 0xFFull << shift;
    }
    const double bnew = gpusvm::from_order_key(prefix);
    for (int g = tid; g < k; g += gpusvm::BLOCK) {
        const double yg = static_cast<double>(Y[static_cast<long long>(rows[g]) * M + c]);
        m[static_cast<long long>(g) * M + c] = 1.0 + yg * (bnew - bp[g]);
    }
    if (tid == 0) {
        state[gpusvm::S_B * M + c] = bnew;
    }
}
