// sdca_finish_multi.cu: the end of SDCA's step on the general path (GeneralPath.sdca_apply_m),
// after the step (and, with check, its undoing for rejected outputs) was added into V:
//   kept = ok_c ? delta_ic : 0 (ok_c as gpusvm_sdca_check_multi computes it; always 1 without
//   check);  alpha[r, c] += kept;
//   last block, per output: S_DNORM = dn_c; S_VSQ += dn_c + dn2_c; S_NREJ += !ok_c;
//   S_ASUMD += ok_c ? sum delta_c : 0; acc[MACC_GAIN, MACC_ABS, MACC_SUM] zeroed.
// grid: min(ceil(k M / BLOCK), max_blocks) blocks of BLOCK threads; thread t owns the pair
//   (i, c) = (t / M, t % M); the block that finishes last (ticket) updates the scalars, its
//   thread c striding over the outputs.
// in: rows[k], k, M, delta[k x M], dn[M], dn2[M], lam, n, eps, check; in/out: alpha[n x M],
//   state, acc[4 M], ticket[1] (zero on entry and exit).
// traffic: per pair 4 B rows + 8 B delta + one 8 B atomic on alpha (a repeated row of a batch has
//   delta = 0 by its first-occurrence mask); a few doubles per output in the last block.
// determinism: one nonzero addition per alpha entry, the scalars on one thread -> bitwise
//   repeatable given acc.
#include "common.cuh"
#include "sdca_check_multi.cu"

template <typename T>
__global__ void __launch_bounds__(gpusvm::BLOCK, gpusvm::MIN_BLOCKS) gpusvm_sdca_finish_multi(
    const int* __restrict__ rows,          // the batch A_t, k
    const int k,                           // batch size
    const int M,                           // number of outputs
    const double* __restrict__ delta,      // steps, k x M
    const double* __restrict__ dn,         // change of ||v_c||^2 by the step, M
    const double* __restrict__ dn2,        // change by the undoing of rejected outputs, M
    const double lam,
    const double n,                        // rows of X
    const double eps,                      // machine epsilon of V's type
    const int check,                       // 1: Alg. 2's acceptance test
    double* __restrict__ alpha,            // dual variables, n x M
    double* __restrict__ state,            // scalar state, N_SLOTS x M
    double* __restrict__ acc,              // accumulators, N_MACC x M
    unsigned int* __restrict__ ticket)     // last-block ticket
{
    gpusvm::grid_stride_pairs(k, M, [&](const long long t, const int i, const int c) {
        const double x = delta[t];
        if (x == 0.0 || (check != 0 && !gpusvm::sdca_multi_ok(acc, dn, state, M, c, lam, n, eps))) {
            return;
        }
        atomicAdd(&alpha[static_cast<long long>(rows[i]) * M + c], x);
    });
    if (gpusvm::last_block_done(ticket)) {
        for (int c = threadIdx.x; c < M; c += gpusvm::BLOCK) {
            const bool ok = check == 0 || gpusvm::sdca_multi_ok(acc, dn, state, M, c, lam, n, eps);
            const double d = gpusvm::load_coherent(&dn[c]);
            state[gpusvm::S_DNORM * M + c] = d;
            state[gpusvm::S_VSQ * M + c] += d + gpusvm::load_coherent(&dn2[c]);
            if (ok) {
                state[gpusvm::S_ASUMD * M + c] += acc[gpusvm::MACC_SUM * M + c];
            } else {
                state[gpusvm::S_NREJ * M + c] += 1.0;
            }
            acc[gpusvm::MACC_GAIN * M + c] = 0.0;
            acc[gpusvm::MACC_ABS * M + c] = 0.0;
            acc[gpusvm::MACC_SUM * M + c] = 0.0;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            gpusvm::reset_ticket(ticket);
        }
    }
}
