// pegasos_segment_step.cu: gpusvm_pegasos_step (pegasos_step.cu) as a captured segment replays
// it: the iteration t = counter[0] (1-based: the kernel that drew this iteration's batch,
// gpusvm_margins_balanced or gpusvm_sample_next, advanced it) is read from device memory, and
// from it
//   eta_t, 1 - eta_t lam (schedule.cuh; a zero shrink means gpusvm_reset_scale_next already set
//   w = 0, so the step keeps a), and whether the new iterate enters the average (t >= t_avg);
// then steps 4-5 of gpusvm_pegasos_step with the work balanced by nonzeros and the updates
// aggregated per column (balanced.cuh): per tile of the batch, the active rows' contributions
// c y_r x_rj are summed per column in a shared-memory table (double), then each column of the
// table gets one atomic on v (and u), with the exact change new^2 - old^2 of ||v||^2 from the
// atomic's old value; a column the table cannot place gets its atomic at once.  The last block
// finishes the scalars (pegasos_finish) and folds a into v when |a| < threshold
// (NumpyBackend.renormalize: u -= A v, v *= a, ||v||^2 *= a^2, A = 0, a = 1), so an iteration
// needs no renormalize launch.
// grid: min(nrows, max_blocks) blocks of BLOCK threads, tiles of tile_rows batch positions (as
//   margins_balanced.cu); one thread per tile row reads m, y and indptr, the BLOCK threads stride
//   over the tile's active nonzeros (coalesced), insert into the table, then flush it; the last
//   block (ticket) finishes on thread 0 and, only when |a| fell below the threshold, strides over
//   d with its BLOCK threads.
// in: indptr, indices, data, y, rows[nrows], nrows, tile_rows, k, m[nrows] (double), counter[1],
//   schedule, lam, eta0, norma_p, unreg, radius, averaged, t_avg, threshold, d;
// in/out: v[d] (T), u[d] (double, when u_on), state, acc[4] (zero on entry and exit),
//   ticket[1] (zero on entry and exit).
// traffic: per row 4 B rows + 8 B m (+ 16 B indptr + 4 B y when active); per nonzero of an active
//   row 4 + sizeof(T) B streamed and shared-memory table work; per distinct column of a tile one
//   atomic on v (one on u when averaging); 8 B of counter per thread; when folding (rare: |a|
//   shrinks like 1/t) 2 sizeof(T) d B (+ 16 d B with u) by one block.  Shared memory about 29 KB.
// determinism: float atomics on v, u and acc, shared atomics in the table -> NOT bitwise
//   repeatable (a column's contributions are summed in double in any order, then rounded once per
//   tile; the NumPy backend sums a batch's contributions in double and rounds once).
#include "common.cuh"
#include "schedule.cuh"
#include "balanced.cuh"
#include "pegasos_step.cu"

template <typename T>
__global__ void __launch_bounds__(gpusvm::BLOCK, gpusvm::MIN_BLOCKS) gpusvm_pegasos_segment_step(
    const long long* __restrict__ indptr,  // CSR row pointers, n + 1
    const int* __restrict__ indices,       // CSR column indices, nnz
    const T* __restrict__ data,            // CSR values, nnz
    const T* __restrict__ y,               // labels in {-1, +1}, n
    const int* __restrict__ rows,          // the batch A_t, nrows
    const int nrows,                       // rows in the batch
    const int tile_rows,                   // batch positions per tile, 1 .. BLOCK
    const double k,                        // the k of eta_t / k
    const double* __restrict__ m,          // margins of the batch, nrows
    T* __restrict__ v,                     // w = a v, d (updated)
    double* __restrict__ u,                // averaging vector, d (updated when u_on)
    const int u_on,                        // 1 when u exists
    const long long d,                     // length of v
    double* __restrict__ state,            // scalar state (updated by the last block)
    double* __restrict__ acc,              // accumulators {dnorm, nact, loss, yact}
    unsigned int* __restrict__ ticket,     // last-block ticket
    const long long* __restrict__ counter, // the 1-based iteration t
    const int schedule,                    // 0 pegasos, 1 norma, 2 constant (schedule.cuh)
    const double lam,                      // regularisation
    const double eta0,                     // constant schedule's step
    const double norma_p,                  // NORMA's p
    const int unreg,                       // 1: unregularised bias step
    const double radius,                   // projection radius, 0 = none
    const int averaged,                    // 1: iterates from t_avg on enter the average
    const long long t_avg,                 // first averaged iteration
    const double threshold)                // renormalise when |a| < threshold
{
    const long long t = gpusvm::load_coherent_ll(counter);
    double eta = 0.0;
    double shrink = 0.0;
    gpusvm::step_size(schedule, t, lam, eta0, norma_p, &eta, &shrink);
    if (shrink == 0.0) {
        shrink = 1.0;                                    // w = 0 already (reset_scale_next)
    }
    const int average = (averaged != 0 && t >= t_avg) ? 1 : 0;
    // read before this block takes its ticket, hence before the last block writes the state
    const double c = eta / (k * (state[gpusvm::S_A] * shrink));
    const double asum = state[gpusvm::S_ASUM];

    double sums[4] = {0.0, 0.0, 0.0, 0.0};  // dnorm, nact, loss, yact
    sums[0] = gpusvm::tile_rows_scatter(indptr, indices, data, nrows, tile_rows, v,
                                        u_on != 0 ? u : nullptr, asum,
                                        [&](const int g, double& coef) {
        const double mg = m[g];
        if (!(mg < 1.0)) {
            return -1;                                             // inactive row
        }
        const int r = rows[g];
        const double yr = static_cast<double>(y[r]);
        sums[1] += 1.0;
        sums[2] += 1.0 - mg;
        sums[3] += yr;
        coef = yr * c;                                             // (eta_t / k) y_r, units of a
        return r;
    });
    gpusvm::block_sums_to<4>(sums, acc);
    __shared__ double scale[2];                           // the new a and A, for the fold
    if (gpusvm::last_block_done(ticket)) {
        if (threadIdx.x == 0) {
            double tot[4];
            gpusvm::take_block_sums<4>(acc, ticket, tot);
            gpusvm::pegasos_finish(state, tot[0], tot[1], tot[2], tot[3], eta, shrink, k, unreg,
                                   radius, average);
            scale[0] = state[gpusvm::S_A];
            scale[1] = state[gpusvm::S_ASUM];
        }
        __syncthreads();
        const double a = scale[0];
        if (fabs(a) < threshold) {                        // renormalize, by this block alone
            const double big_a = scale[1];
            const T f = static_cast<T>(a);
            for (long long j = threadIdx.x; j < d; j += gpusvm::BLOCK) {
                const T vj = v[j];
                if (u_on) {
                    u[j] -= big_a * static_cast<double>(vj);
                }
                v[j] = vj * f;
            }
            if (threadIdx.x == 0) {
                state[gpusvm::S_VSQ] *= a * a;
                state[gpusvm::S_ASUM] = 0.0;
                state[gpusvm::S_A] = 1.0;
            }
        }
    }
}
