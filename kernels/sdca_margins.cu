// sdca_margins.cu: the margin pass of one mini-batch SDCA iteration with the dual step fused in
// (Takáč et al. 2013, eq. 15): for the sampled rows r = rows[g], g < k,
//   m[g] = y_r (a <v, x_r> + b)       (what gpusvm_margins computes, in the same order)
//   delta[g] = clip_[-alpha_r, 1 - alpha_r](lam n (1 - m[g]) / (beta ||x_r||^2)),
// beta = state[S_BETA]; a zero row (||x_r|| = 0) gets 1 - alpha_r; delta[g] = 0 where the
// first-occurrence mask is 0 (a row repeated in the batch steps once).  One launch instead of
// margins + sdca_deltas.
// grid: min(ceil(k / (BLOCK / LANES)), max_blocks) blocks of BLOCK threads; a group of LANES
//   consecutive lanes owns one row, strides over its nonzeros (coalesced reads of indices and
//   data) and sums with log2(LANES) xor shuffles; lane 0 then computes delta; groups stride over
//   the rows with a warp-uniform trip count.
// in: indptr[n+1] (int64), indices[nnz], data[nnz] (T), y[n] (T), v[d] (T), rows[k], k, state,
//   alpha[n] (double), row_sq[n] = ||x_i||^2 (double), first[k] (int 0/1, read when has_first),
//   lam, n; out: m[k], delta[k] (double).  Products and sums in double.
// traffic: per row 4 B rows + 16 B indptr + 4 B y + 8 B alpha + 8 B row_sq (+ 4 B first) + 16 B
//   written; per nonzero 4 + sizeof(T) B streamed plus one random gather of v.
// determinism: no atomics, fixed reduction order -> bitwise repeatable for a given LANES.
#include "sdca_common.cuh"

template <int LANES, typename T>
__global__ void __launch_bounds__(gpusvm::BLOCK, gpusvm::MIN_BLOCKS) gpusvm_sdca_margins(
    const long long* __restrict__ indptr,  // CSR row pointers, n + 1
    const int* __restrict__ indices,       // CSR column indices, nnz
    const T* __restrict__ data,            // CSR values, nnz
    const T* __restrict__ y,               // labels in {-1, +1}, n
    const T* __restrict__ v,               // w = a v, d
    const int* __restrict__ rows,          // the batch A_t (repeats allowed), k
    const int k,                           // batch size
    const double* __restrict__ state,      // scalar state (a, b, beta)
    const double* __restrict__ alpha,      // dual variables, n
    const double* __restrict__ row_sq,     // squared row norms, n
    const int* __restrict__ first,         // 1 at the first occurrence of a row in the batch, k
    const int has_first,                   // 0: every row steps (first is not read)
    const double lam,                      // regularisation lambda
    const double n,                        // number of examples
    double* __restrict__ m,                // output margins y_i <w, x_i>, k
    double* __restrict__ delta)            // output coordinate steps, k
{
    if (gpusvm::warp_past_end<LANES>(k)) {
        return;                                                      // whole warp past the end
    }
    const double a = state[gpusvm::S_A];
    const double b = state[gpusvm::S_B];
    const double c = lam * n / state[gpusvm::S_BETA];               // lam n / beta
    gpusvm::warp_rows<LANES>(k, [&](const int g, const int lane) {
        const int r = g < k ? rows[g] : 0;
        const double z = gpusvm::group_row_dot<LANES>(indptr, indices, data, v, r, g < k, lane);
        if (g < k && lane == 0) {
            const double mg = static_cast<double>(y[r]) * (a * z + b);
            m[g] = mg;
            delta[g] = (has_first && first[g] == 0) ? 0.0
                                                    : gpusvm::sdca_delta(alpha[r], c, mg, row_sq[r]);
        }
    });
}
