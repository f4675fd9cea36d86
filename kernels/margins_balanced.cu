// margins_balanced.cu: m[g] = y_r (a <v, x_r> + b) for the sampled rows r = rows[g], g < k, as
// gpusvm_margins computes them, with the work balanced by nonzeros (balanced.cuh): the kernel of a
// captured Pegasos segment, whose time follows the batch's nonzeros instead of its longest row.
// grid: min(k, max_blocks) blocks of BLOCK threads; block b takes the tiles of tile_rows batch
//   positions b, b + gridDim.x, ...; per tile, balanced.cuh's tile_row_dot: one thread per row
//   loads indptr, the rows' chunks of 32 consecutive nonzeros are scanned in shared memory, the
//   block's warps stride over the tile's chunks (one chunk per warp at a time: coalesced reads, a
//   fixed butterfly sum), and one thread per row adds its chunks' sums in row order: the sum of a
//   row does not depend on where it sits in the batch, so equal rows get equal margins (the
//   optimal bias's ties), and a long row is spread over every warp of its block.
// sampling: with draw = 0 or 2 (sampling modes without replacement, epochs) the kernel draws the
//   batch itself (segment_batch.cuh's SegmentBatch: the thread of a tile row computes its row from
//   (seed, t = counter[0]), writes rows[g] and first[g], and the last block advances counter[0] to
//   t + 1), so a segment's iteration needs no gpusvm_sample_next launch; draw = -1 reads rows[].
// in: indptr[n+1] (int64), indices[nnz], data[nnz] (T), y[n] (T), v[d] (T), rows[k] (draw < 0),
//   k, tile_rows, state (a, b), draw, seed, n, half, mask; in/out (draw >= 0): counter[1],
//   ticket[1] (zero on entry and exit); out: m[k] (double), rows[k] and first[k] (draw >= 0).
//   Products and sums in double.
// traffic: per row 4 B rows (read, or written with 4 B first and a Feistel walk of some 30-60
//   integer operations) + 16 B indptr + 4 B y + 8 B m; per nonzero 4 + sizeof(T) B streamed
//   plus one random gather of v (a 32 B sector; v stays in L2 when it fits).  Shared memory:
//   BLOCK x 16 B + CHUNK_WINDOW x 8 B (about 20 KB).
// determinism: no atomics, a fixed order per row (butterfly within a chunk, chunks in row order)
//   -> bitwise repeatable; agrees with gpusvm_margins up to rounding.
#include "common.cuh"
#include "balanced.cuh"

template <typename T>
__global__ void __launch_bounds__(gpusvm::BLOCK, gpusvm::MIN_BLOCKS) gpusvm_margins_balanced(
    const long long* __restrict__ indptr,  // CSR row pointers, n + 1
    const int* __restrict__ indices,       // CSR column indices, nnz
    const T* __restrict__ data,            // CSR values, nnz
    const T* __restrict__ y,               // labels in {-1, +1}, n
    const T* __restrict__ v,               // w = a v, d
    int* rows,                             // the batch A_t, k: read (draw < 0) or written
    const int k,                           // batch size
    const int tile_rows,                   // batch positions per tile, 1 .. BLOCK
    const double* __restrict__ state,      // scalar state (a, b)
    double* __restrict__ m,                // output margins, k
    const int draw,                        // -1: read rows; 0 or 2: draw them (sampling mode code)
    const unsigned long long seed,         // 64-bit seed of the stream (draw >= 0)
    const int n,                           // rows of X (draw >= 0)
    const int half,                        // Feistel half width (bits)
    const unsigned int mask,               // 2^half - 1
    long long* __restrict__ counter,       // in: batch index t; out: t + 1 (draw >= 0)
    unsigned int* __restrict__ ticket,     // last-block ticket (draw >= 0)
    int* first)                            // out (draw >= 0): first-occurrence mask, k
{
    const double a = state[gpusvm::S_A];
    const double b = state[gpusvm::S_B];
    const gpusvm::SegmentBatch batch(draw, seed, n, k, half, mask, counter, rows, first);
    gpusvm::tile_rows_dot(indptr, indices, data, v, [&](const int g) { return batch.at(g); }, k,
                          tile_rows, [&](const int g, const int r, const double dot) {
        m[g] = static_cast<double>(y[r]) * (a * dot + b);
    });
    batch.finish(ticket);
}
