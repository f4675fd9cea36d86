// sample_firsts.cu: the first-occurrence mask of a batch drawn with replacement (after
// gpusvm_sample<1> of the same t): first[j] = 1 exactly when the stamp of rows[j] is this
// occurrence's own, ((t + 1) << 32 | ~j), i.e. when no earlier position of the batch drew the same
// row (atomicMax kept the smallest j; stamps of earlier batches carry a smaller t and lose).
// grid: grid-stride over j < k with BLOCK threads per block.
// in: rows[k], stamp[n], k, t; out: first[k] (int 0/1).
// traffic: 4 B (rows) + 8 B (one random stamp read) + 4 B (first) per j.
// determinism: a pure function of the batch -> bitwise repeatable.
#include "common.cuh"

namespace gpusvm {

// first[j] for j < k, grid-stride (the body of gpusvm_sample_firsts and gpusvm_sample_firsts_next).
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

__global__ void __launch_bounds__(gpusvm::BLOCK, gpusvm::MIN_BLOCKS) gpusvm_sample_firsts(
    const int* __restrict__ rows,                   // A_t, k
    const unsigned long long* __restrict__ stamp,   // first-occurrence stamps, n
    const int k,                                    // batch size
    const long long t,                              // 0-based batch index
    int* __restrict__ first)                        // out: first-occurrence mask, k
{
    gpusvm::mark_firsts(rows, stamp, k, t, first);
}
