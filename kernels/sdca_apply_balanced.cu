// sdca_apply_balanced.cu: gpusvm_sdca_apply (the step of a mini-batch SDCA iteration, decided on the
// device: phase 0 steps, phase 1 settles a checked step) with the work balanced by nonzeros
// (balanced.cuh): per tile, one thread per row with delta_g != 0 adds delta_g and |delta_g| to the
// block sums, moves alpha_r when the phase says so, and sets its coefficient (+-) delta_g y_r /
// (lam n a) when v moves; the block's threads stride over those rows' nonzeros and sum their
// contributions per column in a shared-memory table, then each column gets one atomic on v (the
// old values give the exact change of ||v||^2; balanced.cuh's tile_scatter, as Pegasos' step):
// the hot columns of text data take one atomic per tile instead of one per row; the block sums
// and the last block's decision are those of gpusvm_sdca_apply (sdca_apply_close).
// fused (Alg. 2 in a captured segment): phase 0 first computes each row's step of eq. (15) with
//   the beta that gpusvm_sdca_rho_balanced's last block just adapted (sdca_delta of m[g], alpha_r
//   and ||x_r||^2; 0 where first[g] == 0) and writes it to delta[g], which phase 1 reads back;
//   phase 1 also zeroes rho's scratch at the columns of the rows whose tentative step old[g] was
//   nonzero (balanced.cuh's tile_rows_zero): the work of a kernel of its own before, folded into
//   the step and the settle, one kernel boundary less per iteration.  Not fused: delta[] is read as
//   given and m, row_sq, first, scratch and old are not touched.
// grid: min(k, max_blocks) blocks of BLOCK threads over tiles of tile_rows batch positions.
// in: indptr, indices, data, y, rows[k], k, tile_rows, lam, n, check, phase; fused: m[k],
//   row_sq[n], first[k] (when has_first), old[k] (phase 1); in/out: delta[k] (written in a fused
//   phase 0, read otherwise), v[d] (T), alpha[n], state, acc (as gpusvm_sdca_apply), ticket[1]
//   (zero on entry and exit), scratch[d] (double; zeroed where touched in a fused phase 1).
// traffic: per row 4 B rows + 8 B delta (+ 16 B indptr + 4 B y + one 8 B atomic on alpha when
//   delta != 0); per nonzero of a moving row 4 + sizeof(T) B streamed and shared-memory table
//   work; per distinct column of a tile one atomic on v.  Fused phase 0 adds per row 8 B m + 8 B
//   alpha + 8 B row_sq (+ 4 B first) and 8 B delta written; fused phase 1 adds per row 8 B old,
//   and for a row with old[g] != 0 16 B indptr and per nonzero 4 B streamed and one 8 B atomic
//   store on the scratch.  Shared memory about 32 KB.
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
    double* __restrict__ delta,            // coordinate steps, k (written by a fused phase 0)
    T* __restrict__ v,                     // w = a v, d (updated)
    double* __restrict__ alpha,            // dual variables, n
    double* __restrict__ state,            // scalar state (updated by the last block)
    double* __restrict__ acc,              // SDCA accumulators
    unsigned int* __restrict__ ticket,     // last-block ticket
    const double lam,                      // regularisation lambda
    const double n,                        // number of examples
    const int check,                       // 1: Alg. 2, keep the step only if D does not drop
    const int phase,                       // 0: step; 1: settle a checked step
    const double* __restrict__ m,          // margins, k (fused phase 0)
    const double* __restrict__ row_sq,     // squared row norms, n (fused phase 0)
    const int* __restrict__ first,         // first-occurrence mask, k (fused phase 0, has_first)
    const int has_first,                   // 0: every row steps
    double* __restrict__ scratch,          // rho's scratch vector, d (zeroed by a fused phase 1)
    const double* __restrict__ old,        // the tentative steps rho added, k (fused phase 1)
    const int fused)                       // 1: the steps computed here, the scratch zeroed here
{
    // read before this block takes its ticket, hence before the last block writes them; beta
    // was adapted by the previous launch (gpusvm_sdca_rho_balanced) and is not written here
    const gpusvm::SdcaApplyPlan plan = gpusvm::sdca_apply_plan(state, acc, lam, n, check, phase);
    const bool steps_here = fused && phase == 0;
    const double c = steps_here ? lam * n / state[gpusvm::S_BETA] : 0.0;   // lam n / beta
    double sums[3] = {0.0, 0.0, 0.0};  // dn, dsum, dabs
    sums[0] = gpusvm::tile_rows_scatter(indptr, indices, data, k, tile_rows, v,
                                        static_cast<double*>(nullptr), 0.0,
                                        [&](const int g, double& coef) {
        const int r = rows[g];
        double dg;
        if (steps_here) {                                            // eq. (15), beta^(t+1)
            dg = (has_first && first[g] == 0) ? 0.0
                                              : gpusvm::sdca_delta(alpha[r], c, m[g], row_sq[r]);
            delta[g] = dg;
        } else {
            dg = delta[g];
        }
        if (dg == 0.0) {
            return -1;                                               // nothing to add or count
        }
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
    if (fused && phase == 1) {                                       // rho's scratch, clean again
        gpusvm::tile_rows_zero(indptr, indices, k, tile_rows, scratch, [&](const int g) {
            return old[g] != 0.0 ? rows[g] : -1;
        });
    }
    gpusvm::sdca_apply_close<T>(sums, state, acc, ticket, lam, n, check, phase, plan);
}
