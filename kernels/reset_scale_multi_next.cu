// reset_scale_multi_next.cu: gpusvm_reset_scale_next for M outputs (GeneralPath.reset_scale_m)
// when, and only when, the iteration t = counter[0] (1-based) has a zero shrink 1 - eta_t lam:
//   U[:, c] -= A_c V[:, c] (when U exists); V = 0; ||v_c||^2 = 0; a_c = 1.
// Otherwise every thread reads the counter and exits: a captured segment launches it every
// iteration (only when the segment holds such a t).
// grid: grid-stride over the d M entries with BLOCK threads per block (entry t = (j, c) =
//   (t / M, t % M)); threads c < M of block 0 write the scalars (no other thread reads them).
// in: d, M, u_on, counter[1], schedule, lam, eta0, norma_p; in/out: V[d x M] (T), U[d x M]
//   (double), state[N_SLOTS x M].
// traffic: 8 B per thread when nothing is done; (sizeof(T) + 16) d M B with averaging,
//   sizeof(T) d M B without, when resetting.
// determinism: elementwise, no atomics -> bitwise repeatable.
#include "common.cuh"
#include "schedule.cuh"

template <typename T>
__global__ void __launch_bounds__(gpusvm::BLOCK, gpusvm::MIN_BLOCKS) gpusvm_reset_scale_multi_next(
    T* __restrict__ V,                     // W = V diag(a), d x M (zeroed)
    double* __restrict__ U,                // averaging sums, d x M (updated when u_on)
    const int u_on,                        // 1 when U exists
    const long long d,                     // rows of V
    const int M,                           // number of outputs
    double* __restrict__ state,            // scalar state, N_SLOTS x M
    const long long* __restrict__ counter, // the 1-based iteration t
    const int schedule,                    // schedule.cuh
    const double lam,
    const double eta0,
    const double norma_p)
{
    if (!gpusvm::zero_shrink_at(counter, schedule, lam, eta0, norma_p)) {
        return;                                          // uniform over the grid
    }
    gpusvm::grid_stride(d * M, [&](const long long t) {
        if (u_on) {
            U[t] -= state[gpusvm::S_ASUM * M + t % M] * static_cast<double>(V[t]);
        }
        V[t] = static_cast<T>(0);
    });
    if (blockIdx.x == 0) {
        for (int c = threadIdx.x; c < M; c += gpusvm::BLOCK) {
            state[gpusvm::S_VSQ * M + c] = 0.0;
            state[gpusvm::S_A * M + c] = 1.0;
        }
    }
}
