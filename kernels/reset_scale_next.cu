// reset_scale_next.cu: gpusvm_reset_scale (reset_scale.cu) when, and only when, the iteration
// t = counter[0] (1-based) has a zero shrink 1 - eta_t lam (Pegasos' t = 1, a constant step with
// eta0 lam = 1): u -= A v (when u exists); v = 0; ||v||^2 = 0; a = 1.  Otherwise every thread
// reads the counter and exits: a captured segment launches it every iteration (only when the
// segment holds such a t).
// grid: grid-stride over d with BLOCK threads per block; thread 0 of block 0 writes the scalars.
// in: d, u_on, counter[1], schedule, lam, eta0, norma_p; in/out: v[d] (T), u[d] (double), state.
// traffic: 8 B per thread when nothing is done; (sizeof(T) + 16) d B with averaging, sizeof(T) d B
//   without, when resetting.
// determinism: elementwise, no atomics -> bitwise repeatable.
#include "common.cuh"
#include "schedule.cuh"
#include "reset_scale.cu"

template <typename T>
__global__ void __launch_bounds__(gpusvm::BLOCK, gpusvm::MIN_BLOCKS) gpusvm_reset_scale_next(
    T* __restrict__ v,                     // w = a v, d (zeroed)
    double* __restrict__ u,                // averaging vector, d (updated when u_on)
    const int u_on,                        // 1 when u exists
    const long long d,                     // length of v
    double* __restrict__ state,            // scalar state
    const long long* __restrict__ counter, // the 1-based iteration t
    const int schedule,                    // schedule.cuh
    const double lam,
    const double eta0,
    const double norma_p)
{
    if (!gpusvm::zero_shrink_at(counter, schedule, lam, eta0, norma_p)) {
        return;                                          // uniform over the grid
    }
    gpusvm::reset_w(v, u, u_on, d, state);
}
