// schedule.cuh: the step sizes of Pegasos Fig. 1 step 3 (and the Fig. 2 schedules) from the
// iteration t on the device, with the IEEE operations of gpusvm.backends.base.step_size (so the
// values are bitwise those of the host: no operation here can be contracted into an FMA).
// SCHEDULE 0: eta = 1 / (lam t), shrink = 1 - 1/t; 1 (NORMA): eta = p / (lam sqrt t),
// shrink = 1 - p / sqrt t; 2 (constant): eta = eta0, shrink = 1 - eta0 lam.  zero_shrink_at: the
// test of the captured segments' reset kernels (reset_scale_next.cu, reset_scale_multi_next.cu).
#ifndef GPUSVM_SCHEDULE_CUH
#define GPUSVM_SCHEDULE_CUH

#include "common.cuh"

namespace gpusvm {

__device__ __forceinline__ void step_size(const int schedule, const long long t, const double lam,
                                          const double eta0, const double p, double* eta,
                                          double* shrink) {
    const double td = static_cast<double>(t);
    if (schedule == 0) {
        *eta = 1.0 / (lam * td);
        *shrink = 1.0 - 1.0 / td;
    } else if (schedule == 1) {
        const double root = sqrt(td);
        *eta = p / (lam * root);
        *shrink = 1.0 - p / root;
    } else {
        *eta = eta0;
        *shrink = 1.0 - __dmul_rn(eta0, lam);   // as the host rounds it: no FMA
    }
}

// Whether the iteration t = counter[0] (1-based, written by an earlier launch of a captured
// segment) has a zero shrink 1 - eta_t lam, the iterations at which the reset kernels set w = 0.
__device__ __forceinline__ bool zero_shrink_at(const long long* counter, const int schedule,
                                               const double lam, const double eta0,
                                               const double p) {
    double eta = 0.0;
    double shrink = 0.0;
    step_size(schedule, load_coherent_ll(counter), lam, eta0, p, &eta, &shrink);
    return shrink == 0.0;
}

}  // namespace gpusvm

#endif  // GPUSVM_SCHEDULE_CUH
