// segment_batch.cuh: the batch of a captured segment's gather kernel (margins.cu,
// sdca_margins.cu): read from rows[], or drawn where it is used.  With draw < 0 the rows come
// from rows[] (written by gpusvm_sample_next); with draw = 0 or 2 (the sampling mode codes
// without replacement and epochs) the thread of batch position g draws its row from (seed, t =
// counter[0]) itself (sampler.cuh: what gpusvm_sample_next<draw> writes at g), writes rows[g]
// and first[g] for the iteration's later kernels, and finish() lets the block that ends last
// advance counter[0] to t + 1: the gather kernel replaces the sampler's launch.  Every thread
// reads counter[0] on construction, before its block takes the ticket in finish(). rows and
// first are written by the thread that later reads them (program order): never read them through
// the read-only path (no const __restrict__ on these pointers).  Where several threads share a
// position (one per output), one of them records it and each takes the flag from its own draw.
#ifndef GPUSVM_SEGMENT_BATCH_CUH
#define GPUSVM_SEGMENT_BATCH_CUH

#include "common.cuh"
#include "sampler.cuh"

namespace gpusvm {

struct SegmentBatch {
    BatchDraw draw;
    int* rows;
    int* first;
    long long* counter;
    long long t;
    int drawing;

    __device__ __forceinline__ SegmentBatch(const int mode, const unsigned long long seed,
                                            const int n, const int k, const int half,
                                            const unsigned int mask, long long* counter_,
                                            int* rows_, int* first_)
        : rows(rows_), first(first_), counter(counter_), t(0), drawing(mode >= 0 ? 1 : 0) {
        if (drawing) {
            t = load_coherent_ll(counter);
            draw.init(mode, seed, n, k, half, mask, t);
        }
    }

    // the row at batch position g and, when f is given, its first-occurrence flag in *f; drawn,
    // the row is recorded in rows[g] and first[g] when record is set (in one thread per position)
    __device__ __forceinline__ int at(const int g, const bool record, int* f) const {
        if (!drawing) {
            if (f != nullptr) {
                *f = first[g];
            }
            return rows[g];
        }
        int fl = 1;
        const int r = draw.row(g, &fl);
        if (record) {
            rows[g] = r;
            first[g] = fl;
        }
        if (f != nullptr) {
            *f = fl;
        }
        return r;
    }

    // after the block's last use of the batch: the last block advances the counter (drawing only)
    __device__ __forceinline__ void finish(unsigned int* ticket) const {
        if (drawing && last_block_done(ticket) && threadIdx.x == 0) {
            counter[0] = t + 1;
            reset_ticket(ticket);
        }
    }
};

}  // namespace gpusvm

#endif  // GPUSVM_SEGMENT_BATCH_CUH
