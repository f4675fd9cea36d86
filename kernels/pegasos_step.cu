// pegasos_step.cu: Pegasos Fig. 1 steps 3-5 of a captured segment for M outputs (Shalev-Shwartz
// et al. 2007; docs/algorithms.md, "Weights", "Squared hinge"), in the sparse form w_c = a_c v_c, for
// the iteration t = counter[0] (1-based: the kernel that drew the batch advanced it):
//   eta_t, shrink_t = 1 - eta_t lam (schedule.cuh; 0 means gpusvm_reset_scale set w = 0 and
//   a = 1, so the step keeps a), a'_c = a_c shrink_t; per active pair (m_ic < 1), slack
//   1 - m_ic, g = s_ic (hinge) or 2 s_ic slack (squared hinge):
//   V[:, c] += (eta_t / (k a'_c)) g y_ic x_r, U[:, c] += A_c times the same (averaging),
//   with the exact change new^2 - old^2 of ||v_c||^2 from each atomic's old value.
// The last block (ticket) finishes each output's scalars (S_DNORM, S_VSQ, S_A, S_NACT, S_LOSS;
// unregularised bias b_c += eta_t sum g y / k; projection onto ||w_c|| <= radius; the average
// from t_avg on) and folds a_c into V[:, c] when |a_c| < threshold (U[:, c] -= A_c V[:, c],
// V[:, c] *= a_c, ||v_c||^2 *= a_c^2, A_c = 0, a_c = 1): one launch, no renormalize launch.
// grid: M1 = 1: min(k, max_blocks) blocks over tiles of tile_rows batch positions; one thread per
//   tile row reads m, y and indptr, the block's threads stride over the tile's active nonzeros
//   (coalesced) and sum them per column in a shared table, then one atomic per column of the
//   table on v (and u); M1 = 0: one thread per (row, output) pair, one atomic per nonzero.  The
//   last block's thread c finishes output c; a fold strides the d M entries of V with its BLOCK
//   threads (rare: |a| shrinks like 1/t).
// in: indptr, indices, data, Y[n x M], sw[n x M] (WT), rows[k], k, tile_rows, M, kk (the k of
//   eta_t / k), m[k x M], counter[1], schedule, lam, eta0, norma_p, unreg, radius, averaged,
//   t_avg, threshold, d; in/out: V[d x M] (T), U[d x M] (double, when u_on), state[N_SLOTS x M],
//   acc[4 M] and ticket[1] (zero on entry and exit).
// traffic: per pair 8 B m (+ 16 B indptr, 4 B rows and sizeof(T) B y when active, + 8 B s with
//   weights); per nonzero of an active row 4 + sizeof(T) B streamed; M1: per distinct column of
//   a tile one atomic on v (and u), shared memory about 29 KB; M1 = 0: one atomic per nonzero and
//   moving output (and on U), four double atomics per active pair on acc.
// determinism: float atomics on V, U and acc -> NOT bitwise repeatable (sums agree to rounding;
//   the NumPy backend sums a batch per column in double and rounds once).
#include "common.cuh"
#include "schedule.cuh"
#include "outputs.cuh"

template <typename T, int M1, int SQ, int WT, typename I = int>
__global__ void __launch_bounds__(gpusvm::BLOCK, gpusvm::MIN_BLOCKS) gpusvm_pegasos_step(
    const long long* __restrict__ indptr,  // CSR row pointers, n + 1
    const I* __restrict__ indices,         // CSR column indices, nnz (int or long long)
    const T* __restrict__ data,            // CSR values, nnz
    const T* __restrict__ Y,               // labels in {-1, +1}, n x M
    const double* __restrict__ sw,         // example weights, n x M (WT)
    const int* __restrict__ rows,          // the batch A_t, k
    const int k,                           // rows in the batch
    const int tile_rows,                   // batch positions per tile (M1), 1 .. BLOCK
    const int outputs,                     // M, the number of outputs (1 when M1)
    const double kk,                       // the k of eta_t / k
    const double* __restrict__ m,          // margins of the batch, k x M
    T* __restrict__ V,                     // W = V diag(a), d x M (updated)
    double* __restrict__ U,                // averaging sums, d x M (updated when u_on)
    const int u_on,                        // 1 when U exists
    const long long d,                     // rows of V
    double* __restrict__ state,            // scalar state, N_SLOTS x M (updated by the last block)
    double* __restrict__ acc,              // accumulators {dnorm, nact, loss, yact} x M
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
    const double threshold)                // fold a_c into V[:, c] when |a_c| < threshold
{
    const int M = M1 != 0 ? 1 : outputs;               // a constant 1 in the M1 instances
    // eta_t and shrink_t of t = counter[0], recomputed by the last block rather than kept live
    // (in registers) across the scatter
    const auto step_at = [&](double& eta, double& shrink) {
        const long long t = gpusvm::load_coherent_ll(counter);
        gpusvm::step_size(schedule, t, lam, eta0, norma_p, &eta, &shrink);
        if (shrink == 0.0) {
            shrink = 1.0;                                // w = 0 already (gpusvm_reset_scale)
        }
        return t;
    };
    double eta = 0.0;
    double shrink = 0.0;
    step_at(eta, shrink);
    // read before this block takes its ticket, hence before the last block writes the state
    const double c0 = M1 != 0 ? eta / (kk * (state[gpusvm::S_A] * shrink)) : 0.0;
    gpusvm::OutputSums<M1, 4> sums(acc, M);              // dnorm, nact, loss, yact
    gpusvm::batch_scatter<M1>(indptr, indices, data, k, M, tile_rows, V, u_on ? U : nullptr,
                              [&](const int c) { return state[gpusvm::S_ASUM * M + c]; }, sums,
                              [&](const int i, const int c, const long long p, double& coef) {
        const double mp = m[p];
        if (!(mp < 1.0)) {
            return -1;                                             // inactive pair
        }
        const int r = rows[i];
        const double y = static_cast<double>(Y[static_cast<long long>(r) * M + c]);
        const double s = gpusvm::weight_of<WT>(sw, r, M, c);
        const double slack = 1.0 - mp;
        const double g = SQ != 0 ? 2.0 * s * slack : s;
        sums.add(1, c, 1.0);
        sums.add(2, c, SQ != 0 ? s * slack * slack : s * slack);
        sums.add(3, c, g * y);
        const double step = M1 != 0 ? c0 : eta / (kk * (state[gpusvm::S_A * M + c] * shrink));
        coef = (g * y) * step;                                     // (eta_t / k) g y, units of a
        return r;
    });
    sums.flush();
    if (!gpusvm::last_block_done(ticket)) {
        return;
    }
    __shared__ int fold;
    if (threadIdx.x == 0) {
        fold = 0;
    }
    __syncthreads();
    const long long t = step_at(eta, shrink);
    const bool average = averaged != 0 && t >= t_avg;
    for (int c = threadIdx.x; c < M; c += gpusvm::BLOCK) {
        double tot[4];
        gpusvm::take_sums<4>(acc, M, c, tot);
        double* const s = state + c;                             // slot q of output c: s[q M]
        s[gpusvm::S_NACT * M] = tot[1];
        s[gpusvm::S_LOSS * M] = tot[2];
        const double a = s[gpusvm::S_A * M] * shrink;              // (1 - eta_t lam) w_t
        s[gpusvm::S_DNORM * M] = tot[0];
        s[gpusvm::S_VSQ * M] += tot[0];
        double anew = a;
        if (unreg) {
            s[gpusvm::S_YACT * M] = tot[3];
            s[gpusvm::S_B * M] += eta * tot[3] / kk;               // b - eta_t d/db of the loss
        }
        if (radius > 0.0) {                                        // step 5: projection
            const double wsq = a * a * s[gpusvm::S_VSQ * M];
            if (wsq > radius * radius) {
                anew = a * (radius / sqrt(wsq));
            }
        }
        s[gpusvm::S_A * M] = anew;
        if (average) {
            s[gpusvm::S_ASUM * M] += anew;
            s[gpusvm::S_NAVG * M] += 1.0;
            s[gpusvm::S_BSUM * M] += s[gpusvm::S_B * M];
        }
        if (fabs(anew) < threshold) {
            atomicMax(&fold, 1);
        }
    }
    if (threadIdx.x == 0) {
        gpusvm::reset_ticket(ticket);
    }
    __syncthreads();                                     // every a'_c written, fold decided
    if (!fold) {
        return;                                          // block-uniform
    }
    for (long long e = threadIdx.x; e < d * M; e += gpusvm::BLOCK) {
        const int c = static_cast<int>(e % M);
        const double a = state[gpusvm::S_A * M + c];
        if (fabs(a) < threshold) {
            const T ve = V[e];
            if (u_on) {
                U[e] -= state[gpusvm::S_ASUM * M + c] * static_cast<double>(ve);
            }
            V[e] = ve * static_cast<T>(a);
        }
    }
    __syncthreads();                                     // the entries read a_c and A_c
    for (int c = threadIdx.x; c < M; c += gpusvm::BLOCK) {
        const double a = state[gpusvm::S_A * M + c];
        if (fabs(a) < threshold) {
            state[gpusvm::S_VSQ * M + c] *= a * a;
            state[gpusvm::S_ASUM * M + c] = 0.0;
            state[gpusvm::S_A * M + c] = 1.0;
        }
    }
}
