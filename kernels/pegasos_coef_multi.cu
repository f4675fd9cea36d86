// pegasos_coef_multi.cu: the per-row part of Pegasos Fig. 1 steps 3-4 on the general path (M
// outputs, example weights s_i, the hinge or the squared hinge; GeneralPath.pegasos_step_m) for the
// iteration t = counter[0] (1-based) of a captured segment:
//   eta_t, shrink_t from t (schedule.cuh; a zero shrink means gpusvm_reset_scale_multi_next set
//   w = 0 and a_c = 1, so the step keeps a_c), a'_c = a_c shrink_t,
//   active = m_ic < 1, slack = max(0, 1 - m_ic), g = s_i (hinge) or 2 s_i slack (squared),
//   coef[i, c] = active ? (g y_ic) (eta_t / (k a'_c)) : 0   (the coefficients of accumulate_multi),
//   acc[0 M + c] += active, acc[1 M + c] += s_i slack (or s_i slack^2), acc[2 M + c] += active g y_ic;
// and zeroes dn[M] for the accumulate_multi launch that follows.  gpusvm_pegasos_scalars_multi
// reads acc and dn and zeroes acc.
// grid: min(ceil(k M / BLOCK), max_blocks) blocks of BLOCK threads; thread t owns the pair
//   (i, c) = (t / M, t % M) and strides over the k M pairs (as margins_multi.cu).
// in: rows[k], k, M, Y[n x M] (T), sw[n x M] (when weighted), m[k x M], state (a_c), counter[1], kk,
//   schedule, lam, eta0, norma_p, squared; out: coef[k x M], dn[M] (zeroed); in/out: acc[3 M].
// traffic: per pair 8 B m + 8 B coef + sizeof(T) B of Y (+ 8 B weight and 4 B rows shared by
//   the row's M threads); three double atomics per pair on 3 M addresses (the general path's
//   batches are small next to its gathers: kept simple).
// determinism: coef is elementwise (bitwise that of the reference); acc is summed by atomics in
//   any order -> repeatable up to rounding.
#include "common.cuh"
#include "schedule.cuh"

template <typename T>
__global__ void __launch_bounds__(gpusvm::BLOCK, gpusvm::MIN_BLOCKS) gpusvm_pegasos_coef_multi(
    const int* __restrict__ rows,          // the batch A_t, k
    const int k,                           // batch size
    const int M,                           // number of outputs
    const T* __restrict__ Y,               // labels in {-1, +1}, n x M
    const double* __restrict__ sw,         // sample weights, n x M (when weighted): s_ic
    const int weighted,                    // 1: sw holds the weights, 0: every s_i = 1
    const double* __restrict__ m,          // margins, k x M
    const double* __restrict__ state,      // scalar state, N_SLOTS x M (a_c)
    const long long* __restrict__ counter, // the 1-based iteration t
    const double kk,                       // the k of eta_t / k
    const int schedule,                    // schedule.cuh
    const double lam,
    const double eta0,
    const double norma_p,
    const int squared,                     // 1: the squared hinge, 0: the hinge
    double* __restrict__ coef,             // out: coefficients of the rows, k x M
    double* __restrict__ acc,              // accumulators {nact, loss, yact} x M
    double* __restrict__ dn)               // out: zeroed, M
{
    double eta = 0.0;
    double shrink = 0.0;
    gpusvm::step_size(schedule, gpusvm::load_coherent_ll(counter), lam, eta0, norma_p, &eta,
                      &shrink);
    if (shrink == 0.0) {
        shrink = 1.0;                                  // w was reset to 0 with a = 1
    }
    if (blockIdx.x == 0) {
        for (int c = threadIdx.x; c < M; c += gpusvm::BLOCK) {
            dn[c] = 0.0;
        }
    }
    gpusvm::grid_stride_pairs(k, M, [&](const long long t, const int i, const int c) {
        const int r = rows[i];
        const double mi = m[t];
        if (!(mi < 1.0)) {
            coef[t] = 0.0;
            return;
        }
        const double s = weighted != 0 ? sw[static_cast<long long>(r) * M + c] : 1.0;
        const double y = static_cast<double>(Y[static_cast<long long>(r) * M + c]);
        const double slack = 1.0 - mi;
        const double g = squared != 0 ? 2.0 * s * slack : s;
        const double a = state[gpusvm::S_A * M + c] * shrink;
        coef[t] = (g * y) * (eta / (kk * a));
        atomicAdd(&acc[c], 1.0);
        atomicAdd(&acc[M + c], squared != 0 ? s * slack * slack : s * slack);
        atomicAdd(&acc[2 * M + c], g * y);
    });
}
