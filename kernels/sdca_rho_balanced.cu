// sdca_rho_balanced.cu: gpusvm_sdca_rho (Alg. 2 of Takáč et al. 2013: rho and beta from a
// tentative step, the numerator the exact norm change of adding u = sum_g delta_g y_r x_r into the
// all-zero scratch vector) with the work balanced by nonzeros (balanced.cuh): per tile, one thread
// per row with delta_g != 0 sets its coefficient delta_g y_r and adds delta_g^2 ||x_r||^2; the
// block's threads stride over those rows' nonzeros and sum them per column in a shared-memory
// table, then each column gets one double atomic on the scratch (old values give new^2 - old^2;
// balanced.cuh's tile_scatter, as Pegasos' step); the last block updates rho and beta
// (sdca_rho_close).
// grid: min(k, max_blocks) blocks of BLOCK threads over tiles of tile_rows batch positions.
// in: indptr, indices, data, y, rows[k], k, tile_rows, delta[k], row_sq[n], beta_b, theta;
// in/out: scratch[d] (double, zero on entry, left holding u), state, acc (ACC_NORM, ACC_DEN zero
//   on entry and exit), ticket[1] (zero on entry and exit).
// traffic: per row 4 B rows + 8 B delta (+ 16 B indptr + 4 B y + 8 B row_sq when delta != 0); per
//   nonzero of a stepping row 4 + sizeof(T) B streamed and shared-memory table work; per distinct
//   column of a tile one double atomic on scratch.  Shared memory about 29 KB.
// determinism: double atomics -> NOT bitwise repeatable (as gpusvm_sdca_rho).
#include "sdca_common.cuh"
#include "balanced.cuh"
#include "sdca_rho.cu"

template <typename T>
__global__ void __launch_bounds__(gpusvm::BLOCK, gpusvm::MIN_BLOCKS) gpusvm_sdca_rho_balanced(
    const long long* __restrict__ indptr,  // CSR row pointers, n + 1
    const int* __restrict__ indices,       // CSR column indices, nnz
    const T* __restrict__ data,            // CSR values, nnz
    const T* __restrict__ y,               // labels in {-1, +1}, n
    const int* __restrict__ rows,          // the batch A_t, k
    const int k,                           // batch size
    const int tile_rows,                   // batch positions per tile, 1 .. BLOCK
    const double* __restrict__ delta,      // tentative coordinate steps, k
    const double* __restrict__ row_sq,     // squared row norms, n
    double* __restrict__ scratch,          // all-zero vector of length d (left holding u)
    double* __restrict__ state,            // scalar state (beta, rho; written by the last block)
    double* __restrict__ acc,              // SDCA accumulators (ACC_NORM, ACC_DEN used)
    unsigned int* __restrict__ ticket,     // last-block ticket
    const double beta_b,                   // upper end of beta's range
    const double theta)                    // beta <- beta^theta rho^(1 - theta)
{
    double sums[2] = {0.0, 0.0};  // num, den
    sums[0] = gpusvm::tile_rows_scatter(indptr, indices, data, k, tile_rows, scratch,
                                        static_cast<double*>(nullptr), 0.0,
                                        [&](const int g, double& coef) {
        const double dg = delta[g];
        if (dg == 0.0) {
            return -1;                                               // adds nothing
        }
        const int r = rows[g];
        sums[1] += dg * dg * row_sq[r];
        coef = dg * static_cast<double>(y[r]);                       // delta_i y_i
        return r;
    });
    gpusvm::sdca_rho_close(sums, state, acc, ticket, beta_b, theta);
}
