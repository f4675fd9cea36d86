// sdca_rho.cu: Alg. 2 of Takáč et al. (2013), the adaptation of beta from a tentative step, in one
// launch: with u = sum_g delta_g y_r x_r over the batch (r = rows[g]),
//   num = ||u||^2 (the exact norm change of adding u into the all-zero scratch vector: sum over
//         additions of new^2 - old^2, old returned by the atomic, in double),
//   den = sum_g delta_g^2 ||x_r||^2,
// and the block that finishes last (ticket), if den > 0:
//   rho = clip(num / den, 1, beta_b) -> state[S_TMP0];
//   beta = clip(beta^theta rho^(1 - theta), 1, beta_b) -> state[S_BETA]
// (the scalar part of NumpyBackend.sdca_adapt_beta).  Rows with delta_g = 0 add nothing and are
// skipped.  The scratch is left holding u at the columns of the rows with delta_g != 0:
// gpusvm_sdca_deltas (zero = 1, old = this delta) zeroes exactly those entries again.
// grid: min(ceil(k / (BLOCK / LANES)), max_blocks) blocks of BLOCK threads; a group of LANES lanes
//   owns one row and strides over its nonzeros; groups stride over the rows; block sums
//   (shuffles + shared memory) and two double atomics per block into acc.
// in: indptr, indices, data, y, rows[k], k, delta[k] (double), row_sq[n] (double), beta_b, theta;
// in/out: scratch[d] (double, all zero on entry), state (double[N_SLOTS]),
//   acc[N_ACC] (double, ACC_NORM and ACC_DEN zero on entry and exit), ticket[1] (zero on entry
//   and exit).
// traffic: per row 4 B rows + 8 B delta (+ 16 B indptr + 4 B y + 8 B row_sq when delta != 0);
//   per nonzero of a stepping row 4 + sizeof(T) B streamed and one double atomic on scratch.
// determinism: double atomics on scratch and acc -> NOT bitwise repeatable (num and den agree up
//   to rounding in any order); the NumPy backend is the deterministic path.
#include "sdca_common.cuh"

namespace gpusvm {

// The end of a gpusvm_sdca_rho launch (shared with sdca_rho_balanced.cu): block sums of
// {num, den} into acc, and the last block's update of rho and beta.  Every thread must call it.
__device__ __forceinline__ void sdca_rho_close(double (&sums)[2], double* __restrict__ state,
                                               double* __restrict__ acc,
                                               unsigned int* __restrict__ ticket,
                                               const double beta_b, const double theta)
{
    block_sum<2>(sums);
    if (threadIdx.x == 0) {
        atomicAdd(&acc[ACC_NORM], sums[0]);
        atomicAdd(&acc[ACC_DEN], sums[1]);
    }
    if (last_block_done(ticket) && threadIdx.x == 0) {
        const double num = load_coherent(&acc[ACC_NORM]);
        const double den = load_coherent(&acc[ACC_DEN]);
        acc[ACC_NORM] = 0.0;
        acc[ACC_DEN] = 0.0;
        reset_ticket(ticket);
        if (den > 0.0) {                                             // else a null tentative step
            const double rho = fmin(fmax(num / den, 1.0), beta_b);
            state[S_TMP0] = rho;
            const double beta = pow(state[S_BETA], theta) * pow(rho, 1.0 - theta);
            state[S_BETA] = fmin(fmax(beta, 1.0), beta_b);  // [1, beta_b] despite rounding
        }
    }
}

}  // namespace gpusvm


template <int LANES, typename T>
__global__ void __launch_bounds__(gpusvm::BLOCK, gpusvm::MIN_BLOCKS) gpusvm_sdca_rho(
    const long long* __restrict__ indptr,  // CSR row pointers, n + 1
    const int* __restrict__ indices,       // CSR column indices, nnz
    const T* __restrict__ data,            // CSR values, nnz
    const T* __restrict__ y,               // labels in {-1, +1}, n
    const int* __restrict__ rows,          // the batch A_t (repeats allowed), k
    const int k,                           // batch size
    const double* __restrict__ delta,      // tentative coordinate steps, k
    const double* __restrict__ row_sq,     // squared row norms, n
    double* __restrict__ scratch,          // all-zero vector of length d (left holding u)
    double* __restrict__ state,            // scalar state (beta, rho; written by the last block)
    double* __restrict__ acc,              // SDCA accumulators (ACC_NORM, ACC_DEN used)
    unsigned int* __restrict__ ticket,     // last-block ticket
    const double beta_b,                   // upper end of beta's range (eq. 11)
    const double theta)                    // beta <- beta^theta rho^(1 - theta)
{
    double sums[2] = {0.0, 0.0};  // num, den
    gpusvm::group_rows<LANES>(k, [&](const int g, const int lane) {
        const double dg = delta[g];
        if (dg == 0.0) {
            return;                                                  // adds nothing
        }
        const int r = rows[g];
        if (lane == 0) {
            sums[1] += dg * dg * row_sq[r];
        }
        const double coef = dg * static_cast<double>(y[r]);          // delta_i y_i
        const long long end = indptr[r + 1];
        for (long long p = indptr[r] + lane; p < end; p += LANES) {
            sums[0] += gpusvm::add_exact(&scratch[indices[p]], static_cast<double>(data[p]) * coef);
        }
    });
    gpusvm::sdca_rho_close(sums, state, acc, ticket, beta_b, theta);
}
