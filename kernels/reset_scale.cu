// reset_scale.cu: w <- 0 keeping the running average consistent (NumpyBackend.reset_scale):
//   u -= A v (when u exists);  v = 0;  ||v||^2 = 0;  a = 1
// Used at t = 1 of the Pegasos schedule, where 1 - eta_t lam = 0.
// grid: grid-stride over d with BLOCK threads per block; thread 0 of block 0 writes the two scalars
//   (no other thread reads them in this kernel).
// in: d, u_on; in/out: v[d] (T), u[d] (double), state (double[N_SLOTS]).
// traffic: (sizeof(T) + 16) d B with averaging, sizeof(T) d B without.
// determinism: elementwise, no atomics -> bitwise repeatable.
#include "common.cuh"

namespace gpusvm {

// The reset itself, by the whole grid (gpusvm_reset_scale, and gpusvm_reset_scale_next at a zero
// shrink): u -= A v, v = 0 (grid-stride over d); thread 0 of block 0 sets ||v||^2 = 0 and a = 1.
template <typename T>
__device__ __forceinline__ void reset_w(T* __restrict__ v, double* __restrict__ u, const int u_on,
                                        const long long d, double* __restrict__ state) {
    const double asum = state[S_ASUM];
    grid_stride(d, [&](const long long j) {
        if (u_on) {
            u[j] -= asum * static_cast<double>(v[j]);
        }
        v[j] = static_cast<T>(0);
    });
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        state[S_VSQ] = 0.0;
        state[S_A] = 1.0;
    }
}

}  // namespace gpusvm

template <typename T>
__global__ void __launch_bounds__(gpusvm::BLOCK, gpusvm::MIN_BLOCKS) gpusvm_reset_scale(
    T* __restrict__ v,                     // w = a v, d (zeroed)
    double* __restrict__ u,                // averaging vector, d (updated when u_on)
    const int u_on,                        // 1 when u exists
    const long long d,                     // length of v
    double* __restrict__ state)            // scalar state
{
    gpusvm::reset_w(v, u, u_on, d, state);
}
