// pegasos_step.cu: steps 4-5 of Pegasos Fig. 1 in the sparse form w = a v, in one launch.
//   a' = a shrink;  c = eta / (k a');  for every active row (m_g < 1) and nonzero j of it:
//   v_j += c y_r x_rj  (atomicAdd, rounded to T), with the exact change of ||v||^2 accumulated as
//   sum over additions of new^2 - old^2 (old returned by the atomic, new = old + add rounded as the
//   atomic rounds it), and, when averaging, u_j += A c y_r x_rj (u in double).  Diagnostics of the
//   batch: number of active rows, hinge-loss sum, sum of y over the active rows.
//   The block that finishes last (ticket) then runs the scalar part of the step on one thread:
//   a <- a'; ||v||^2 += change; unregularised bias step; projection onto the ball of radius
//   `radius` (0 = none); averaging counters; and zeroes the accumulators for the next launch.
//   This is exactly the scalar part of NumpyBackend.pegasos_step.
// grid: min(ceil(nrows / (BLOCK / LANES)), max_blocks) blocks of BLOCK threads; a group of LANES lanes
//   owns one row and strides over its nonzeros; groups stride over the rows.
// in: indptr, indices, data, y, rows[nrows], nrows, m[nrows] (double), k, eta, shrink, flags;
// in/out: v[d] (T), u[d] (double, only if u_on), state (double[N_SLOTS]),
//   acc[4] (double, zero on entry and on exit), ticket[1] (zero on entry and on exit).
// traffic: per row 4 B rows + 8 B m + 16 B indptr + 4 B y; per nonzero of an active row
//   4 + sizeof(T) B streamed, one atomic on v (and one on u when averaging); 4 double atomics
//   per block; a few bytes of state.
// determinism: float atomics on v, u and the accumulators -> NOT bitwise repeatable (the sums are
//   the same up to rounding in any order); the NumPy backend is the deterministic path.
#include "common.cuh"

namespace gpusvm {

// Scalar part of the Pegasos step (one thread), in the operation order of NumpyBackend.pegasos_step.
__device__ __forceinline__ void pegasos_finish(
    double* state, const double dnorm, const double nact, const double loss, const double yact,
    const double eta, const double shrink, const double k, const int unreg, const double radius,
    const int average)
{
    state[S_NACT] = nact;
    state[S_LOSS] = loss;
    const double a = state[S_A] * shrink;                 // (1 - eta_t lam) w_t
    state[S_DNORM] = dnorm;
    state[S_VSQ] += dnorm;
    state[S_A] = a;
    if (unreg) {
        state[S_YACT] = yact;
        state[S_B] += eta * yact / k;                     // b - eta_t d/db of the batch loss
    }
    if (radius > 0.0) {                                   // step 5: projection
        const double wsq = a * a * state[S_VSQ];
        if (wsq > radius * radius) {
            state[S_A] = a * (radius / sqrt(wsq));
        }
    }
    if (average) {
        state[S_ASUM] += state[S_A];
        state[S_NAVG] += 1.0;
        state[S_BSUM] += state[S_B];
    }
}


// Step 4 of Fig. 1 for this thread's share of the batch: for every active row (m_g < 1) and
// nonzero j of it, v_j += c y_r x_rj (an atomic, rounded to T) and, when add_u, u_j += asum c y_r
// x_rj; sums += {new^2 - old^2 of each addition, 1, 1 - m_g, y_r} (the last three on lane 0).
// A group of LANES lanes owns one row and strides over its nonzeros; groups stride over the rows.
template <int LANES, typename T>
__device__ __forceinline__ void pegasos_add(
    const long long* __restrict__ indptr, const int* __restrict__ indices,
    const T* __restrict__ data, const T* __restrict__ y, const int* __restrict__ rows,
    const int nrows, const double* __restrict__ m, T* __restrict__ v, double* __restrict__ u,
    const bool add_u, const double c, const double asum, double (&sums)[4])
{
    group_rows<LANES>(nrows, [&](const int g, const int lane) {
        const double mg = m[g];
        if (!(mg < 1.0)) {
            return;                                            // inactive row: nothing to add
        }
        const int r = rows[g];
        const double yr = static_cast<double>(y[r]);
        if (lane == 0) {
            sums[1] += 1.0;
            sums[2] += 1.0 - mg;
            sums[3] += yr;
        }
        const double coef = yr * c;                            // (eta_t / k) y_r, in units of a
        const long long end = indptr[r + 1];
        for (long long p = indptr[r] + lane; p < end; p += LANES) {
            const int j = indices[p];
            const double contrib = static_cast<double>(data[p]) * coef;
            sums[0] += add_exact(&v[j], contrib);             // new^2 - old^2
            if (add_u) {
                atomicAdd(&u[j], asum * contrib);
            }
        }
    });
}

}  // namespace gpusvm

template <int LANES, typename T>
__global__ void __launch_bounds__(gpusvm::BLOCK, gpusvm::MIN_BLOCKS) gpusvm_pegasos_step(
    const long long* __restrict__ indptr,  // CSR row pointers, n + 1
    const int* __restrict__ indices,       // CSR column indices, nnz
    const T* __restrict__ data,            // CSR values, nnz
    const T* __restrict__ y,               // labels in {-1, +1}, n
    const int* __restrict__ rows,          // the batch A_t (repeats allowed), nrows
    const int nrows,                       // rows in the batch
    const double k,                        // the k of eta_t / k (the batch size)
    const double* __restrict__ m,          // margins of the batch (after the bias choice), nrows
    T* __restrict__ v,                     // w = a v, d (updated)
    double* __restrict__ u,                // averaging vector, d (updated when u_on)
    const int u_on,                        // 1 when u exists
    double* __restrict__ state,            // scalar state (updated by the last block)
    double* __restrict__ acc,              // accumulators {dnorm, nact, loss, yact}
    unsigned int* __restrict__ ticket,     // last-block ticket
    const double eta,                      // eta_t
    const double shrink,                   // 1 - eta_t lam
    const int unreg,                       // 1: unregularised bias step
    const double radius,                   // projection radius, 0 = none
    const int average)                     // 1: add the new iterate to the average
{
    // read before this block takes its ticket, hence before the last block writes the state
    const double c = eta / (k * (state[gpusvm::S_A] * shrink));
    const double asum = state[gpusvm::S_ASUM];
    const bool add_u = u_on != 0 && asum != 0.0;

    double sums[4] = {0.0, 0.0, 0.0, 0.0};  // dnorm, nact, loss, yact
    gpusvm::pegasos_add<LANES>(indptr, indices, data, y, rows, nrows, m, v, u, add_u, c, asum,
                               sums);
    gpusvm::block_sums_to<4>(sums, acc);
    if (gpusvm::last_block_done(ticket) && threadIdx.x == 0) {
        double tot[4];
        gpusvm::take_block_sums<4>(acc, ticket, tot);
        gpusvm::pegasos_finish(state, tot[0], tot[1], tot[2], tot[3], eta, shrink, k, unreg,
                               radius, average);
    }
}
