// sdca_margins.cu: the first kernel of a captured mini-batch SDCA segment (Takac et al. 2013):
// the margins m[i, c] = Y[r, c] (a_c <V[:, c], x_r> + b_c) of the batch rows r = rows[i] and, in
// the same pass, the coordinate steps of eq. (15) with beta_c = state[S_BETA]:
//   delta[i, c] = outputs.cuh's sdca_step<SQ>(alpha_rc, s_rc, lam n, beta_c, m_ic, ||x_r||^2)
// (0 where first[i] = 0: a repeated row of an i.i.d. batch steps once).
// grid: as margins.cu (M1 = 1: tiles balanced by nonzeros; M1 = 0: (row, output) pairs).
// sampling: as margins.cu (draw = 0 or 2 draws the batch and advances counter[0]).
// in: indptr, indices, data, Y[n x M], V[d x M], rows[k] (draw < 0), k, tile_rows, M, state,
//   alpha[n x M], row_sq[n], sw[n x M] (WT), first[k] (has_first, draw < 0), has_first, lamn,
//   draw, seed, n, half, mask; in/out: counter[1], ticket[1] (draw >= 0); out: m[k x M],
//   delta[k x M] (double), rows[k] and first[k] (draw >= 0).
// traffic: margins.cu's, plus per pair 8 B alpha + 8 B delta (+ 8 B s with weights) and per row
//   8 B row_sq (+ 4 B first).
// determinism: no atomics, a fixed order per row -> bitwise repeatable.
#include "common.cuh"
#include "outputs.cuh"

template <typename T, int M1, int SQ, int WT, typename I = int>
__global__ void __launch_bounds__(gpusvm::BLOCK, gpusvm::MIN_BLOCKS) gpusvm_sdca_margins(
    const long long* __restrict__ indptr,  // CSR row pointers, n + 1
    const I* __restrict__ indices,         // CSR column indices, nnz (int or long long)
    const T* __restrict__ data,            // CSR values, nnz
    const T* __restrict__ Y,               // labels in {-1, +1}, n x M
    const T* __restrict__ V,               // W = V diag(a), d x M, row-major
    int* rows,                             // the batch A_t, k: read (draw < 0) or written
    const int k,                           // batch size
    const int tile_rows,                   // batch positions per tile (M1), 1 .. BLOCK
    const int outputs,                     // M, the number of outputs (1 when M1)
    const double* __restrict__ state,      // scalar state, N_SLOTS x M (a, b, beta)
    const double* __restrict__ alpha,      // dual variables, n x M
    const double* __restrict__ row_sq,     // squared row norms, n
    const double* __restrict__ sw,         // example weights, n x M (WT)
    int* first,                            // 1 at a row's first occurrence in the batch, k
    const int has_first,                   // 0: every row steps
    const double lamn,                     // lam n
    double* __restrict__ m,                // output margins, k x M
    double* __restrict__ delta,            // output coordinate steps, k x M
    const int draw,                        // -1: read rows; 0 or 2: draw them (sampling mode code)
    const unsigned long long seed,         // 64-bit seed of the stream (draw >= 0)
    const int n,                           // rows of X (draw >= 0)
    const int half,                        // Feistel half width (bits)
    const unsigned int mask,               // 2^half - 1
    long long* __restrict__ counter,       // in: batch index t; out: t + 1 (draw >= 0)
    unsigned int* __restrict__ ticket)     // last-block ticket (draw >= 0)
{
    const int M = M1 != 0 ? 1 : outputs;               // a constant 1 in the M1 instances
    const gpusvm::SegmentBatch batch(draw, seed, n, k, half, mask, counter, rows, first);
    const double a0 = M1 != 0 ? state[gpusvm::S_A] : 0.0;                // M1: the scalars read once
    const double b0 = M1 != 0 ? state[gpusvm::S_B] : 0.0;
    const double beta0 = M1 != 0 ? state[gpusvm::S_BETA] : 0.0;
    gpusvm::batch_dots<M1, 1>(indptr, indices, data, V, M, batch, k, tile_rows,
                           [&](int, const int c, const long long t, const int r, const int fl,
                               const double dot) {
        const double a = M1 != 0 ? a0 : state[gpusvm::S_A * M + c];
        const double b = M1 != 0 ? b0 : state[gpusvm::S_B * M + c];
        const double mt = static_cast<double>(Y[static_cast<long long>(r) * M + c]) * (a * dot + b);
        m[t] = mt;
        delta[t] = (has_first && fl == 0)
            ? 0.0
            : gpusvm::sdca_step<SQ>(alpha[static_cast<long long>(r) * M + c],
                                    gpusvm::weight_of<WT>(sw, r, M, c), lamn,
                                    M1 != 0 ? beta0 : state[gpusvm::S_BETA * M + c], mt,
                                    row_sq[r]);
    });
    batch.finish(ticket);
}
