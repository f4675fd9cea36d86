// sdca_common.cuh: helpers shared by the mini-batch SDCA kernels (sdca_*.cu; Takáč, Bijral,
// Richtárik & Srebro 2013); the loader inlines this file into the module text.
// - the clipped closed-form coordinate step of eq. (15), with the zero-row rule of
//   NumpyBackend.sdca_deltas (a row with ||x_i|| = 0 steps to alpha_i = 1);
// - Alg. 2's test "the dual would drop" with its rounding margin tau (NumpyBackend.sdca_apply);
// - the slots of the SDCA accumulator vector acc (double[N_ACC]): every slot is zero between
//   launches except ACC_REJECT, which carries the decision of sdca_apply's step launch to its
//   settle launch (and is zeroed there).
#ifndef GPUSVM_SDCA_COMMON_CUH
#define GPUSVM_SDCA_COMMON_CUH

#include "common.cuh"

namespace gpusvm {

enum SdcaAcc : int {
    ACC_NORM = 0,     // exact change of a squared norm (||v||^2, or ||u||^2 of the scratch vector)
    ACC_DSUM = 1,     // sum_i delta_i
    ACC_DABS = 2,     // sum_i |delta_i|
    ACC_DEN = 3,      // sum_i delta_i^2 ||x_i||^2 (Alg. 2's denominator of rho)
    ACC_REJECT = 4,   // 1 when the checked step was rejected (step launch -> settle launch)
    N_ACC = 5,
};

// machine epsilon of double (np.finfo(np.float64).eps) and of the value type T of v
constexpr double EPS64 = 0x1p-52;
template <typename T>
__device__ __forceinline__ double eps_of() {
    return sizeof(T) == 4 ? 0x1p-23 : 0x1p-52;
}

// Eq. (15): clip_[-alpha_i, 1 - alpha_i](c (1 - m_i) / ||x_i||^2) with c = lam n / beta, in the
// operation order of NumpyBackend.sdca_deltas; a zero row (q_i = 0) gets 1 - alpha_i.
__device__ __forceinline__ double sdca_delta(const double alpha_i, const double c, const double m_i,
                                             const double q_i) {
    const double hi = 1.0 - alpha_i;
    if (q_i == 0.0) {
        return hi;                                          // the limit ||x_i|| -> 0
    }
    const double raw = c * (1.0 - m_i) * (1.0 / q_i);
    const double lo = -alpha_i;
    const double x = raw > lo ? raw : lo;
    return x < hi ? x : hi;
}

// Alg. 2's test: Delta D = dsum / n - (lam / 2) a^2 dn < -tau, with
// tau = 4 (eps lam a^2 vsq + eps_64 dabs / n) the rounding of Delta D (NumpyBackend.sdca_apply).
__device__ __forceinline__ bool dual_drops(const double dsum, const double dabs, const double dn,
                                           const double vsq, const double a, const double lam,
                                           const double n, const double eps) {
    return dsum / n - 0.5 * lam * a * a * dn < -4.0 * (eps * lam * a * a * vsq + EPS64 * dabs / n);
}

// Zero a double that other threads of the grid may zero at the same time (an atomic store).
__device__ __forceinline__ void zero_shared_double(double* p) {
    atomicExch(reinterpret_cast<unsigned long long*>(p), 0ull);
}

}  // namespace gpusvm

#endif  // GPUSVM_SDCA_COMMON_CUH
