// sdca_margins_balanced.cu: gpusvm_sdca_margins (margins and the steps of eq. 15 of Takáč et al.
// 2013 in one pass) with the work balanced by nonzeros, as margins_balanced.cu: the kernel of a
// captured SDCA segment, whose time follows the batch's nonzeros instead of its longest row.
//   m[g] = y_r (a <v, x_r> + b);  delta[g] = clip_[-alpha_r, 1 - alpha_r](lam n (1 - m[g]) /
//   (beta ||x_r||^2)) (sdca_delta; zero rows get 1 - alpha_r; 0 where first[g] == 0).
// grid: min(k, max_blocks) blocks of BLOCK threads over tiles of tile_rows batch positions; the
//   block's warps stride over the tile's 32-nonzero chunks (a fixed butterfly sum each), one
//   thread per row adds its chunks in row order (balanced.cuh's tile_row_dot, the gather of
//   margins_balanced.cu) and computes delta.
// sampling: as margins_balanced.cu, draw = 0 or 2 draws the batch here (rows[g], first[g] written
//   by the thread of row g, which then reads first[g] back; the last block advances counter[0]);
//   draw = -1 reads rows[] and first[] (i.i.d. batches: gpusvm_sample_next<1> and
//   gpusvm_sample_firsts_next before this launch).
// in: indptr[n+1] (int64), indices[nnz], data[nnz] (T), y[n] (T), v[d] (T), rows[k] (draw < 0),
//   k, tile_rows, state (a, b, beta), alpha[n], row_sq[n] (double), first[k] (int, read when
//   has_first and draw < 0), lam, n, draw, seed, n_rows, half, mask; in/out (draw >= 0):
//   counter[1], ticket[1] (zero on entry and exit); out: m[k], delta[k] (double), rows[k] and
//   first[k] (draw >= 0).
// traffic: per row 4 B rows + 16 B indptr + 4 B y + 8 B alpha + 8 B row_sq (+ 4 B first) + 16 B
//   written; per nonzero 4 + sizeof(T) B streamed plus one random gather of v.  Shared memory
//   about 20 KB.
// determinism: no atomics, a fixed order per row -> bitwise repeatable; agrees with
//   gpusvm_sdca_margins up to rounding.
#include "sdca_common.cuh"
#include "balanced.cuh"

template <typename T>
__global__ void __launch_bounds__(gpusvm::BLOCK, gpusvm::MIN_BLOCKS) gpusvm_sdca_margins_balanced(
    const long long* __restrict__ indptr,  // CSR row pointers, n + 1
    const int* __restrict__ indices,       // CSR column indices, nnz
    const T* __restrict__ data,            // CSR values, nnz
    const T* __restrict__ y,               // labels in {-1, +1}, n
    const T* __restrict__ v,               // w = a v, d
    int* rows,                             // the batch A_t, k: read (draw < 0) or written
    const int k,                           // batch size
    const int tile_rows,                   // batch positions per tile, 1 .. BLOCK
    const double* __restrict__ state,      // scalar state (a, b, beta)
    const double* __restrict__ alpha,      // dual variables, n
    const double* __restrict__ row_sq,     // squared row norms, n
    int* first,                            // 1 at a row's first occurrence in the batch, k
    const int has_first,                   // 0: every row steps
    const double lam,                      // regularisation lambda
    const double n,                        // number of examples
    double* __restrict__ m,                // output margins, k
    double* __restrict__ delta,            // output coordinate steps, k
    const int draw,                        // -1: read rows; 0 or 2: draw them (sampling mode code)
    const unsigned long long seed,         // 64-bit seed of the stream (draw >= 0)
    const int n_rows,                      // rows of X (draw >= 0)
    const int half,                        // Feistel half width (bits)
    const unsigned int mask,               // 2^half - 1
    long long* __restrict__ counter,       // in: batch index t; out: t + 1 (draw >= 0)
    unsigned int* __restrict__ ticket)     // last-block ticket (draw >= 0)
{
    const double a = state[gpusvm::S_A];
    const double b = state[gpusvm::S_B];
    const double c = lam * n / state[gpusvm::S_BETA];               // lam n / beta
    const gpusvm::SegmentBatch batch(draw, seed, n_rows, k, half, mask, counter, rows, first);
    gpusvm::tile_rows_dot(indptr, indices, data, v, [&](const int g) { return batch.at(g); }, k,
                          tile_rows, [&](const int g, const int r, const double dot) {
        const double mg = static_cast<double>(y[r]) * (a * dot + b);
        m[g] = mg;
        delta[g] = (has_first && first[g] == 0) ? 0.0
                                                : gpusvm::sdca_delta(alpha[r], c, mg, row_sq[r]);
    });
    batch.finish(ticket);
}
