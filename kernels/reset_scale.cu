// reset_scale.cu: Pegasos' w <- 0 where the step's shrink 1 - eta_t lam is exactly 0 (t = 1 of
// the Pegasos schedule), for the iteration t = counter[0] of a captured segment (the kernel that
// drew the batch advanced it): U -= V diag(A) (the running sums stay those of the averaged
// iterates), V = 0, ||v_c||^2 = 0, a_c = 1; a launch at any other t returns at once.
// grid: grid-stride over the d M entries of V with BLOCK threads per block; block 0 resets the
//   M scales.
// in: d, M, counter[1], schedule, lam, eta0, norma_p; in/out: V[d x M] (T), U[d x M] (double,
//   when u_on), state[N_SLOTS x M].
// traffic: 8 B of counter per thread; when resetting sizeof(T) B per entry written (+ 16 B read
//   and written of U).
// determinism: elementwise -> bitwise repeatable.
#include "common.cuh"
#include "schedule.cuh"

template <typename T>
__global__ void __launch_bounds__(gpusvm::BLOCK, gpusvm::MIN_BLOCKS) gpusvm_reset_scale(
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
    gpusvm::grid_stride(d * M, [&](const long long e) {
        if (u_on) {
            U[e] -= state[gpusvm::S_ASUM * M + e % M] * static_cast<double>(V[e]);
        }
        V[e] = static_cast<T>(0);
    });
    if (blockIdx.x == 0) {
        for (int c = threadIdx.x; c < M; c += gpusvm::BLOCK) {
            state[gpusvm::S_VSQ * M + c] = 0.0;
            state[gpusvm::S_A * M + c] = 1.0;
        }
    }
}
