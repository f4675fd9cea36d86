// margins.cu: m[g] = y_r (a <v, x_r> + b) for the sampled rows r = rows[g], g < k
// (Pegasos, Fig. 1 step 2, in the sparse form w = a v; a and b are read from the state vector).
// grid: min(ceil(k / (BLOCK / LANES)), max_blocks) blocks of BLOCK threads; a group of LANES
//   consecutive lanes owns one row and strides over its nonzeros (coalesced reads of indices and
//   data), groups stride over the rows; the group sum is an xor butterfly of log2(LANES) shuffles.
// in: indptr[n+1] (int64), indices[nnz], data[nnz] (T), y[n] (T), v[d] (T), rows[k], k, state;
// out: m[k] (double).  Products and sums in double.
// traffic: 4 B (rows) + 16 B (indptr) + 4 B (y) + 8 B (m) per row, 4 + sizeof(T) B per nonzero
//   streamed, plus one random gather of v per nonzero (one 32 B sector each in the worst case).
// determinism: no atomics, fixed reduction order -> bitwise repeatable for a given LANES.
#include "common.cuh"

template <int LANES, typename T>
__global__ void __launch_bounds__(gpusvm::BLOCK, gpusvm::MIN_BLOCKS) gpusvm_margins(
    const long long* __restrict__ indptr,  // CSR row pointers, n + 1
    const int* __restrict__ indices,       // CSR column indices, nnz
    const T* __restrict__ data,            // CSR values, nnz
    const T* __restrict__ y,               // labels in {-1, +1}, n
    const T* __restrict__ v,               // w = a v, d
    const int* __restrict__ rows,          // the batch A_t (repeats allowed), k
    const int k,                           // batch size
    const double* __restrict__ state,      // scalar state (a, b)
    double* __restrict__ m)                // output margins, k
{
    if (gpusvm::warp_past_end<LANES>(k)) {
        return;                                                      // whole warp past the end
    }
    const double a = state[gpusvm::S_A];
    const double b = state[gpusvm::S_B];
    gpusvm::warp_rows<LANES>(k, [&](const int g, const int lane) {
        const int r = g < k ? rows[g] : 0;
        const double z = gpusvm::group_row_dot<LANES>(indptr, indices, data, v, r, g < k, lane);
        if (g < k && lane == 0) {
            m[g] = static_cast<double>(y[r]) * (a * z + b);
        }
    });
}
