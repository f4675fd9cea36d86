// sdca_apply_balanced.cu: gpusvm_sdca_apply (the step of a mini-batch SDCA iteration, decided on the
// device: phase 0 steps, phase 1 settles a checked step) with the work balanced by nonzeros
// (balanced.cuh): per tile, one thread per row with delta_g != 0 adds delta_g and |delta_g| to the
// block sums, moves alpha_r when the phase says so, and sets its coefficient (+-) delta_g y_r /
// (lam n a) when v moves; the block's threads stride over those rows' nonzeros and sum their
// contributions per column in a shared-memory table, then each column gets one atomic on v (the
// old values give the exact change of ||v||^2; balanced.cuh's tile_scatter, as Pegasos' step):
// the hot columns of text data take one atomic per tile instead of one per row; the block sums
// and the last block's decision are those of gpusvm_sdca_apply (sdca_apply_close).
// grid: min(k, max_blocks) blocks of BLOCK threads over tiles of tile_rows batch positions.
// in: indptr, indices, data, y, rows[k], k, tile_rows, delta[k], lam, n, check, phase;
// in/out: v[d] (T), alpha[n], state, acc (as gpusvm_sdca_apply), ticket[1] (zero on entry and
//   exit).
// traffic: per row 4 B rows + 8 B delta (+ 16 B indptr + 4 B y + one 8 B atomic on alpha when
//   delta != 0); per nonzero of a moving row 4 + sizeof(T) B streamed and shared-memory table
//   work; per distinct column of a tile one atomic on v.  Shared memory about 29 KB.
// determinism: float atomics on v, shared atomics in the table -> NOT bitwise repeatable (a
//   column's contributions are summed in double in any order, then rounded once per tile).
#include "sdca_common.cuh"
#include "balanced.cuh"
#include "sdca_apply.cu"

template <typename T>
__global__ void __launch_bounds__(gpusvm::BLOCK, gpusvm::MIN_BLOCKS) gpusvm_sdca_apply_balanced(
    const long long* __restrict__ indptr,  // CSR row pointers, n + 1
    const int* __restrict__ indices,       // CSR column indices, nnz
    const T* __restrict__ data,            // CSR values, nnz
    const T* __restrict__ y,               // labels in {-1, +1}, n
    const int* __restrict__ rows,          // the batch A_t, k
    const int k,                           // batch size
    const int tile_rows,                   // batch positions per tile, 1 .. BLOCK
    const double* __restrict__ delta,      // coordinate steps, k
    T* __restrict__ v,                     // w = a v, d (updated)
    double* __restrict__ alpha,            // dual variables, n
    double* __restrict__ state,            // scalar state (updated by the last block)
    double* __restrict__ acc,              // SDCA accumulators
    unsigned int* __restrict__ ticket,     // last-block ticket
    const double lam,                      // regularisation lambda
    const double n,                        // number of examples
    const int check,                       // 1: Alg. 2, keep the step only if D does not drop
    const int phase)                       // 0: step; 1: settle a checked step
{
    // read before this block takes its ticket, hence before the last block writes them
    const gpusvm::SdcaApplyPlan plan = gpusvm::sdca_apply_plan(state, acc, lam, n, check, phase);
    double sums[3] = {0.0, 0.0, 0.0};  // dn, dsum, dabs
    sums[0] = gpusvm::tile_rows_scatter(indptr, indices, data, k, tile_rows, v,
                                        static_cast<double*>(nullptr), 0.0,
                                        [&](const int g, double& coef) {
        const double dg = delta[g];
        if (dg == 0.0) {
            return -1;                                               // nothing to add or count
        }
        const int r = rows[g];
        sums[1] += dg;
        sums[2] += fabs(dg);
        if (plan.move_alpha) {
            atomicAdd(&alpha[r], dg);                                // a repeated row adds twice
        }
        if (!plan.move_v) {
            return -1;
        }
        coef = dg * static_cast<double>(y[r]) * plan.scale;
        return r;
    });
    gpusvm::sdca_apply_close<T>(sums, state, acc, ticket, lam, n, check, phase, plan);
}
