// sdca_coef_multi.cu: the per-pair part of SDCA's step on the general path (M outputs, weights,
// either loss; GeneralPath.sdca_adapt_beta_m and sdca_apply_m), the coefficients of the
// gpusvm_accumulate_multi launch that follows, and the per-output sums the scalar kernels need:
//   mode 0 (Alg. 2's measure of rho): coef[i, c] = delta_ic y_ic; acc[0 M + c] += delta^2 ||x_r||^2;
//   mode 1 (the step): coef[i, c] = delta_ic y_ic (1 / (lam n a_c));
//     acc[1 M + c] += delta (hinge) or delta - delta (2 alpha_rc + delta) / (4 s_r) (squared; 0
//     for s_r = 0): n times the change of the dual's separable part;
//     acc[2 M + c] += |delta|; acc[3 M + c] += delta.
// Both modes zero dn[M] and dn2[M] for the accumulate launches that follow.
// grid: min(ceil(k M / BLOCK), max_blocks) blocks of BLOCK threads; thread t owns the pair
//   (i, c) = (t / M, t % M) and strides over the k M pairs (as margins_multi.cu).
// in: rows[k], k, M, Y[n x M] (T), delta[k x M], alpha[n x M], row_sq[n], sw[n x M] (when weighted),
//   state (a_c), lam, n, squared, mode; out: coef[k x M], dn[M], dn2[M] (zeroed); in/out:
//   acc[4 M] (zeroed by gpusvm_sdca_rho_multi and gpusvm_sdca_finish_multi).
// traffic: per pair 8 B delta + 8 B coef + sizeof(T) B Y (+ 8 B alpha and weight in mode 1,
//   squared; 8 B row norm in mode 0); one to three double atomics per pair on M addresses each.
// determinism: coef is elementwise (bitwise that of the reference); acc is summed by atomics in
//   any order -> repeatable up to rounding.
#include "common.cuh"

namespace gpusvm {
enum SdcaMultiAcc : int {               // slots of the general path's SDCA accumulators (x M)
    MACC_DEN = 0,                        // sum delta^2 ||x||^2 (Alg. 2)
    MACC_GAIN = 1,                       // n times the change of the separable part of D
    MACC_ABS = 2,                        // sum |delta|
    MACC_SUM = 3,                        // sum delta
    N_MACC = 4,
};
}  // namespace gpusvm

template <typename T>
__global__ void __launch_bounds__(gpusvm::BLOCK, gpusvm::MIN_BLOCKS) gpusvm_sdca_coef_multi(
    const int* __restrict__ rows,          // the batch A_t, k
    const int k,                           // batch size
    const int M,                           // number of outputs
    const T* __restrict__ Y,               // labels in {-1, +1}, n x M
    const double* __restrict__ delta,      // steps, k x M
    const double* __restrict__ alpha,      // dual variables, n x M (before the step)
    const double* __restrict__ row_sq,     // ||x_r||^2, n
    const double* __restrict__ sw,         // sample weights, n x M (when weighted): s_ic
    const int weighted,                    // 1: sw holds the weights, 0: every s_i = 1
    const double* __restrict__ state,      // scalar state, N_SLOTS x M (a_c)
    const double lam,
    const double n,                        // rows of X
    const int squared,                     // 1: the squared hinge
    const int mode,                        // 0: rho's measure, 1: the step
    double* __restrict__ coef,             // out: coefficients, k x M
    double* __restrict__ acc,              // accumulators, N_MACC x M
    double* __restrict__ dn,               // out: zeroed, M
    double* __restrict__ dn2)              // out: zeroed, M
{
    if (blockIdx.x == 0) {
        for (int c = threadIdx.x; c < M; c += gpusvm::BLOCK) {
            dn[c] = 0.0;
            dn2[c] = 0.0;
        }
    }
    gpusvm::grid_stride_pairs(k, M, [&](const long long t, const int i, const int c) {
        const int r = rows[i];
        const double x = delta[t];
        const double y = static_cast<double>(Y[static_cast<long long>(r) * M + c]);
        if (mode == 0) {
            coef[t] = x * y;
            if (x != 0.0) {
                atomicAdd(&acc[gpusvm::MACC_DEN * M + c], x * x * row_sq[r]);
            }
            return;
        }
        const double a = state[gpusvm::S_A * M + c];
        coef[t] = x * y * (1.0 / (lam * n * a));
        if (x == 0.0) {
            return;
        }
        double gain = x;
        if (squared != 0) {
            const double s = weighted != 0 ? sw[static_cast<long long>(r) * M + c] : 1.0;
            const double al = alpha[static_cast<long long>(r) * M + c];
            gain = s > 0.0 ? x - x * (2.0 * al + x) / (4.0 * s) : x;
        }
        atomicAdd(&acc[gpusvm::MACC_GAIN * M + c], gain);
        atomicAdd(&acc[gpusvm::MACC_ABS * M + c], fabs(x));
        atomicAdd(&acc[gpusvm::MACC_SUM * M + c], x);
    });
}
