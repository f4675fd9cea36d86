// sdca_deltas_multi.cu: the coordinate steps delta[i, c] of mini-batch SDCA (Takáč et al. 2013,
// eq. 15) for M outputs, with example weights s_i and either loss (ALGORITHMS.md, "Weights, and the
// squared hinge"), beta_c = state[S_BETA * M + c]:
//   hinge:   clip to [-alpha, s - alpha] of lam n (1 - m) / (beta_c ||x_r||^2); a zero row s - alpha;
//   squared: max(-alpha, (2 s (1 - m) - alpha) / (1 + 2 s beta_c ||x_r||^2 / (lam n)))
//            (lam n (1 - m - alpha/(2 s)) / (lam n/(2 s) + beta ||x||^2) without dividing by s);
//   delta = 0 where has_first and first[i] == 0 (a repeated row of the batch).
// grid: min(ceil(k M / BLOCK), max_blocks) blocks of BLOCK threads; thread t owns the pair
//   (i, c) = (t / M, t % M) and strides over the k M pairs.
// in: rows[k], k, M, m[k x M], alpha[n x M], row_sq[n], sw[n x M] (read when weighted), first[k]
//   (int 0/1), state[N_SLOTS x M], lam n, squared; out: delta[k x M] (all double).
// traffic: ~40 B per pair, no access to X.
// determinism: elementwise, no atomics -> bitwise repeatable.
#include "common.cuh"

template <typename T>
__global__ void __launch_bounds__(gpusvm::BLOCK, gpusvm::MIN_BLOCKS) gpusvm_sdca_deltas_multi(
    const int* __restrict__ rows,          // the batch A_t, k
    const int k,                           // batch size
    const int M,                           // number of outputs
    const double* __restrict__ m,          // margins y_ic <w_c, x_i>, k x M
    const double* __restrict__ alpha,      // dual variables, n x M
    const double* __restrict__ row_sq,     // ||x_r||^2, n
    const double* __restrict__ sw,         // sample weights, n x M (when weighted): s_ic
    const int weighted,                    // 1: sw holds the weights, 0: every s_i = 1
    const int* __restrict__ first,         // first-occurrence mask, k (when has_first)
    const int has_first,                   // 1: first is read
    const double* __restrict__ state,      // scalar state, N_SLOTS x M (beta_c)
    const double lamn,                     // lam n
    const int squared,                     // 1: the squared hinge, 0: the hinge
    double* __restrict__ delta)            // output steps, k x M
{
    gpusvm::grid_stride_pairs(k, M, [&](const long long t, const int i, const int c) {
        if (has_first != 0 && first[i] == 0) {
            delta[t] = 0.0;
            return;
        }
        const int r = rows[i];
        const double s = weighted != 0 ? sw[static_cast<long long>(r) * M + c] : 1.0;
        const double q = row_sq[r];
        const double a = alpha[static_cast<long long>(r) * M + c];
        const double beta = state[gpusvm::S_BETA * M + c];
        const double mi = m[t];
        double x;
        if (squared != 0) {
            x = (2.0 * s * (1.0 - mi) - a) / (1.0 + 2.0 * s * beta * q / lamn);
            x = x > -a ? x : -a;
        } else if (q == 0.0) {
            x = s - a;                                         // a zero row: its optimum
        } else {
            const double raw = (lamn / beta) * (1.0 - mi) * (1.0 / q);
            x = raw > -a ? raw : -a;
            x = x < s - a ? x : s - a;
        }
        delta[t] = x;
    });
}
