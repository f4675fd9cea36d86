// sdca_check_multi.cu: Alg. 2's acceptance test on the general path, per output c (the test of
// GeneralPath.sdca_apply_m), after the step was added into V (gpusvm_accumulate_multi: dn_c, the
// exact change of ||v_c||^2) with the sums of gpusvm_sdca_coef_multi (mode 1) in acc:
//   tau_c = 4 (eps lam a_c^2 ||v_c||^2 + eps64 sum|delta_c| / n),
//   ok_c = acc_gain_c / n - lam/2 a_c^2 dn_c >= -tau_c   (||v_c||^2: S_VSQ, not yet updated);
//   undo[i, c] = ok_c ? 0 : -coef[i, c]  (the coefficients that take a rejected output's step
//   back out of V, by one more gpusvm_accumulate_multi).  gpusvm_sdca_finish_multi recomputes ok_c
//   from the same values.
// grid: min(ceil(k M / BLOCK), max_blocks) blocks of BLOCK threads; thread t owns the pair
//   (i, c) = (t / M, t % M) and strides over the k M pairs.
// in: k, M, coef[k x M], acc[4 M], dn[M], state, lam, n, eps; out: undo[k x M].
// traffic: 16 B per pair plus 5 doubles per output read by every thread (cached).
// determinism: elementwise -> bitwise repeatable.
#include "common.cuh"
#include "sdca_coef_multi.cu"

namespace gpusvm {

// Whether output c's step keeps the dual from dropping (Alg. 2), from the sums of its step.
__device__ __forceinline__ bool sdca_multi_ok(const double* acc, const double* dn,
                                              const double* state, const int M, const int c,
                                              const double lam, const double n, const double eps) {
    const double a = state[S_A * M + c];
    const double aa = a * a;
    const double tau = 4.0 * (eps * lam * aa * state[S_VSQ * M + c]
                              + 2.220446049250313e-16 * load_coherent(&acc[MACC_ABS * M + c]) / n);
    return load_coherent(&acc[MACC_GAIN * M + c]) / n - 0.5 * lam * aa * load_coherent(&dn[c])
           >= -tau;
}

}  // namespace gpusvm

template <typename T>
__global__ void __launch_bounds__(gpusvm::BLOCK, gpusvm::MIN_BLOCKS) gpusvm_sdca_check_multi(
    const int k,                           // batch size
    const int M,                           // number of outputs
    const double* __restrict__ coef,       // coefficients of the step, k x M
    const double* __restrict__ acc,        // accumulators, N_MACC x M
    const double* __restrict__ dn,         // exact changes of ||v_c||^2 of the step, M
    const double* __restrict__ state,      // scalar state, N_SLOTS x M
    const double lam,
    const double n,                        // rows of X
    const double eps,                      // machine epsilon of V's type
    double* __restrict__ undo)             // out: coefficients undoing rejected outputs, k x M
{
    gpusvm::grid_stride_pairs(k, M, [&](const long long t, int, const int c) {
        undo[t] = gpusvm::sdca_multi_ok(acc, dn, state, M, c, lam, n, eps) ? 0.0 : -coef[t];
    });
}
