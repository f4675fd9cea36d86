// sample_firsts_next.cu: the first-occurrence mask of a batch drawn with replacement, for the
// batch t = counter[0] held in device memory (after gpusvm_sample_next<1> of the same t, which
// leaves the counter alone): first[j] = 1 exactly when the stamp of rows[j] is this occurrence's
// own, ((t + 1) << 32 | ~j), i.e. when no earlier position of the batch drew the same row
// (atomicMax kept the smallest j; stamps of earlier batches carry a smaller t and lose); the block
// that finishes last (ticket) advances counter[0] to t + 1.
// grid: grid-stride over j < k with BLOCK threads per block; every thread reads counter[0] before
//   its block takes a ticket.
// in: rows[k], stamp[n], k; in/out: counter[1], ticket[1] (zero on entry and exit);
// out: first[k] (int 0/1).
// traffic: 4 B (rows) + 8 B (one random stamp read) + 4 B (first) per j; one ticket atomic per block.
// determinism: a pure function of the batch -> bitwise repeatable.
#include "common.cuh"

namespace gpusvm {

// first[j] for j < k, grid-stride.
__device__ __forceinline__ void mark_firsts(const int* __restrict__ rows,
                                            const unsigned long long* __restrict__ stamp,
                                            const int k, const long long t,
                                            int* __restrict__ first)
{
    const int stride = gridDim.x * BLOCK;
    const unsigned long long high = static_cast<unsigned long long>(t + 1) << 32;
    for (int j = blockIdx.x * BLOCK + threadIdx.x; j < k; j += stride) {
        const unsigned long long own = high | (0xFFFFFFFFull - static_cast<unsigned long long>(j));
        first[j] = stamp[rows[j]] == own ? 1 : 0;
    }
}

}  // namespace gpusvm

__global__ void __launch_bounds__(gpusvm::BLOCK, gpusvm::MIN_BLOCKS) gpusvm_sample_firsts_next(
    const int* __restrict__ rows,                   // A_t, k
    const unsigned long long* __restrict__ stamp,   // first-occurrence stamps, n
    const int k,                                    // batch size
    long long* __restrict__ counter,                // in: batch index t; out: t + 1
    unsigned int* __restrict__ ticket,              // last-block ticket
    int* __restrict__ first)                        // out: first-occurrence mask, k
{
    const long long t = gpusvm::load_coherent_ll(counter);
    gpusvm::mark_firsts(rows, stamp, k, t, first);
    if (gpusvm::last_block_done(ticket) && threadIdx.x == 0) {
        counter[0] = t + 1;
        gpusvm::reset_ticket(ticket);
    }
}
