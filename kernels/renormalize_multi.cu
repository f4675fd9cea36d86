// renormalize_multi.cu: for each output c with |a_c| < threshold, fold the scale a_c of
// w_c = a_c v_c back into column c of V (d x M, row-major), as GeneralPath.renormalize_m:
//   U[:, c] -= A_c V[:, c] (when U exists, with the old V);  V[:, c] *= (T) a_c;
//   ||v_c||^2 *= a_c^2;  A_c = 0;  a_c = 1.
// Launched after every Pegasos step of the general path so that an iteration never asks the
// host; when no a_c is below the threshold (the common case) every thread reads the M scales
// and exits.
// grid: grid-stride over the d M entries with BLOCK threads per block, entry t = (j, c) =
//   (t / M, t % M); every thread reads the scales before its block takes a ticket, and the block
//   that finishes last (ticket) updates the scalars of the folded outputs on one thread.
// in: d, M, u_on, threshold; in/out: V[d x M] (T), U[d x M] (double), state (double[N_SLOTS x M],
//   slot-major), ticket[1] (zero on entry and exit).
// traffic: 8 M B per thread when nothing is done; 2 sizeof(T) B per entry of a folded column
//   (+ 16 B with U).
// determinism: elementwise, the ticket only orders the scalar update -> bitwise repeatable.
#include "common.cuh"

namespace gpusvm {

// Fold entry e = (j, c) of V when |a_c| < threshold (U[e] -= A_c V[e] first, when u_on): the
// entry loop of this kernel and of pegasos_scalars_multi.cu's fold.
template <typename T>
__device__ __forceinline__ void fold_scale_entry(T* __restrict__ V, double* __restrict__ U,
                                                 const int u_on, const double* state, const int M,
                                                 const long long e, const double threshold) {
    const int c = static_cast<int>(e % M);
    const double a = state[S_A * M + c];
    if (!(fabs(a) < threshold)) {
        return;
    }
    const T vj = V[e];
    if (u_on) {
        U[e] -= state[S_ASUM * M + c] * static_cast<double>(vj);
    }
    V[e] = vj * static_cast<T>(a);
}

// After every entry of a folded column: ||v_c||^2 *= a_c^2, A_c = 0, a_c = 1.
__device__ __forceinline__ void fold_scale_settle(double* state, const int M, const int c,
                                                  const double threshold) {
    const double a = state[S_A * M + c];
    if (fabs(a) < threshold) {
        state[S_VSQ * M + c] *= a * a;
        state[S_ASUM * M + c] = 0.0;
        state[S_A * M + c] = 1.0;
    }
}

}  // namespace gpusvm

template <typename T>
__global__ void __launch_bounds__(gpusvm::BLOCK, gpusvm::MIN_BLOCKS) gpusvm_renormalize_multi(
    T* __restrict__ V,                     // W = V diag(a), d x M (rescaled columns)
    double* __restrict__ U,                // averaging sums, d x M (updated when u_on)
    const int u_on,                        // 1 when U exists
    const long long d,                     // rows of V
    const int M,                           // number of outputs
    double* __restrict__ state,            // scalar state, N_SLOTS x M (a, ||v||^2, A)
    unsigned int* __restrict__ ticket,     // last-block ticket
    const double threshold)                // renormalise output c when |a_c| < threshold
{
    bool any = false;
    for (int c = 0; c < M; ++c) {
        any = any || fabs(state[gpusvm::S_A * M + c]) < threshold;
    }
    if (!any) {
        return;                            // uniform over the grid: no block takes a ticket
    }
    gpusvm::grid_stride(d * M, [&](const long long t) {
        gpusvm::fold_scale_entry(V, U, u_on, state, M, t, threshold);
    });
    if (gpusvm::last_block_done(ticket) && threadIdx.x == 0) {
        for (int c = 0; c < M; ++c) {
            gpusvm::fold_scale_settle(state, M, c, threshold);
        }
        gpusvm::reset_ticket(ticket);
    }
}
