// balanced.cuh: work on a batch's rows balanced by nonzeros, not by rows: the one-output (M1)
// form of the segment kernels (outputs.cuh's batch_dots and batch_scatter) is its gather,
// tile_row_dot, and its aggregated scatter, tile_scatter, with their tile loops tile_rows_dot and
// tile_rows_scatter.
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
#include "segment_batch.cuh"

namespace gpusvm {

enum Balanced : int {
    TABLE = 2048,                 // slots of the per-block column table (power of two)
    PROBES = 8,                   // linear probes before an insertion falls back to a global atomic
                                  // (each a shared read; a CAS only on an empty slot)
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

// Compare-and-swap of a table key: int columns, or long long ones (a matrix of 2^31 columns or
// more) through the unsigned 64-bit atomicCAS.
__device__ __forceinline__ int cas_key(int* p, const int compare, const int v) {
    return atomicCAS(p, compare, v);
}
__device__ __forceinline__ long long cas_key(long long* p, const long long compare,
                                             const long long v) {
    return static_cast<long long>(atomicCAS(reinterpret_cast<unsigned long long*>(p),
                                            static_cast<unsigned long long>(compare),
                                            static_cast<unsigned long long>(v)));
}

// Slot of column j in the block's table (inserting it), or -1 when the probes slots are taken;
// I, the column index type (int, or long long), is the type of the keys.
template <typename I>
__device__ __forceinline__ int table_slot(I* keys, const I j, const int probes) {
    unsigned int h = static_cast<unsigned int>(static_cast<unsigned long long>(j)
                                               ^ (static_cast<unsigned long long>(j) >> 32))
                     * 2654435761u;
    for (int i = 0; i < probes; ++i) {
        const int s = static_cast<int>((h + static_cast<unsigned int>(i)) & (TABLE - 1));
        I seen = load_relaxed(&keys[s]);                 // a key once set stays: read, CAS if empty
        if (seen == EMPTY_KEY) {
            seen = cas_key(&keys[s], static_cast<I>(EMPTY_KEY), j);
        }
        if (seen == EMPTY_KEY || seen == j) {
            return s;
        }
    }
    return -1;
}

// ---- gather: the dot products <x_r, v> of a tile's rows (margins.cu, sdca_margins.cu).  Thread
// tid < nr passes its row r (the others anything); start, len (BLOCK), off (BLOCK + 1) and csum
// (CHUNK_WINDOW) are the caller's shared arrays.  One thread per row loads
// indptr; the rows' chunks of 32 consecutive nonzeros are scanned; the block's warps stride over
// the chunks (one per warp at a time: coalesced reads, a fixed butterfly sum); one thread per row
// adds its chunks' sums in row order, so the result does not depend on where a row sits in the
// batch.  Returns the dot of the row of this thread (tid < nr; 0 otherwise).  Every thread of the
// block must call it; on return the shared arrays may be reused.
template <typename T, typename I, typename W>
__device__ __forceinline__ double tile_row_dot(const long long* __restrict__ indptr,
                                               const I* __restrict__ indices,
                                               const T* __restrict__ data,
                                               const W* __restrict__ v, const int r,
                                               const int nr, long long* start, int* len, int* off,
                                               double* csum) {
    const int tid = threadIdx.x;
    const int lane = tid % WARP;
    const int warp = tid / WARP;
    int chunks = 0;
    if (tid < nr) {
        const long long s0 = indptr[r];
        start[tid] = s0;
        len[tid] = static_cast<int>(indptr[r + 1] - s0);
        chunks = (len[tid] + WARP - 1) / WARP;
    }
    const int total = tile_scan(chunks, off);
    double dot = 0.0;
    for (int w0 = 0; w0 < total; w0 += CHUNK_WINDOW) {              // block-uniform
        const int w1 = min(total, w0 + static_cast<int>(CHUNK_WINDOW));
        for (int q = w0 + warp; q < w1; q += WARPS) {                // warp-uniform
            const int row = tile_row_of(off, nr, q);
            const int c = (q - off[row]) * WARP + lane;              // position in the row
            double prod = 0.0;
            if (c < len[row]) {
                const long long p = start[row] + c;
                prod = static_cast<double>(data[p]) * static_cast<double>(v[indices[p]]);
            }
            prod = group_sum<WARP>(prod);                            // fixed butterfly order
            if (lane == 0) {
                csum[q - w0] = prod;
            }
        }
        __syncthreads();
        if (tid < nr) {                                              // chunks in row order
            const int c0 = max(off[tid], w0);
            const int c1 = min(off[tid + 1], w1);
            for (int q = c0; q < c1; ++q) {
                dot += csum[q - w0];
            }
        }
        __syncthreads();                                             // csum reused
    }
    __syncthreads();                                                 // start, len, off reused
    return dot;
}

// The tile loop of the gather kernels (margins.cu, sdca_margins.cu): block b
// takes the tiles of tile_rows batch positions b, b + gridDim.x, ... of the k; in the thread of
// each tile row, row_at(g) gives the CSR row at batch position g (read or drawn: SegmentBatch);
// the dots come from tile_row_dot (its shared arrays are declared here), and f(g, r, dot) is
// called in the same thread.  Every thread of the block must call it.
template <typename T, typename I, typename W, typename R, typename F>
__device__ __forceinline__ void tile_rows_dot(const long long* __restrict__ indptr,
                                              const I* __restrict__ indices,
                                              const T* __restrict__ data, const W* __restrict__ v,
                                              R&& row_at, const int k, const int tile_rows,
                                              F&& f) {
    __shared__ long long start[BLOCK];
    __shared__ int len[BLOCK];
    __shared__ int off[BLOCK + 1];
    __shared__ double csum[CHUNK_WINDOW];
    const int tid = threadIdx.x;
    for (int first = blockIdx.x * tile_rows; first < k; first += gridDim.x * tile_rows) {
        const int nr = min(tile_rows, k - first);
        const int r = tid < nr ? row_at(first + tid) : 0;
        const double dot = tile_row_dot(indptr, indices, data, v, r, nr, start, len, off, csum);
        if (tid < nr) {
            f(first + tid, r, dot);
        }
    }
}

// ---- scatter with column aggregation (pegasos_step.cu, sdca_apply.cu, sdca_rho.cu).  Before
// the tile: table_clear, then the caller sets start[i], coef[i] and the length of each moving
// row i < nr (0 for the others) and scans the lengths with tile_scan (whose barrier orders the
// clearing before the insertions).  tile_scatter then adds coef[row] x_rj for the tile's
// nonzeros into target: the block's threads stride over the tile's nonzeros (coalesced) and sum
// them per column in the shared table (double), then each column of the table gets one atomic on
// target (and, with u, u[j] += u_scale times the column's sum); a column the table cannot place
// (PROBES slots taken: wide tiles of text data, more distinct columns than TABLE) gets its atomic
// at once.  A probe reads the slot and takes a CAS only when it is empty (keys once set stay), so
// a full table costs PROBES shared reads, and a column in the table is always found there (one
// global atomic per tile).  Returns this thread's share of the exact change
// new^2 - old^2 of ||target||^2.  Every thread of the block must call it; on return the shared
// arrays may be reused.
template <typename I>
__device__ __forceinline__ void table_clear(I* keys, double* vals) {
    for (int s = threadIdx.x; s < TABLE; s += BLOCK) {
        keys[s] = EMPTY_KEY;
        vals[s] = 0.0;
    }
}

template <typename T, typename I, typename V>
__device__ __forceinline__ double tile_scatter(const I* __restrict__ indices,
                                               const T* __restrict__ data, const long long* start,
                                               const int* off, const double* coef, const int nr,
                                               const int total, I* keys, double* vals,
                                               V* __restrict__ target, double* __restrict__ u,
                                               const double u_scale) {
    double dn = 0.0;
    const bool add_u = u != nullptr && u_scale != 0.0;
    for (int q = threadIdx.x; q < total; q += BLOCK) {
        const int row = tile_row_of(off, nr, q);
        const long long p = start[row] + (q - off[row]);
        const I j = indices[p];
        const double contrib = static_cast<double>(data[p]) * coef[row];
        const int slot = table_slot(keys, j, PROBES);
        if (slot >= 0) {
            red_add(&vals[slot], contrib);
        } else {                                                     // table crowded: add at once
            dn += add_exact(&target[j], contrib);
            if (add_u) {
                red_add(&u[j], u_scale * contrib);
            }
        }
    }
    __syncthreads();
    for (int s = threadIdx.x; s < TABLE; s += BLOCK) {               // one atomic per column
        const I j = keys[s];
        if (j != EMPTY_KEY) {
            const double contrib = vals[s];
            dn += add_exact(&target[j], contrib);
            if (add_u) {
                red_add(&u[j], u_scale * contrib);
            }
        }
    }
    __syncthreads();                                                 // the next tile clears them
    return dn;
}

// The tile loop of the scatter kernels (pegasos_step.cu, sdca_apply.cu, sdca_rho.cu), with the
// shared arrays of tile_scatter: block b takes the tiles of tile_rows batch positions b, b +
// gridDim.x, ... of the k; in the thread of each tile row, row(g, c) (g its batch position)
// returns the CSR row to add, setting its coefficient c, or -1 for a row that adds nothing; then
// the tile's rows are scattered into target (and u) by tile_scatter. Returns this thread's share
// of the exact change of ||target||^2, summed over its tiles.  Every thread of the block must
// call it.
template <typename T, typename I, typename V, typename F>
__device__ __forceinline__ double tile_rows_scatter(const long long* __restrict__ indptr,
                                                    const I* __restrict__ indices,
                                                    const T* __restrict__ data, const int k,
                                                    const int tile_rows, V* __restrict__ target,
                                                    double* __restrict__ u, const double u_scale,
                                                    F&& row) {
    __shared__ long long start[BLOCK];
    __shared__ int off[BLOCK + 1];
    __shared__ double coef[BLOCK];
    __shared__ I keys[TABLE];
    __shared__ double vals[TABLE];
    const int tid = threadIdx.x;
    double dn = 0.0;
    for (int first = blockIdx.x * tile_rows; first < k; first += gridDim.x * tile_rows) {
        const int nr = min(tile_rows, k - first);
        int len = 0;
        if (tid < nr) {
            double c = 0.0;
            const int r = row(first + tid, c);
            if (r >= 0) {
                coef[tid] = c;
                const long long s0 = indptr[r];
                start[tid] = s0;
                len = static_cast<int>(indptr[r + 1] - s0);
            }
        }
        table_clear(keys, vals);
        const int total = tile_scan(len, off);                      // also orders the clear
        dn += tile_scatter(indices, data, start, off, coef, nr, total, keys, vals, target, u,
                           u_scale);
    }
    return dn;
}

// The tile loop of a zeroing pass (sdca_apply.cu's settle): block b takes the tiles of
// tile_rows batch positions b, b + gridDim.x, ... of the k; in the thread of each tile row,
// row(g) returns the CSR row whose columns of target are to be zeroed, or -1; the block's threads
// then stride over those rows' nonzeros and zero target there with atomic stores (other blocks may
// zero the same column).  Every thread of the block must call it.
template <typename I, typename F>
__device__ __forceinline__ void tile_rows_zero(const long long* __restrict__ indptr,
                                               const I* __restrict__ indices, const int k,
                                               const int tile_rows, double* __restrict__ target,
                                               F&& row) {
    __shared__ long long start[BLOCK];
    __shared__ int off[BLOCK + 1];
    const int tid = threadIdx.x;
    for (int first = blockIdx.x * tile_rows; first < k; first += gridDim.x * tile_rows) {
        const int nr = min(tile_rows, k - first);
        int len = 0;
        if (tid < nr) {
            const int r = row(first + tid);
            if (r >= 0) {
                const long long s0 = indptr[r];
                start[tid] = s0;
                len = static_cast<int>(indptr[r + 1] - s0);
            }
        }
        const int total = tile_scan(len, off);
        for (int q = tid; q < total; q += BLOCK) {
            const int i = tile_row_of(off, nr, q);
            double* const slot = &target[indices[start[i] + (q - off[i])]];
            atomicExch(reinterpret_cast<unsigned long long*>(slot), 0ull);
        }
        __syncthreads();                                             // shared arrays reused
    }
}

}  // namespace gpusvm

#endif  // GPUSVM_BALANCED_CUH
