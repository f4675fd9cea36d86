// row_sq_norms.cu: ||x_i||^2 of all n rows in double (SDCA's coordinate steps, the certificates).
// grid: min(ceil(n / (BLOCK / LANES)), max_blocks) blocks of BLOCK threads; a group of LANES lanes
//   owns one row and strides over its nonzeros; groups stride over the rows (warp-uniform loop).
// in: indptr[n+1] (int64), data (T), n; out: sq[n] (double).
// memory: nothing but the output (the searchsorted + bincount it replaces made an int64 owner and
//   a float64 square per nonzero); an empty matrix (nnz = 0) gives zeros.
// traffic: 16 B indptr + 8 B sq per row; sizeof(T) B per nonzero streamed.
// determinism: no atomics, fixed reduction order -> bitwise repeatable for a given LANES.
#include "common.cuh"

template <int LANES, typename T>
__global__ void __launch_bounds__(gpusvm::BLOCK, gpusvm::MIN_BLOCKS) gpusvm_row_sq_norms(
    const long long* __restrict__ indptr,  // CSR row pointers, n + 1
    const T* __restrict__ data,            // CSR values, nnz
    const int n,                           // number of rows
    double* __restrict__ sq)               // output squared norms, n
{
    if (gpusvm::warp_past_end<LANES>(n)) {
        return;                                                      // whole warp past the end
    }
    gpusvm::warp_rows<LANES>(n, [&](const int r, const int lane) {
        long long p = 0;
        long long end = 0;
        if (r < n) {
            p = indptr[r] + lane;
            end = indptr[r + 1];
        }
        double s = 0.0;
        for (; p < end; p += LANES) {
            const double v = static_cast<double>(data[p]);
            s += v * v;
        }
        s = gpusvm::group_sum<LANES>(s);                             // every lane shuffles
        if (r < n && lane == 0) {
            sq[r] = s;
        }
    });
}
