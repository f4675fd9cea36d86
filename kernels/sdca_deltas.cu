// sdca_deltas.cu: the coordinate steps of eq. (15) (Takáč et al. 2013) from given margins, for
// the sampled rows r = rows[g], g < k:
//   delta[g] = clip_[-alpha_r, 1 - alpha_r](lam n (1 - m[g]) / (beta ||x_r||^2)),
// beta = state[S_BETA] (Alg. 2: the adapted beta); zero rows get 1 - alpha_r; delta[g] = 0 where
// the first-occurrence mask is 0.  When `zero` is set the launch also cleans up after
// gpusvm_sdca_rho: the group of a row whose tentative step old[g] was nonzero zeroes the scratch
// vector at the row's columns (so the scratch is all zeros again without an O(d) pass).
// grid: min(ceil(k / (BLOCK / LANES)), max_blocks) blocks of BLOCK threads; a group of LANES
//   lanes owns one row (the lanes share the zeroing, lane 0 computes delta); groups stride over
//   the rows.  T is not read (one instance per value type, like every row kernel).
// in: indptr[n+1] (int64), indices[nnz], rows[k], k, m[k], alpha[n], row_sq[n] (double),
//   first[k] (int 0/1, read when has_first), state, lam, n, old[k] (read when zero), zero;
//   out: delta[k] (double); in/out: scratch[d] (double, zeroed where touched, when zero).
// traffic: per row 4 B rows + 8 B m + 8 B alpha + 8 B row_sq (+ 4 B first) + 8 B written; with
//   zero, 16 B indptr + 8 B old per row and 4 B streamed + one 8 B atomic store per nonzero of a
//   row with old[g] != 0.
// determinism: elementwise (the zeroing stores are all 0) -> bitwise repeatable.
#include "sdca_common.cuh"

template <int LANES, typename T>
__global__ void __launch_bounds__(gpusvm::BLOCK, gpusvm::MIN_BLOCKS) gpusvm_sdca_deltas(
    const long long* __restrict__ indptr,  // CSR row pointers, n + 1
    const int* __restrict__ indices,       // CSR column indices, nnz
    const int* __restrict__ rows,          // the batch A_t (repeats allowed), k
    const int k,                           // batch size
    const double* __restrict__ m,          // margins y_i <w, x_i>, k
    const double* __restrict__ alpha,      // dual variables, n
    const double* __restrict__ row_sq,     // squared row norms, n
    const int* __restrict__ first,         // 1 at the first occurrence of a row in the batch, k
    const int has_first,                   // 0: every row steps (first is not read)
    const double* __restrict__ state,      // scalar state (beta)
    const double lam,                      // regularisation lambda
    const double n,                        // number of examples
    double* __restrict__ delta,            // output coordinate steps, k
    double* __restrict__ scratch,          // rho's scratch vector, d (zeroed where touched)
    const double* __restrict__ old,        // the tentative steps rho added, k (read when zero)
    const int zero)                        // 1: zero the scratch at the rows with old[g] != 0
{
    const int lane = threadIdx.x % LANES;
    const int group = (blockIdx.x * gpusvm::BLOCK + threadIdx.x) / LANES;
    const int stride = gridDim.x * (gpusvm::BLOCK / LANES);
    const double c = lam * n / state[gpusvm::S_BETA];               // lam n / beta
    for (int g = group; g < k; g += stride) {                        // no shuffles: any trip count
        const int r = rows[g];
        if (zero && old[g] != 0.0) {
            const long long end = indptr[r + 1];
            for (long long p = indptr[r] + lane; p < end; p += LANES) {
                gpusvm::zero_shared_double(&scratch[indices[p]]);
            }
        }
        if (lane == 0) {
            delta[g] = (has_first && first[g] == 0) ? 0.0
                                                    : gpusvm::sdca_delta(alpha[r], c, m[g], row_sq[r]);
        }
    }
}
