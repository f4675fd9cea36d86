// margins_multi.cu: m[i, c] = Y[r, c] (a_c <V[:, c], x_r> + b_c) for the batch rows r = rows[i] and
// every output c (Pegasos Fig. 1 step 2 and SDCA's margins for M outputs at once; ALGORITHMS.md,
// "Many outputs at once"). V is d x M row-major, the state is N_SLOTS x M (slot-major:
// state[S_A * M + c] is a_c).
// grid: min(ceil(k M / BLOCK), max_blocks) blocks of BLOCK threads; thread t owns the pair
//   (i, c) = (t / M, t % M) and strides over the k M pairs. The M threads of one row walk its
//   nonzeros in step: indices[p] and data[p] are one broadcast read for them, and V[j, c..] of
//   consecutive outputs one coalesced read, so one gather of the row serves all M margins.
// sampling: with draw = 0 or 2 (sampling modes without replacement, epochs) the kernel draws the
//   batch itself (segment_batch.cuh: each of a row's M threads computes its row from (seed,
//   t = counter[0]), the thread of output 0 writes rows[i] and first[i], and the last block
//   advances counter[0] to t + 1), so a segment's iteration needs no gpusvm_sample_next launch;
//   draw = -1 reads rows[].
// in: indptr[n+1] (int64), indices[nnz], data[nnz] (T), Y[n x M] (T), V[d x M] (T), rows[k]
//   (draw < 0), k, M, state[N_SLOTS x M], draw, seed, n, half, mask; in/out (draw >= 0):
//   counter[1], ticket[1] (zero on entry and exit); out: m[k x M] (double), rows[k] and first[k]
//   (draw >= 0).  Products and sums in double.
// traffic: per row, 4 B of rows (read, or written with 4 B of first; drawn, each of its M
//   threads walks the Feistel network), 4 + sizeof(T) B per nonzero (shared by the row's threads)
//   plus M sizeof(T) B of V per nonzero; 8 B of m per pair.
// determinism: each thread sums its row in CSR order, no atomics -> bitwise repeatable.
#include "common.cuh"
#include "segment_batch.cuh"

template <typename T>
__global__ void __launch_bounds__(gpusvm::BLOCK, gpusvm::MIN_BLOCKS) gpusvm_margins_multi(
    const long long* __restrict__ indptr,  // CSR row pointers, n + 1
    const int* __restrict__ indices,       // CSR column indices, nnz
    const T* __restrict__ data,            // CSR values, nnz
    const T* __restrict__ Y,               // labels in {-1, +1}, n x M
    const T* __restrict__ V,               // W = V diag(a), d x M, row-major
    int* rows,                             // the batch A_t, k: read (draw < 0) or written
    const int k,                           // batch size
    const int M,                           // number of outputs
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
    const gpusvm::SegmentBatch batch(draw, seed, n, k, half, mask, counter, rows, first);
    gpusvm::grid_stride_pairs(k, M, [&](const long long t, const int i, const int c) {
        const int r = batch.at(i, c == 0);
        const long long end = indptr[r + 1];
        double z = 0.0;
        for (long long p = indptr[r]; p < end; ++p) {
            z += static_cast<double>(data[p])
                 * static_cast<double>(V[static_cast<long long>(indices[p]) * M + c]);
        }
        const double a = state[gpusvm::S_A * M + c];
        const double b = state[gpusvm::S_B * M + c];
        m[t] = static_cast<double>(Y[static_cast<long long>(r) * M + c]) * (a * z + b);
    });
    batch.finish(ticket);
}
