// decision.cu: z_i = <w, x_i> + b on all n rows, w dense float64 (decision values; the optimal
// bias over the whole training set reads them).
// grid: min(ceil(n / (BLOCK / LANES)), max_blocks) blocks of BLOCK threads; a group of LANES lanes
//   owns one row and strides over its nonzeros; groups stride over the rows (warp-uniform loop).
// in: indptr[n+1] (int64), indices, data (T), n, w[d] (double), b[1] (double); out: z[n] (double).
// traffic: 16 B indptr + 8 B z per row; 4 + sizeof(T) B per nonzero streamed plus one random
//   8 B gather of w.
// determinism: no atomics, fixed reduction order -> bitwise repeatable for a given LANES.
#include "common.cuh"

template <int LANES, typename T>
__global__ void __launch_bounds__(gpusvm::BLOCK, gpusvm::MIN_BLOCKS) gpusvm_decision(
    const long long* __restrict__ indptr,  // CSR row pointers, n + 1
    const int* __restrict__ indices,       // CSR column indices, nnz
    const T* __restrict__ data,            // CSR values, nnz
    const int n,                           // number of rows
    const double* __restrict__ w,          // dense weights, d
    const double* __restrict__ b,          // bias, 1
    double* __restrict__ z)                // output decision values, n
{
    if (gpusvm::warp_past_end<LANES>(n)) {
        return;                                                      // whole warp past the end
    }
    const double bias = b[0];
    gpusvm::warp_rows<LANES>(n, [&](const int r, const int lane) {
        const double s = gpusvm::group_row_dot<LANES>(indptr, indices, data, w, r, r < n, lane);
        if (r < n && lane == 0) {
            z[r] = s + bias;
        }
    });
}
