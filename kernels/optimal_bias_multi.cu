// optimal_bias_multi.cu: bias="optimal" (Pegasos Sec. 4) on the general path, weighted, per output
// (GeneralPath.optimal_bias_m), in O(k) per output and one launch: with s_g = y_gc m_gc - b_c (the
// raw scores) and the breakpoints bp_g = y_gc - s_g, the minimiser of sum_g w_g [1 - y_gc (s_g + b)]_+
// (the smallest breakpoint where the right derivative sum{w : y = -1, bp <= b} - sum{w : y = +1,
// bp > b} is >= 0) is the smallest breakpoint v with W(v) = sum{w_g : bp_g <= v} >= P, P the
// weight of the positive labels.  It is found by radix selection on the 64-bit order-preserving
// keys (8 passes of 8 bits: a shared-memory histogram of counts and weights, a block scan of the
// weights, the first non-empty bucket whose cumulative weight reaches P -- or the last non-empty
// one when rounding leaves every sum below P); then m_gc = 1 + y_gc (b - bp_g) and b_c = b.
// With unit weights it selects the breakpoint gpusvm_optimal_bias selects.
// grid: M blocks of BLOCK threads, block c for output c (one histogram bin per thread); threads
//   stride over g < k.
// in: Y[n x M] (T), sw[n x M] (when weighted), rows[k], k, M; in/out: state (S_B row), m[k x M];
//   scratch: bp[M x k] (double, block c uses bp[c k ..]).
// traffic: per row and output 4 B rows + sizeof(T) B Y + 8 B weight + 8 B m read, 8 B bp written,
//   8 passes reading bp (8 B, from L2), 8 B m written: about 100 k B per output, through one
//   multiprocessor per output (L2-bound).
// determinism: the counts are exact; the weight sums are double shared atomics in any order, so
//   a breakpoint whose W(v) equals P to the last bit may be chosen differently run to run (never
//   with unit weights: the sums are exact integers).
#include "common.cuh"
#include "optimal_bias.cu"

namespace gpusvm {

// Inclusive prefix sum of a double over the block (BLOCK threads); every thread must call it.
__device__ __forceinline__ double block_inclusive_scan_d(double x) {
    __shared__ double warp_total_d[WARPS];
    const int lane = threadIdx.x % WARP;
    const int warp = threadIdx.x / WARP;
    for (int off = 1; off < WARP; off <<= 1) {
        const double up = __shfl_up_sync(FULL_MASK, x, off);
        if (lane >= off) {
            x += up;
        }
    }
    if (lane == WARP - 1) {
        warp_total_d[warp] = x;
    }
    __syncthreads();
    double before = 0.0;
    for (int w = 0; w < warp; ++w) {
        before += warp_total_d[w];
    }
    __syncthreads();
    return x + before;
}

}  // namespace gpusvm

template <typename T>
__global__ void __launch_bounds__(gpusvm::BLOCK, gpusvm::MIN_BLOCKS) gpusvm_optimal_bias_multi(
    const T* __restrict__ Y,               // labels in {-1, +1}, n x M
    const double* __restrict__ sw,         // sample weights, n x M (when weighted): s_ic
    const int weighted,                    // 1: sw holds the weights, 0: every weight is 1
    const int* __restrict__ rows,          // the batch A_t, k
    const int k,                           // batch size
    const int M,                           // number of outputs
    double* __restrict__ state,            // scalar state, N_SLOTS x M (S_B read and written)
    double* __restrict__ m,                // margins, k x M (output c shifted to the new b_c)
    double* __restrict__ bp_all)           // scratch: the breakpoints, M x k
{
    __shared__ unsigned int count[gpusvm::BLOCK];
    __shared__ double weight[gpusvm::BLOCK];
    __shared__ int first_ok;
    __shared__ int last_nonempty;
    __shared__ double below;                            // weight of the keys below the prefix
    __shared__ unsigned long long chosen;
    const int tid = threadIdx.x;
    const int c = blockIdx.x;
    double* __restrict__ bp = bp_all + static_cast<long long>(c) * k;
    const double b = state[gpusvm::S_B * M + c];
    double pos[1] = {0.0};
    for (int g = tid; g < k; g += gpusvm::BLOCK) {
        const int r = rows[g];
        const double yg = static_cast<double>(Y[static_cast<long long>(r) * M + c]);
        const double s = yg * m[static_cast<long long>(g) * M + c] - b;
        bp[g] = yg - s;                                 // read back by this thread only
        pos[0] += yg > 0.0 ? (weighted != 0 ? sw[static_cast<long long>(r) * M + c] : 1.0) : 0.0;
    }
    gpusvm::block_sum<1>(pos);
    if (tid == 0) {
        below = 0.0;
        chosen = 0ull;
        weight[0] = pos[0];                             // handed to every thread below
    }
    __syncthreads();
    const double target = weight[0];
    __syncthreads();
    unsigned long long prefix = 0ull;
    unsigned long long fixed = 0ull;
    for (int shift = 56; shift >= 0; shift -= 8) {
        count[tid] = 0u;
        weight[tid] = 0.0;
        if (tid == 0) {
            first_ok = gpusvm::BLOCK;
            last_nonempty = -1;
        }
        __syncthreads();
        for (int g = tid; g < k; g += gpusvm::BLOCK) {
            const unsigned long long key = gpusvm::order_key(bp[g]);
            if ((key & fixed) == prefix) {
                const unsigned int bin = static_cast<unsigned int>((key >> shift) & 0xFFull);
                atomicAdd(&count[bin], 1u);
                atomicAdd(&weight[bin], weighted != 0 ? sw[static_cast<long long>(rows[g]) * M + c] : 1.0);
            }
        }
        __syncthreads();
        const double base = below;
        const unsigned int cnt = count[tid];
        const double w = weight[tid];
        const double incl = gpusvm::block_inclusive_scan_d(w);
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
