// sample_next.cu: draw the rows of A_t on the device, from (seed, t, j) alone, for the 0-based
// batch t = counter[0] held in device memory, so that a captured segment replays the same launch
// for every iteration (gpusvm/solvers/_sampling.py; the functions are in sampler.cuh).  MODE 0:
// without replacement, rows[j] = pi_{key(seed, t)}(j); MODE 1: with replacement,
// rows[j] = uniform_row(key(seed, t), j), and stamp[r] = max over the batch's occurrences of r of
// ((t + 1) << 32 | ~j) (the first occurrence wins; sample_firsts_next.cu reads it back); MODE 2:
// epochs, position p = t k + j, rows[j] = pi_{key(seed, p div n)}(p mod n), and first[j] = 0 for a
// row of the next epoch that repeats one of this batch's tail of the previous epoch
// (pi_e^{-1}(row) >= q0), else 1.  When `bump` is set the block that finishes last (ticket)
// advances counter[0] to t + 1 (the 1-based iteration the rest of the iteration reads); i.i.d.
// batches leave the bump to gpusvm_sample_firsts_next, which reads the same t.
// grid: grid-stride over j < k with BLOCK threads per block; each thread derives the keys it needs
//   (a few 64-bit multiplications) and writes its own entries; every thread reads counter[0]
//   before its block takes a ticket, hence before the last block writes it.
// in: seed, n, k, half, mask, bump; in/out: counter[1] (long long), ticket[1] (zero on entry and
//   exit); out: rows[k], first[k] (MODE 2), stamp[n] (MODE 1, unsigned long long, atomicMax).
// traffic: 4 B (rows) per j, + 4 B (first, MODE 2) or one 8 B atomic (MODE 1); about 20-40 integer
//   multiplications per j (fewer than 4 Feistel walks on average); 8 B of counter per thread (one
//   L2 line) and one ticket atomic per block.
// determinism: the rows and the mask are pure functions of (seed, t, j) -> bitwise repeatable.
#include "common.cuh"
#include "sampler.cuh"

namespace gpusvm {

// The rows (and first-occurrence data) of batch t, grid-stride over j < k.
template <int MODE>
__device__ __forceinline__ void sample_batch(
    const unsigned long long seed, const int n, const int k, const int half, const unsigned int mask,
    const long long t, int* __restrict__ rows, int* __restrict__ first,
    unsigned long long* __restrict__ stamp)
{
    const int stride = gridDim.x * BLOCK;
    if (MODE == 1) {
        const unsigned long long key = stream_key(seed, static_cast<unsigned long long>(t));
        for (int j = blockIdx.x * BLOCK + threadIdx.x; j < k; j += stride) {
            const long long r = uniform_row(n, key, static_cast<unsigned long long>(j));
            rows[j] = static_cast<int>(r);
            atomicMax(stamp + r, (static_cast<unsigned long long>(t + 1) << 32)
                                 | (0xFFFFFFFFull - static_cast<unsigned long long>(j)));
        }
        return;
    }
    BatchDraw draw;
    draw.init(MODE, seed, n, k, half, mask, t);
    for (int j = blockIdx.x * BLOCK + threadIdx.x; j < k; j += stride) {
        int f = 1;
        rows[j] = draw.row(j, &f);
        if (MODE == 2) {
            first[j] = f;
        }
    }
}

}  // namespace gpusvm

template <int MODE>
__global__ void __launch_bounds__(gpusvm::BLOCK, gpusvm::MIN_BLOCKS) gpusvm_sample_next(
    const unsigned long long seed,         // 64-bit seed of the stream
    const int n,                           // rows of X
    const int k,                           // batch size
    const int half,                        // Feistel half width (bits)
    const unsigned int mask,               // 2^half - 1
    long long* __restrict__ counter,       // in: batch index t; out (bump): t + 1
    unsigned int* __restrict__ ticket,     // last-block ticket
    const int bump,                        // 1: advance the counter
    int* __restrict__ rows,                // out: A_t, k
    int* __restrict__ first,               // out (MODE 2): first-occurrence mask, k
    unsigned long long* __restrict__ stamp)  // in/out (MODE 1): first-occurrence stamps, n
{
    const long long t = gpusvm::load_coherent_ll(counter);
    gpusvm::sample_batch<MODE>(seed, n, k, half, mask, t, rows, first, stamp);
    if (bump && gpusvm::last_block_done(ticket) && threadIdx.x == 0) {
        counter[0] = t + 1;
        gpusvm::reset_ticket(ticket);
    }
}
