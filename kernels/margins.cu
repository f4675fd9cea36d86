// margins.cu: Pegasos Fig. 1 step 2 of a captured segment: m[i, c] = Y[r, c] (a_c <V[:, c], x_r> + b_c)
// for the batch rows r = rows[i] and every output c.
// grid: M1 = 1 (one output): min(k, max_blocks) blocks of BLOCK threads over tiles of tile_rows
//   batch positions, balanced by nonzeros (balanced.cuh's tile_row_dot: the rows' chunks of 32
//   nonzeros scanned in shared memory, one chunk per warp at a time, one thread per row adding its
//   chunks in row order); M1 = 0: min(ceil(k M / BLOCK), max_blocks) blocks, one thread per
//   (row, output) pair (outputs.cuh).
// sampling: with draw = 0 or 2 (without replacement, epochs) the kernel draws the batch itself
//   (segment_batch.cuh: the row of position i from (seed, t = counter[0]), written to rows[i] and
//   first[i]; the last block advances counter[0] to t + 1); draw = -1 reads rows[].
// in: indptr[n+1] (int64), indices[nnz], data[nnz] (T), Y[n x M] (T), V[d x M] (T), rows[k]
//   (draw < 0), k, tile_rows, M, state (a_c, b_c), draw, seed, n, half, mask; in/out (draw >= 0):
//   counter[1], ticket[1] (zero on entry and exit); out: m[k x M] (double), rows[k] and first[k]
//   (draw >= 0).  Products and sums in double.
// traffic: per row 4 B rows (read, or written with 4 B first after a Feistel walk) + 16 B indptr;
//   per nonzero 4 + sizeof(T) B (shared by a row's M threads) plus M sizeof(T) B of V (one 32 B
//   sector per random gather; V stays in L2 when it fits); per pair sizeof(T) B of Y and 8 B of m.
//   Shared memory (M1): BLOCK x 16 B + CHUNK_WINDOW x 8 B (about 20 KB).
// determinism: no atomics, a fixed order per row -> bitwise repeatable.
#include "common.cuh"
#include "outputs.cuh"

template <typename T, int M1, typename I = int>
__global__ void __launch_bounds__(gpusvm::BLOCK, gpusvm::MIN_BLOCKS) gpusvm_margins(
    const long long* __restrict__ indptr,  // CSR row pointers, n + 1
    const I* __restrict__ indices,         // CSR column indices, nnz (int or long long)
    const T* __restrict__ data,            // CSR values, nnz
    const T* __restrict__ Y,               // labels in {-1, +1}, n x M
    const T* __restrict__ V,               // W = V diag(a), d x M, row-major
    int* rows,                             // the batch A_t, k: read (draw < 0) or written
    const int k,                           // batch size
    const int tile_rows,                   // batch positions per tile (M1), 1 .. BLOCK
    const int outputs,                     // M, the number of outputs (1 when M1)
    const double* __restrict__ state,      // scalar state, N_SLOTS x M
    double* __restrict__ m,                // output margins, k x M
    const int draw,                        // -1: read rows; 0 or 2: draw them (sampling mode code)
    const unsigned long long seed,         // 64-bit seed of the stream (draw >= 0)
    const int n,                           // rows of X (draw >= 0)
    const int half,                        // Feistel half width (bits)
    const unsigned int mask,               // 2^half - 1
    long long* __restrict__ counter,       // in: batch index t; out: t + 1 (draw >= 0)
    unsigned int* __restrict__ ticket,     // last-block ticket (draw >= 0)
    int* first)                            // out (draw >= 0): first-occurrence mask, k
{
    const int M = M1 != 0 ? 1 : outputs;               // a constant 1 in the M1 instances
    const gpusvm::SegmentBatch batch(draw, seed, n, k, half, mask, counter, rows, first);
    const double a0 = M1 != 0 ? state[gpusvm::S_A] : 0.0;                // M1: the scalars read once
    const double b0 = M1 != 0 ? state[gpusvm::S_B] : 0.0;
    gpusvm::batch_dots<M1, 0>(indptr, indices, data, V, M, batch, k, tile_rows,
                              [&](int, const int c, const long long t, const int r, int,
                                  const double dot) {
        const double a = M1 != 0 ? a0 : state[gpusvm::S_A * M + c];
        const double b = M1 != 0 ? b0 : state[gpusvm::S_B * M + c];
        m[t] = static_cast<double>(Y[static_cast<long long>(r) * M + c]) * (a * dot + b);
    });
    batch.finish(ticket);
}
