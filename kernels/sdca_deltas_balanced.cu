// sdca_deltas_balanced.cu: gpusvm_sdca_deltas (the steps of eq. 15 with the adapted beta, and the
// clean-up of gpusvm_sdca_rho's scratch vector) with the zeroing balanced by nonzeros
// (balanced.cuh): per tile, one thread per row computes delta[g]; the rows whose tentative step
// old[g] was nonzero have their columns of the scratch zeroed by all the block's threads.
// grid: min(k, max_blocks) blocks of BLOCK threads over tiles of tile_rows batch positions.
// in: indptr, indices, rows[k], k, tile_rows, m[k], alpha[n], row_sq[n], first[k] (when has_first),
//   state (beta), lam, n, old[k] (when zero), zero; out: delta[k]; in/out: scratch[d] (zeroed where
//   touched, when zero).  T is not read.
// traffic: per row 4 B rows + 8 B m + 8 B alpha + 8 B row_sq (+ 4 B first) + 8 B written; with
//   zero, 16 B indptr + 8 B old per row and 4 B streamed + one 8 B atomic store per nonzero of a
//   row with old[g] != 0.
// determinism: elementwise (the zeroing stores are all 0) -> bitwise repeatable.
#include "sdca_common.cuh"
#include "balanced.cuh"

template <typename T>
__global__ void __launch_bounds__(gpusvm::BLOCK, gpusvm::MIN_BLOCKS) gpusvm_sdca_deltas_balanced(
    const long long* __restrict__ indptr,  // CSR row pointers, n + 1
    const int* __restrict__ indices,       // CSR column indices, nnz
    const int* __restrict__ rows,          // the batch A_t, k
    const int k,                           // batch size
    const int tile_rows,                   // batch positions per tile, 1 .. BLOCK
    const double* __restrict__ m,          // margins, k
    const double* __restrict__ alpha,      // dual variables, n
    const double* __restrict__ row_sq,     // squared row norms, n
    const int* __restrict__ first,         // first-occurrence mask, k
    const int has_first,                   // 0: every row steps
    const double* __restrict__ state,      // scalar state (beta)
    const double lam,                      // regularisation lambda
    const double n,                        // number of examples
    double* __restrict__ delta,            // output coordinate steps, k
    double* __restrict__ scratch,          // rho's scratch vector, d (zeroed where touched)
    const double* __restrict__ old,        // the tentative steps rho added, k (read when zero)
    const int zero)                        // 1: zero the scratch at the rows with old[g] != 0
{
    __shared__ long long start[gpusvm::BLOCK];
    __shared__ int off[gpusvm::BLOCK + 1];
    const int tid = threadIdx.x;
    const double c = lam * n / state[gpusvm::S_BETA];               // lam n / beta
    for (int first_g = blockIdx.x * tile_rows; first_g < k; first_g += gridDim.x * tile_rows) {
        const int nr = min(tile_rows, k - first_g);
        int len = 0;
        if (tid < nr) {
            const int g = first_g + tid;
            const int r = rows[g];
            delta[g] = (has_first && first[g] == 0) ? 0.0
                                                    : gpusvm::sdca_delta(alpha[r], c, m[g], row_sq[r]);
            if (zero && old[g] != 0.0) {
                const long long s0 = indptr[r];
                start[tid] = s0;
                len = static_cast<int>(indptr[r + 1] - s0);
            }
        }
        const int total = gpusvm::tile_scan(len, off);
        for (int q = tid; q < total; q += gpusvm::BLOCK) {
            const int row = gpusvm::tile_row_of(off, nr, q);
            gpusvm::zero_shared_double(&scratch[indices[start[row] + (q - off[row])]]);
        }
        __syncthreads();                                             // shared arrays reused
    }
}
