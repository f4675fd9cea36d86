// sample_next.cu: gpusvm_sample (sample.cu) for the batch t held in device memory, so that a
// captured segment replays the same launch for every iteration: t = counter[0] (0-based batch
// index); when `bump` is set the block that finishes last (ticket) advances counter[0] to t + 1
// (the 1-based iteration the rest of the iteration reads); i.i.d. batches leave the bump to
// gpusvm_sample_firsts_next, which reads the same t.
// grid: grid-stride over j < k with BLOCK threads per block, as gpusvm_sample; every thread reads
//   counter[0] before its block takes a ticket, hence before the last block writes it.
// in: seed, n, k, half, mask, bump; in/out: counter[1] (long long), ticket[1] (zero on entry and
//   exit); out: rows[k], first[k] (MODE 2), stamp[n] (MODE 1, atomicMax).
// traffic: as gpusvm_sample (4 B per j, + 4 B or one 8 B atomic), plus 8 B of counter per thread
//   (one L2 line) and one ticket atomic per block.
// determinism: the rows and the mask are pure functions of (seed, t, j) -> bitwise repeatable.
#include "common.cuh"
#include "sampler.cuh"
#include "sample.cu"

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
