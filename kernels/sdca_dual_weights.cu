// sdca_dual_weights.cu: the primal point of the dual variables (Takáč et al. 2013),
//   w(alpha) = X^T (alpha * y) / (lam n) = sum_i (alpha_i y_i / (lam n)) x_i,
// in double, as a CSR transpose-multiply by rows: w must be all zero on entry and every row with
// alpha_i != 0 adds c_i x_i into it with double atomics.  Rows with alpha_i = 0 (every example
// outside the margin at the optimum: most of them) are skipped, so the pass reads only the
// support vectors' nonzeros; a float32 X is read as it is (no float64 copy of X is made).
// grid: min(ceil(n / (BLOCK / LANES)), max_blocks) blocks of BLOCK threads; a group of LANES lanes
//   owns one row and strides over its nonzeros; groups stride over all n rows.
// in: indptr[n+1] (int64), indices[nnz], data[nnz] (T), y[n] (T), n, alpha[n] (double),
//   lam_n = lam n; in/out: w[d] (double, zero on entry).
// traffic: 8 B alpha per row (+ 16 B indptr + 4 B y for a support vector); per nonzero of a
//   support vector 4 + sizeof(T) B streamed and one double atomic on w.
// determinism: double atomics on w -> NOT bitwise repeatable (each w_j is the same sum up to
//   rounding in any order); the NumPy backend is the deterministic path.
#include "sdca_common.cuh"

template <int LANES, typename T>
__global__ void __launch_bounds__(gpusvm::BLOCK, gpusvm::MIN_BLOCKS) gpusvm_sdca_dual_weights(
    const long long* __restrict__ indptr,  // CSR row pointers, n + 1
    const int* __restrict__ indices,       // CSR column indices, nnz
    const T* __restrict__ data,            // CSR values, nnz
    const T* __restrict__ y,               // labels in {-1, +1}, n
    const int n,                           // number of rows
    const double* __restrict__ alpha,      // dual variables, n
    const double lam_n,                    // lam n
    double* __restrict__ w)                // output w(alpha), d (zero on entry)
{
    gpusvm::group_rows<LANES>(n, [&](const int r, const int lane) {
        const double ar = alpha[r];
        if (ar == 0.0) {
            return;                                                  // not a support vector
        }
        const double c = ar * static_cast<double>(y[r]) / lam_n;    // alpha_i y_i / (lam n)
        const long long end = indptr[r + 1];
        for (long long p = indptr[r] + lane; p < end; p += LANES) {
            atomicAdd(&w[indices[p]], static_cast<double>(data[p]) * c);
        }
    });
}
