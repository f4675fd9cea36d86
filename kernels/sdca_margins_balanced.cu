// sdca_margins_balanced.cu: gpusvm_sdca_margins (margins and the steps of eq. 15 of Takáč et al.
// 2013 in one pass) with the work balanced by nonzeros, as margins_balanced.cu: the kernel of a
// captured SDCA segment, whose time follows the batch's nonzeros instead of its longest row.
//   m[g] = y_r (a <v, x_r> + b);  delta[g] = clip_[-alpha_r, 1 - alpha_r](lam n (1 - m[g]) /
//   (beta ||x_r||^2)) (sdca_delta; zero rows get 1 - alpha_r; 0 where first[g] == 0).
// grid: min(k, max_blocks) blocks of BLOCK threads over tiles of tile_rows batch positions; the
//   block's warps stride over the tile's 32-nonzero chunks (a fixed butterfly sum each), one
//   thread per row adds its chunks in row order (balanced.cuh's tile_row_dot, the gather of
//   margins_balanced.cu) and computes delta.
// in: indptr[n+1] (int64), indices[nnz], data[nnz] (T), y[n] (T), v[d] (T), rows[k], k,
//   tile_rows, state (a, b, beta), alpha[n], row_sq[n] (double), first[k] (int, read when
//   has_first), lam, n; out: m[k], delta[k] (double).
// traffic: per row 4 B rows + 16 B indptr + 4 B y + 8 B alpha + 8 B row_sq (+ 4 B first) + 16 B
//   written; per nonzero 4 + sizeof(T) B streamed plus one random gather of v.  Shared memory
//   about 20 KB.
// determinism: no atomics, a fixed order per row -> bitwise repeatable; agrees with
//   gpusvm_sdca_margins up to rounding.
#include "sdca_common.cuh"
#include "balanced.cuh"

template <typename T>
__global__ void __launch_bounds__(gpusvm::BLOCK, gpusvm::MIN_BLOCKS) gpusvm_sdca_margins_balanced(
    const long long* __restrict__ indptr,  // CSR row pointers, n + 1
    const int* __restrict__ indices,       // CSR column indices, nnz
    const T* __restrict__ data,            // CSR values, nnz
    const T* __restrict__ y,               // labels in {-1, +1}, n
    const T* __restrict__ v,               // w = a v, d
    const int* __restrict__ rows,          // the batch A_t, k
    const int k,                           // batch size
    const int tile_rows,                   // batch positions per tile, 1 .. BLOCK
    const double* __restrict__ state,      // scalar state (a, b, beta)
    const double* __restrict__ alpha,      // dual variables, n
    const double* __restrict__ row_sq,     // squared row norms, n
    const int* __restrict__ first,         // 1 at the first occurrence of a row in the batch, k
    const int has_first,                   // 0: every row steps
    const double lam,                      // regularisation lambda
    const double n,                        // number of examples
    double* __restrict__ m,                // output margins, k
    double* __restrict__ delta)            // output coordinate steps, k
{
    const double a = state[gpusvm::S_A];
    const double b = state[gpusvm::S_B];
    const double c = lam * n / state[gpusvm::S_BETA];               // lam n / beta
    gpusvm::tile_rows_dot(indptr, indices, data, v, rows, k, tile_rows,
                          [&](const int g, const double dot) {
        const int r = rows[g];
        const double mg = static_cast<double>(y[r]) * (a * dot + b);
        m[g] = mg;
        delta[g] = (has_first && first[g] == 0) ? 0.0
                                                : gpusvm::sdca_delta(alpha[r], c, mg, row_sq[r]);
    });
}
