// balanced.cuh: work on a batch's rows balanced by nonzeros, not by rows (the kernels
// margins_balanced.cu and pegasos_segment_step.cu).
// A batch of k rows is cut into tiles of tile_rows <= BLOCK consecutive batch positions; block b
// takes tiles b, b + gridDim.x, ... (the host picks tile_rows = ceil(k / grid) so that every block
// gets about as many rows).  Inside a tile the block scans the rows' lengths in shared memory and
// its threads walk the tile's nonzeros (or 32-nonzero chunks of them) as one concatenated array:
// consecutive threads read consecutive nonzeros (coalesced) and find the row of their position by
// binary search in the scanned offsets.  A long row is thus spread over every thread of its block
// instead of LANES lanes: the time of a tile follows its nonzeros, not its longest row.
// Column aggregation (scatter): a per-block open-addressing hash table in shared memory sums the
// tile's contributions per column, so a column that many rows of the tile share (the hot columns
// of text data) receives one global atomic per tile instead of one per row.
#ifndef GPUSVM_BALANCED_CUH
#define GPUSVM_BALANCED_CUH

#include "common.cuh"

namespace gpusvm {

enum Balanced : int {
    TABLE = 2048,                 // slots of the per-block column table (power of two)
    PROBES = 8,                   // linear probes before an insertion falls back to a global atomic
    CHUNK_WINDOW = 2048,          // chunk sums a block keeps in shared memory at a time
    EMPTY_KEY = -1,
};

// Exclusive scan of the tile's row lengths (len: this thread's row, 0 beyond the tile) into
// off[0 .. BLOCK] (shared); returns the tile's total. Every thread of the block must call it.
__device__ __forceinline__ int tile_scan(const int len, int* off) {
    __shared__ int warp_total[WARPS];
    const int lane = threadIdx.x % WARP;
    const int warp = threadIdx.x / WARP;
    int x = len;
    for (int d = 1; d < WARP; d <<= 1) {
        const int up = __shfl_up_sync(FULL_MASK, x, d);
        if (lane >= d) {
            x += up;
        }
    }
    if (lane == WARP - 1) {
        warp_total[warp] = x;
    }
    __syncthreads();
    int before = 0;
    int total = 0;
    for (int w = 0; w < WARPS; ++w) {
        before += w < warp ? warp_total[w] : 0;
        total += warp_total[w];
    }
    off[threadIdx.x + 1] = before + x;                   // inclusive -> exclusive at i + 1
    if (threadIdx.x == 0) {
        off[0] = 0;
    }
    __syncthreads();                                     // off complete; warp_total reusable
    return total;
}

// The tile row (0 .. nr - 1) holding position q < total: the largest i < nr with off[i] <= q
// (empty rows share their offset with the next row, which is the larger index).
__device__ __forceinline__ int tile_row_of(const int* off, const int nr, const int q) {
    int lo = 0;
    int hi = nr - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (off[mid] <= q) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    return lo;
}

// Slot of column j in the block's table (inserting it), or -1 when PROBES slots are taken.
__device__ __forceinline__ int table_slot(int* keys, const int j) {
    unsigned int h = static_cast<unsigned int>(j) * 2654435761u;
    for (int i = 0; i < PROBES; ++i) {
        const int s = static_cast<int>((h + static_cast<unsigned int>(i)) & (TABLE - 1));
        const int seen = atomicCAS(&keys[s], static_cast<int>(EMPTY_KEY), j);
        if (seen == EMPTY_KEY || seen == j) {
            return s;
        }
    }
    return -1;
}

}  // namespace gpusvm

#endif  // GPUSVM_BALANCED_CUH
