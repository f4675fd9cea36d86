// sdca_rho.cu: the measure of Alg. 2 (Takac et al. 2013) in a captured SDCA segment, per output c:
// from the tentative steps delta_ic of gpusvm_sdca_margins,
//   rho_c = ||sum_i delta_ic y_ic x_i||^2 / sum_i delta_ic^2 ||x_i||^2, clipped to [1, beta_b],
//   beta_c <- clip(beta_c^theta rho_c^(1 - theta), 1, beta_b)   (rho_c in S_TMP0),
// beta_c kept when the denominator is 0.  The numerator is the exact norm change of adding the
// sum into the all-zero scratch matrix (d x M, double), which gpusvm_sdca_apply's settle zeroes
// again at the batch's nonzeros; the last block (ticket) updates beta.
// grid: as gpusvm_pegasos_step (M1 = 1: tiles balanced by nonzeros with the column table, one
//   atomic per distinct column of a tile; M1 = 0: one thread per (row, output) pair).
// in: indptr, indices, data, Y[n x M], rows[k], k, tile_rows, M, delta[k x M], row_sq[n], beta_b,
//   theta; in/out: scratch[d x M] (zero on entry, left holding the sums), state (S_BETA, S_TMP0),
//   acc (ACC_NUM, ACC_DEN rows, zero on entry and exit), ticket[1].
// traffic: per pair 8 B delta (+ 16 B indptr, 4 B rows, sizeof(T) B y and 8 B row_sq when it
//   moves); per nonzero of a moving row 4 + sizeof(T) B streamed and an 8 B atomic (M1: one per
//   distinct column of a tile).
// determinism: double atomics in any order -> repeatable up to rounding.
#include "common.cuh"
#include "outputs.cuh"

namespace gpusvm {

// The last block's part: rho_c and beta_c of every output from the sums (a function of its own,
// not inlined: pow's registers stay out of the scatter's allocation).
__device__ __noinline__ void rho_finish(double* __restrict__ state, double* __restrict__ acc,
                                        const int M, const double beta_b, const double theta) {
    for (int c = threadIdx.x; c < M; c += BLOCK) {
        double tot[2];
        take_sums<2>(acc + ACC_NUM * M, M, c, tot);
        if (tot[1] > 0.0) {                                          // else a null tentative step
            const double rho = fmin(fmax(tot[0] / tot[1], 1.0), beta_b);
            state[S_TMP0 * M + c] = rho;
            const double beta = pow(state[S_BETA * M + c], theta) * pow(rho, 1.0 - theta);
            state[S_BETA * M + c] = fmin(fmax(beta, 1.0), beta_b);  // despite rounding
        }
    }
}

}  // namespace gpusvm

template <typename T, int M1, typename I = int>
__global__ void __launch_bounds__(gpusvm::BLOCK, gpusvm::MIN_BLOCKS) gpusvm_sdca_rho(
    const long long* __restrict__ indptr,  // CSR row pointers, n + 1
    const I* __restrict__ indices,         // CSR column indices, nnz (int or long long)
    const T* __restrict__ data,            // CSR values, nnz
    const T* __restrict__ Y,               // labels in {-1, +1}, n x M
    const int* __restrict__ rows,          // the batch A_t, k
    const int k,                           // batch size
    const int tile_rows,                   // batch positions per tile (M1), 1 .. BLOCK
    const int outputs,                     // M, the number of outputs (1 when M1)
    const double* __restrict__ delta,      // tentative coordinate steps, k x M
    const double* __restrict__ row_sq,     // squared row norms, n
    double* __restrict__ scratch,          // all-zero d x M (left holding the sums)
    double* __restrict__ state,            // scalar state (beta, rho; written by the last block)
    double* __restrict__ acc,              // accumulators, N_ACC x M (ACC_NUM, ACC_DEN used)
    unsigned int* __restrict__ ticket,     // last-block ticket
    const double beta_b,                   // upper end of beta's range (eq. 11)
    const double theta)                    // beta <- beta^theta rho^(1 - theta)
{
    const int M = M1 != 0 ? 1 : outputs;               // a constant 1 in the M1 instances
    gpusvm::OutputSums<M1, 2> sums(acc + gpusvm::ACC_NUM * M, M);    // num, den
    gpusvm::batch_scatter<M1>(indptr, indices, data, k, M, tile_rows, scratch,
                              static_cast<double*>(nullptr), [](int) { return 0.0; }, sums,
                              [&](const int i, const int c, const long long p, double& coef) {
        const double dp = delta[p];
        if (dp == 0.0) {
            return -1;                                               // adds nothing
        }
        const int r = rows[i];
        sums.add(1, c, dp * dp * row_sq[r]);
        coef = dp * static_cast<double>(Y[static_cast<long long>(r) * M + c]);   // delta y
        return r;
    });
    sums.flush();
    if (!gpusvm::last_block_done(ticket)) {
        return;
    }
    gpusvm::rho_finish(state, acc, M, beta_b, theta);
    if (threadIdx.x == 0) {
        gpusvm::reset_ticket(ticket);
    }
}
