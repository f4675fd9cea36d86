// common.cuh: helpers shared by every gpusvm kernel; the loader inlines this file into the module text.
// - the slots of the float64 scalar state vector (mirror of gpusvm/backends/_state.py; a test checks
//   that both lists agree);
// - the launch geometry: every kernel runs blocks of BLOCK threads (launch_bounds), the row kernel
//   maps a group of LANES consecutive lanes of one warp to one CSR row and strides over rows with a
//   loop whose trip count is the same for all lanes of a warp, so full-warp shuffles are always
//   legal (warp_rows); elementwise kernels and the (row, output) pairs of M outputs stride over the
//   grid (outputs.cuh and balanced.cuh hold the segment kernels' batch loops);
// - atomic additions that return the exact change of the target's squared norm (add_exact), and
//   the non-returning ones (red_add) for every atomic whose old value is unused;
// - reductions: inside a lane group (xor butterfly), over a block (warp shuffles + shared memory),
//   and the "last block" ticket that lets the final block of a grid finish a computation without a
//   second launch or a host synchronisation (block_sums_to collects the blocks' sums for it).
#ifndef GPUSVM_COMMON_CUH
#define GPUSVM_COMMON_CUH

namespace gpusvm {

// ---- slots of the scalar state vector (double[N_SLOTS]), as in gpusvm/backends/_state.py
enum Slot : int {
    S_A = 0,          // scale a of w = a v
    S_VSQ = 1,        // ||v||^2, tracked exactly from the change of every update
    S_B = 2,          // bias b
    S_ASUM = 3,       // averaging: A, with the running sum of iterates A v - u
    S_NAVG = 4,       // averaging: number of iterates averaged so far
    S_BSUM = 5,       // averaging: sum of the biases of the averaged iterates
    S_NACT = 6,       // number of active rows (margin < 1) in the last batch
    S_DNORM = 7,      // change of ||v||^2 during the last update
    S_LOSS = 8,       // sum of the hinge losses of the last batch
    S_YACT = 9,       // sum of y_i over the active rows of the last batch
    S_BETA = 10,      // SDCA: current step parameter beta
    S_NREJ = 11,      // SDCA: number of rejected steps
    S_ASUMD = 12,     // SDCA: sum of alpha_i
    S_TMP0 = 13,      // scratch slots for kernels
    S_TMP1 = 14,
    S_TMP2 = 15,
    N_SLOTS = 16,
};

// ---- launch geometry
enum Geometry : int {
    BLOCK = 256,                        // threads per block of every kernel
    WARP = 32,
    WARPS = BLOCK / WARP,
    MIN_BLOCKS = 4,                     // launch bound: >= 4 resident blocks per SM (<= 64 registers);
                                        // BLOCK alone would make ptxas cap at 32 registers and spill
};
enum Mask : unsigned {
    FULL_MASK = 0xffffffffu,            // every lane of a warp
};

// Grid-stride loop over 0 .. count - 1: f(j) for j = blockIdx.x BLOCK + threadIdx.x, then in steps
// of the grid's threads (gridDim.x BLOCK), the elementwise kernels' thread mapping.
template <typename F>
__device__ __forceinline__ void grid_stride(const long long count, F&& f) {
    const long long stride = static_cast<long long>(gridDim.x) * BLOCK;
    for (long long j = static_cast<long long>(blockIdx.x) * BLOCK + threadIdx.x; j < count;
         j += stride) {
        f(j);
    }
}

// The stride of the pair loop over M outputs: the grid's threads rounded down to a multiple of M
// when there are at least M (every thread then keeps one output, c = its index mod M, and the
// threads past the multiple take no pair), else all of them.  Grid-uniform.
__device__ __forceinline__ unsigned int pair_stride(const int M) {
    const unsigned int threads = gridDim.x * BLOCK;
    const unsigned int m = static_cast<unsigned int>(M);
    return threads >= m ? threads - threads % m : threads;
}

// The pair loop of M outputs: a grid-stride loop over the k M (batch position, output) pairs
// t = i M + c, f(t, i, c) for every pair of this thread, in steps of pair_stride(M), in unsigned
// 32-bit arithmetic (the host keeps k M plus the grid's threads below 2^31).
template <typename F>
__device__ __forceinline__ void grid_stride_pairs(const int k, const int M, F&& f) {
    const unsigned int count = static_cast<unsigned int>(k) * static_cast<unsigned int>(M);
    const unsigned int m = static_cast<unsigned int>(M);
    const unsigned int stride = pair_stride(M);
    const unsigned int g = blockIdx.x * BLOCK + threadIdx.x;
    for (unsigned int t = g < stride ? g : count; t < count; t += stride) {   // g >= stride: none
        f(static_cast<long long>(t), static_cast<int>(t / m), static_cast<int>(t % m));
    }
}

// Atomically add contrib, rounded to V (float or double), to *p and return new^2 - old^2 in double,
// from the value the atomic returned (the exact change of the target's squared norm).
template <typename V>
__device__ __forceinline__ double add_exact(V* p, const double contrib) {
    const V add = static_cast<V>(contrib);
    const V old = atomicAdd(p, add);
    const V now = old + add;                             // the value the atomic stored
    const double o = static_cast<double>(old);
    const double w = static_cast<double>(now);
    return (w - o) * (w + o);
}

// Atomically add v to *p, discarding the old value: the fire-and-forget reduction (RED) instead of a
// returning atomic (ATOM), for every atomic whose result the caller does not use.  The emulator
// counts these apart from the returning atomics.
template <typename V>
__device__ __forceinline__ void red_add(V* p, const V v) {
#ifdef GPUSVM_EMULATOR
    gpusvm_emu_red_add(p, v);
#else
    atomicAdd(p, v);                                     // result unused: compiled to RED
#endif
}

// Read a word that other threads of the block may set with atomics meanwhile (a relaxed atomic
// load: the emulator's, for the race checker, and a volatile load on the GPU).
template <typename V>
__device__ __forceinline__ V load_relaxed(V* p) {
#ifdef GPUSVM_EMULATOR
    return __atomic_load_n(p, __ATOMIC_RELAXED);
#else
    return *static_cast<volatile V*>(p);
#endif
}

// Sum of x over the LANES lanes of this thread's lane group (LANES in 1..32, a power of two).
// Every lane of the warp must call it (full-mask shuffles); every lane of the group gets the sum.
template <int LANES>
__device__ __forceinline__ double group_sum(double x) {
    for (int off = LANES / 2; off > 0; off >>= 1) {
        x += __shfl_xor_sync(FULL_MASK, x, off);
    }
    return x;
}

// Index in the grid of the first lane group (LANES lanes) of this thread's warp.
template <int LANES>
__device__ __forceinline__ int warp_first_group() {
    const int tid = blockIdx.x * BLOCK + threadIdx.x;
    return (tid / WARP) * (WARP / LANES);                           // groups per warp
}

// The row loop of the row kernels that shuffle (row_sq_norms.cu): the LANES consecutive lanes of a
// group share one row; the groups of a warp take the consecutive rows base + group, base = the
// warp's first group and then in steps of the grid's groups, so every lane of a warp makes the same
// number of calls f(g, lane) (g >= count: past the end, the group must still take part in the
// shuffles).
template <int LANES, typename F>
__device__ __forceinline__ void warp_rows(const int count, F&& f) {
    const int lane = threadIdx.x % LANES;
    const int warp_first = warp_first_group<LANES>();
    const int group_in_warp = (threadIdx.x % WARP) / LANES;
    const int stride = gridDim.x * (BLOCK / LANES);                 // groups in the grid
    for (int base = warp_first; base < count; base += stride) {     // warp-uniform trip count
        f(base + group_in_warp, lane);
    }
}

// True in every lane of a warp whose first group is past count (warp_rows calls nothing there):
// such a warp may leave at once when no block-wide step follows.
template <int LANES>
__device__ __forceinline__ bool warp_past_end(const int count) {
    return warp_first_group<LANES>() >= count;
}

// Sum of NV values over the whole block; the result is valid in thread 0 only.
// Every thread of the block must call it (it contains __syncthreads).
template <int NV>
__device__ __forceinline__ void block_sum(double (&x)[NV]) {
    __shared__ double partial[WARPS][NV];
    const int lane = threadIdx.x % WARP;
    const int warp = threadIdx.x / WARP;
    for (int i = 0; i < NV; ++i) {
        x[i] = group_sum<WARP>(x[i]);
    }
    if (lane == 0) {
        for (int i = 0; i < NV; ++i) {
            partial[warp][i] = x[i];
        }
    }
    __syncthreads();
    if (warp == 0) {
        for (int i = 0; i < NV; ++i) {
            x[i] = lane < WARPS ? partial[lane][i] : 0.0;
            x[i] = group_sum<WARP>(x[i]);
        }
    }
}

// Block sums of NV values added into acc[0 .. NV - 1] (one atomic per block and value), the
// opening of every balanced kernel's last-block finish.  Every thread must call it.
template <int NV>
__device__ __forceinline__ void block_sums_to(double (&sums)[NV], double* __restrict__ acc) {
    block_sum<NV>(sums);
    if (threadIdx.x == 0) {
        for (int i = 0; i < NV; ++i) {
            red_add(&acc[i], sums[i]);
        }
    }
}

// The sums of the pair loop's threads (each keeping one output, pair_stride(M) a multiple of M)
// added per output into acc[i M + c], i < NV: one atomic per block, output and value (none for a
// zero sum).  Every thread of the block must call it (M is grid-uniform).
template <int NV>
__device__ __forceinline__ void block_pair_sums_to(const double (&v)[NV], double* __restrict__ acc,
                                                   const int M) {
    const int tid = threadIdx.x;
    const unsigned int first = blockIdx.x * BLOCK;
    const unsigned int m = static_cast<unsigned int>(M);
    if (M >= BLOCK) {                                    // every output at most once in the block
        const int c = static_cast<int>((first + tid) % m);
        for (int i = 0; i < NV; ++i) {
            if (v[i] != 0.0) {
                red_add(&acc[i * M + c], v[i]);
            }
        }
        return;
    }
    __shared__ double part[NV][BLOCK];
    for (int i = 0; i < NV; ++i) {
        part[i][tid] = v[i];
    }
    __syncthreads();
    if (tid < M) {                                       // threads tid, tid + M, ...: one output
        const int c = static_cast<int>((first + tid) % m);
        for (int i = 0; i < NV; ++i) {
            double sum = 0.0;
            for (int j = tid; j < BLOCK; j += M) {
                sum += part[i][j];
            }
            if (sum != 0.0) {
                red_add(&acc[i * M + c], sum);
            }
        }
    }
}

// True in every thread of the block that finishes last in the grid.
// Each block makes its global writes visible (__threadfence, release) and then takes a ticket; the
// block that draws ticket gridDim.x - 1 fences again (acquire) and so sees every write that the
// other blocks made before their tickets (and knows they have read whatever they needed of the
// state).  The last block must then call reset_ticket() so that the next launch starts from zero.
// Every thread of the block must call it.
__device__ __forceinline__ bool last_block_done(unsigned int* ticket) {
    __shared__ unsigned int is_last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned int t = atomicAdd(ticket, 1u);
        __threadfence();
        is_last = (t == gridDim.x - 1) ? 1u : 0u;
    }
    __syncthreads();
    return is_last != 0u;
}

// Zero the ticket for the next launch (an atomic: other blocks' increments are atomics too).
__device__ __forceinline__ void reset_ticket(unsigned int* ticket) {
    atomicExch(ticket, 0u);
}

// Read a double that other blocks updated with atomics in this launch (bypasses the
// non-coherent L1 cache).
__device__ __forceinline__ double load_coherent(const double* p) {
    return *static_cast<const volatile double*>(p);
}

// Read a counter that the previous launch of a captured segment wrote (not through the
// non-coherent read-only path: a pointer written by the device must not be read as __ldg).
__device__ __forceinline__ long long load_coherent_ll(const long long* p) {
    return *static_cast<const volatile long long*>(p);
}

}  // namespace gpusvm

#endif  // GPUSVM_COMMON_CUH
