// optimal_bias.cu: bias="optimal" of Pegasos Sec. 4 on the device, in O(k) and one launch (no
// sort, no host synchronisation): with s_g = y_r m_g - b (the raw scores a <v, x_r>) and the
// breakpoints bp_g = y_r - s_g of the batch hinge loss, the canonical minimiser of
// NumpyBackend.optimal_bias (the smallest breakpoint whose right derivative
// #{bp <= b} - #{y = +1} is >= 0) is the order statistic of rank max(P - 1, 0) of the breakpoints,
// P the number of positive labels in the batch.  It is found by radix selection on the 64-bit
// order-preserving keys of the doubles (8 passes of 8 bits: a shared-memory histogram, a block
// scan, the bucket holding the rank); then m_g = 1 + y_r (b - bp_g) (exactly 1 at the chosen
// breakpoint) and state[S_B] = b.
// grid: ONE block of BLOCK = 256 threads (one histogram bin per thread); threads stride over g < k.
// in: y[n] (T), rows[k], k; in/out: state (S_B), m[k] (double); scratch: bp[k] (double).
// traffic: per row 4 B rows + 4 B y gather + 8 B m read, 8 B bp written, 8 passes reading bp (8 B,
//   from L2), 8 B m written: about 88 k B, all through one multiprocessor (L2-bound, ~8 k / 256
//   dependent loads per thread per pass).
// determinism: the selected value is unique whatever the order -> bitwise repeatable.
#include "common.cuh"

namespace gpusvm {

// Inclusive prefix sum of x over the block (BLOCK threads); every thread must call it.
__device__ __forceinline__ unsigned int block_inclusive_scan(unsigned int x) {
    __shared__ unsigned int warp_total[WARPS];
    const int lane = threadIdx.x % WARP;
    const int warp = threadIdx.x / WARP;
    for (int off = 1; off < WARP; off <<= 1) {
        const unsigned int up = __shfl_up_sync(FULL_MASK, x, off);
        if (lane >= off) {
            x += up;
        }
    }
    if (lane == WARP - 1) {
        warp_total[warp] = x;
    }
    __syncthreads();
    unsigned int before = 0;
    for (int w = 0; w < warp; ++w) {
        before += warp_total[w];
    }
    __syncthreads();                                   // warp_total is reused by the next call
    return x + before;
}

// Order-preserving map of a double to an unsigned 64-bit key, and back.
__device__ __forceinline__ unsigned long long order_key(const double x) {
    const unsigned long long bits = static_cast<unsigned long long>(__double_as_longlong(x));
    return (bits >> 63) ? ~bits : (bits | 0x8000000000000000ull);
}
__device__ __forceinline__ double from_order_key(const unsigned long long key) {
    const unsigned long long bits = (key >> 63) ? (key & 0x7FFFFFFFFFFFFFFFull) : ~key;
    return __longlong_as_double(static_cast<long long>(bits));
}

}  // namespace gpusvm

template <typename T>
__global__ void __launch_bounds__(gpusvm::BLOCK, gpusvm::MIN_BLOCKS) gpusvm_optimal_bias(
    const T* __restrict__ y,               // labels in {-1, +1}, n
    const int* __restrict__ rows,          // the batch A_t, k
    const int k,                           // batch size
    double* __restrict__ state,            // scalar state (S_B read and written)
    double* __restrict__ m,                // margins y_r (s + b), k (shifted to the new b)
    double* __restrict__ bp)               // scratch: the breakpoints, k
{
    __shared__ unsigned int hist[gpusvm::BLOCK];
    __shared__ unsigned long long chosen;
    __shared__ unsigned int chosen_rank;
    const int tid = threadIdx.x;
    const double b = state[gpusvm::S_B];
    double npos[1] = {0.0};
    for (int g = tid; g < k; g += gpusvm::BLOCK) {
        const double yg = static_cast<double>(y[rows[g]]);
        const double s = yg * m[g] - b;                 // exact: y = +-1
        bp[g] = yg - s;                                 // read back by this thread only
        npos[0] += yg > 0.0 ? 1.0 : 0.0;
    }
    gpusvm::block_sum<1>(npos);
    if (tid == 0) {
        chosen_rank = npos[0] >= 1.0 ? static_cast<unsigned int>(npos[0]) - 1u : 0u;
        chosen = 0ull;
    }
    __syncthreads();
    unsigned long long prefix = 0ull;                   // key bits fixed so far
    unsigned long long fixed = 0ull;                    // which bits
    for (int shift = 56; shift >= 0; shift -= 8) {
        hist[tid] = 0u;
        __syncthreads();
        for (int g = tid; g < k; g += gpusvm::BLOCK) {
            const unsigned long long key = gpusvm::order_key(bp[g]);
            if ((key & fixed) == prefix) {
                atomicAdd(&hist[(key >> shift) & 0xFFull], 1u);
            }
        }
        __syncthreads();
        const unsigned int rank = chosen_rank;
        const unsigned int count = hist[tid];
        const unsigned int incl = gpusvm::block_inclusive_scan(count);
        const unsigned int excl = incl - count;
        if (excl <= rank && rank < incl) {              // exactly one bucket holds the rank
            chosen = prefix | (static_cast<unsigned long long>(tid) << shift);
            chosen_rank = rank - excl;
        }
        __syncthreads();
        prefix = chosen;
        fixed |= 0xFFull << shift;
    }
    const double bnew = gpusvm::from_order_key(prefix);
    for (int g = tid; g < k; g += gpusvm::BLOCK) {
        const double yg = static_cast<double>(y[rows[g]]);
        m[g] = 1.0 + yg * (bnew - bp[g]);               // y_r (s + b) as 1 + y_r (b - bp)
    }
    if (tid == 0) {
        state[gpusvm::S_B] = bnew;
    }
}
