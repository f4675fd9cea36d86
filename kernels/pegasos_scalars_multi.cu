// pegasos_scalars_multi.cu: the scalar part of Pegasos Fig. 1 steps 3-5 on the general path, per
// output c, for the iteration t = counter[0] of a captured segment (after gpusvm_pegasos_coef_multi
// and gpusvm_accumulate_multi; GeneralPath.pegasos_step_m):
//   a'_c = a_c shrink_t (shrink 1 when it is 0: the reset set a_c = 1),
//   S_DNORM = dn_c, S_VSQ += dn_c, S_A = a'_c, S_NACT, S_LOSS from acc,
//   unreg: S_YACT = acc, b_c += eta_t S_YACT / k;  radius: a'_c scaled so ||w_c|| <= radius;
//   averaged and t >= t_avg: S_ASUM += a'_c, S_NAVG += 1, S_BSUM += b_c;
// then zeroes acc for the next iteration, and folds a'_c into column c of V for each output with
// |a'_c| < threshold (renormalize_multi.cu, GeneralPath.renormalize_m: U[:, c] -= A_c V[:, c],
// V[:, c] *= a'_c, ||v_c||^2 *= a'_c^2, A_c = 0, a_c = 1), so an iteration needs no
// renormalize launch.
// grid: ONE block of BLOCK threads; thread c strides over the M outputs (one column of the
//   state each, no sharing); when a scale is below the threshold (rare: |a| shrinks like 1/t),
//   the block strides over the d M entries of V after a barrier, and thread c settles output c
//   after another.
// in: counter[1], M, kk, schedule, lam, eta0, norma_p, unreg, radius, averaged, t_avg, dn[M];
//   in/out: state[N_SLOTS x M], acc[3 M] (zero on exit).
// traffic: about 15 doubles per output; one launch of one block; when folding, 2 sizeof(T) B per
//   entry of a folded column (+ 16 B with U).
// determinism: per output sequential arithmetic, no atomics -> bitwise repeatable.
#include "common.cuh"
#include "schedule.cuh"
#include "renormalize_multi.cu"

template <typename T>
__global__ void __launch_bounds__(gpusvm::BLOCK, gpusvm::MIN_BLOCKS) gpusvm_pegasos_scalars_multi(
    const long long* __restrict__ counter, // the 1-based iteration t
    const int M,                           // number of outputs
    const double kk,                       // the k of eta_t / k
    const int schedule,                    // schedule.cuh
    const double lam,
    const double eta0,
    const double norma_p,
    const int unreg,                       // 1: unregularised bias step
    const double radius,                   // projection radius, 0 = none
    const int averaged,                    // 1: iterates from t_avg on enter the average
    const long long t_avg,                 // first averaged iteration
    const double* __restrict__ dn,         // exact changes of ||v_c||^2 of the step, M
    double* __restrict__ state,            // scalar state, N_SLOTS x M
    double* __restrict__ acc,              // {nact, loss, yact} x M, zeroed here
    T* __restrict__ V,                     // W = V diag(a), d x M (rescaled columns when folding)
    double* __restrict__ U,                // averaging sums, d x M (updated when u_on)
    const int u_on,                        // 1 when U exists
    const long long d,                     // rows of V
    const double threshold)                // fold output c when |a_c| < threshold
{
    const long long t = gpusvm::load_coherent_ll(counter);
    double eta = 0.0;
    double shrink = 0.0;
    gpusvm::step_size(schedule, t, lam, eta0, norma_p, &eta, &shrink);
    if (shrink == 0.0) {
        shrink = 1.0;
    }
#pragma unroll 1
    for (int c = threadIdx.x; c < M; c += gpusvm::BLOCK) {
        const double a = state[gpusvm::S_A * M + c] * shrink;
        const double d = gpusvm::load_coherent(&dn[c]);
        state[gpusvm::S_DNORM * M + c] = d;
        const double vsq = state[gpusvm::S_VSQ * M + c] + d;
        state[gpusvm::S_VSQ * M + c] = vsq;
        state[gpusvm::S_NACT * M + c] = acc[c];
        state[gpusvm::S_LOSS * M + c] = acc[M + c];
        double b = state[gpusvm::S_B * M + c];
        if (unreg != 0) {
            const double yact = acc[2 * M + c];
            state[gpusvm::S_YACT * M + c] = yact;
            b += eta * yact / kk;
            state[gpusvm::S_B * M + c] = b;
        }
        double anew = a;
        if (radius > 0.0) {
            const double wsq = a * a * vsq;
            if (wsq > radius * radius) {
                anew = a * (radius / sqrt(wsq));
            }
        }
        state[gpusvm::S_A * M + c] = anew;
        if (averaged != 0 && t >= t_avg) {
            state[gpusvm::S_ASUM * M + c] += anew;
            state[gpusvm::S_NAVG * M + c] += 1.0;
            state[gpusvm::S_BSUM * M + c] += b;
        }
        acc[c] = 0.0;
        acc[M + c] = 0.0;
        acc[2 * M + c] = 0.0;
    }
    __shared__ int fold;
    __syncthreads();                                     // every a'_c written
    if (threadIdx.x == 0) {
        int any = 0;
        for (int c = 0; c < M; ++c) {
            any = any || fabs(state[gpusvm::S_A * M + c]) < threshold;
        }
        fold = any;
    }
    __syncthreads();
    if (!fold) {
        return;                                          // block-uniform
    }
    for (long long e = threadIdx.x; e < d * M; e += gpusvm::BLOCK) {
        gpusvm::fold_scale_entry(V, U, u_on, state, M, e, threshold);
    }
    __syncthreads();                                     // the entries read a_c and A_c
#pragma unroll 1
    for (int c = threadIdx.x; c < M; c += gpusvm::BLOCK) {
        gpusvm::fold_scale_settle(state, M, c, threshold);
    }
}
