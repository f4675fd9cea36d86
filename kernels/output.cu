// output.cu: the dense float64 w and the bias b of the last iterate or of the average
// (NumpyBackend.output):
//   averaged and N > 0:  w = (A v - u) / N,  b = (sum of biases) / N
//   otherwise:           w = a v,            b = b
// grid: grid-stride over d with BLOCK threads per block; thread 0 of block 0 writes b.
// in: v[d] (T), u[d] (double, read only when averaged), averaged, d, state; out: w[d], b[1] (double).
// traffic: (sizeof(T) + 8) d B, plus 8 d B more for the average.
// determinism: elementwise, no atomics -> bitwise repeatable.
#include "common.cuh"

template <typename T>
__global__ void __launch_bounds__(gpusvm::BLOCK, gpusvm::MIN_BLOCKS) gpusvm_output(
    const T* __restrict__ v,               // w = a v, d
    const double* __restrict__ u,          // averaging vector, d
    const int averaged,                    // 1: output the average (when one exists)
    const long long d,                     // length of v
    const double* __restrict__ state,      // scalar state
    double* __restrict__ w,                // output weights, d
    double* __restrict__ b)                // output bias, 1
{
    const double navg = state[gpusvm::S_NAVG];
    const bool avg = averaged != 0 && navg > 0.0;
    const double scale = avg ? state[gpusvm::S_ASUM] : state[gpusvm::S_A];
    gpusvm::grid_stride(d, [&](const long long j) {
        const double vj = static_cast<double>(v[j]);
        w[j] = avg ? (scale * vj - u[j]) / navg : scale * vj;
    });
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        b[0] = avg ? state[gpusvm::S_BSUM] / navg : state[gpusvm::S_B];
    }
}
