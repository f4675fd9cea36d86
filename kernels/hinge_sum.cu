// hinge_sum.cu: partial sums of the hinge loss max(0, 1 - y_i (<w, x_i> + b)) over all n rows,
// one per block (the objective P(w) of ALGORITHMS.md; the host adds the partials in a fixed order).
// grid: min(ceil(n / (BLOCK / LANES)), max_blocks) blocks of BLOCK threads; a group of LANES lanes
//   owns one row and strides over its nonzeros; groups stride over the rows (warp-uniform loop);
//   a block reduction (shuffles + shared memory) writes partial[blockIdx.x].
// in: indptr[n+1] (int64), indices, data (T), y[n] (T), n, w[d] (double), b[1] (double);
// out: partial[gridDim.x] (double).
// traffic: 16 B indptr + sizeof(T) B y per row; 4 + sizeof(T) B per nonzero streamed plus one
//   random 8 B gather of w; 8 B per block.
// determinism: no atomics, fixed reduction order -> bitwise repeatable for a given grid and LANES.
#include "common.cuh"

template <int LANES, typename T>
__global__ void __launch_bounds__(gpusvm::BLOCK, gpusvm::MIN_BLOCKS) gpusvm_hinge_sum(
    const long long* __restrict__ indptr,  // CSR row pointers, n + 1
    const int* __restrict__ indices,       // CSR column indices, nnz
    const T* __restrict__ data,            // CSR values, nnz
    const T* __restrict__ y,               // labels in {-1, +1}, n
    const int n,                           // number of rows
    const double* __restrict__ w,          // dense weights, d
    const double* __restrict__ b,          // bias, 1
    double* __restrict__ partial)          // output: one hinge-loss sum per block
{
    const double bias = b[0];
    double h[1] = {0.0};
    gpusvm::warp_rows<LANES>(n, [&](const int r, const int lane) {
        const double s = gpusvm::group_row_dot<LANES>(indptr, indices, data, w, r, r < n, lane);
        if (r < n && lane == 0) {
            h[0] += fmax(0.0, 1.0 - static_cast<double>(y[r]) * (s + bias));
        }
    });
    gpusvm::block_sum<1>(h);
    if (threadIdx.x == 0) {
        partial[blockIdx.x] = h[0];
    }
}
