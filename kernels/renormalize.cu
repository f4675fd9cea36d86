// renormalize.cu: fold the scale a of w = a v back into v when |a| < threshold, on the device
// (NumpyBackend.renormalize):
//   u -= A v (when u exists, with the old v);  v *= (T) a;  ||v||^2 *= a^2;  A = 0;  a = 1
// so that the running sum of iterates S = A v - u moves into u alone and A v never grows apart
// from S.  Launched after every step so that an iteration never asks the host; when
// |a| >= threshold (the common case) every thread reads one double and exits.
// grid: grid-stride over d with BLOCK threads per block; every thread reads a and A before its
//   block takes a ticket, and the block that finishes last (ticket) updates the scalars on one
//   thread.
// in: d, u_on, threshold; in/out: v[d] (T), u[d] (double), state (double[N_SLOTS]),
//   ticket[1] (zero on entry and exit).
// traffic: 8 B per thread when nothing is done; 2 sizeof(T) d B (+ 16 d B with u) when folding.
// determinism: elementwise, the ticket only orders the scalar update -> bitwise repeatable.
#include "common.cuh"

template <typename T>
__global__ void __launch_bounds__(gpusvm::BLOCK, gpusvm::MIN_BLOCKS) gpusvm_renormalize(
    T* __restrict__ v,                     // w = a v, d (rescaled)
    double* __restrict__ u,                // averaging vector, d (updated when u_on)
    const int u_on,                        // 1 when u exists
    const long long d,                     // length of v
    double* __restrict__ state,            // scalar state (a, ||v||^2, A)
    unsigned int* __restrict__ ticket,     // last-block ticket
    const double threshold)                // renormalise when |a| < threshold
{
    const double a = state[gpusvm::S_A];
    if (!(fabs(a) < threshold)) {
        return;                            // uniform over the grid: no block takes a ticket
    }
    const double asum = state[gpusvm::S_ASUM];
    const T f = static_cast<T>(a);
    gpusvm::grid_stride(d, [&](const long long j) {
        const T vj = v[j];
        if (u_on) {
            u[j] -= asum * static_cast<double>(vj);
        }
        v[j] = vj * f;
    });
    if (gpusvm::last_block_done(ticket) && threadIdx.x == 0) {
        state[gpusvm::S_VSQ] *= a * a;
        state[gpusvm::S_ASUM] = 0.0;
        state[gpusvm::S_A] = 1.0;
        gpusvm::reset_ticket(ticket);
    }
}
