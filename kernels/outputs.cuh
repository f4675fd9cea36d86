// outputs.cuh: what every segment kernel shares, written once for M outputs and specialised at
// compile time by the template parameters of the kernels (selected by NVRTC name expressions):
//   M1 = 1: one output (M = 1): the batch is walked balanced by nonzeros (balanced.cuh: tiles of
//          tile_rows batch positions per block, a column table before the atomics), the sums of
//          a block reduced in registers and added with one atomic per block and value;
//   M1 = 0: M outputs: one thread per (batch position i, output c) pair t = i M + c (grid-stride,
//          common.cuh's grid_stride_pairs); the M threads of a row walk its nonzeros in step, so
//          indices[p] and data[p] are one broadcast read and V[j, 0..M-1] one coalesced read;
//          a pair's sums are kept per thread (one output each) and added per block and output;
//   SQ = 1: the squared hinge (else the hinge); WT = 1: example weights s_ic (else s = 1, a
//          constant the compiler folds away).
// The state is N_SLOTS x M, slot-major (state[S_A * M + c] is a_c), V and U are d x M
// row-major, the accumulators acc are N_ACC x M (zero between launches).
#ifndef GPUSVM_OUTPUTS_CUH
#define GPUSVM_OUTPUTS_CUH

#include "common.cuh"
#include "balanced.cuh"

namespace gpusvm {

enum Acc : int {      // slots of the accumulators (x M), each zeroed by the launch that reads it
    ACC_NORM = 0,     // exact change of a squared norm (||v_c||^2, or the scratch's)
    ACC_1 = 1,        // Pegasos: active rows; SDCA: sum delta
    ACC_2 = 2,        // Pegasos: sum of the losses; SDCA: sum |delta|
    ACC_3 = 3,        // Pegasos: sum g y of the active rows; SDCA: n times the separable gain of D
    ACC_NUM = 4,      // Alg. 2: ||sum_i delta_i y_i x_i||^2
    ACC_DEN = 5,      // Alg. 2: sum_i delta_i^2 ||x_i||^2
    ACC_REJECT = 6,   // 1 when the checked step was rejected (step launch -> settle launch)
    N_ACC = 7,
};

// Sums per output, this thread's in registers, added by flush() (every thread must call it):
// with M1 reduced over the block, one atomic per block and value on acc[i]; else, when the grid
// has at least M threads (each thread then keeps one output: common.cuh's pair_stride), reduced
// per output over the block, one atomic per block, output and value on acc[i M + c]; with fewer
// threads than outputs, an atomic on acc[i M + c] at each add.
template <int M1, int NV>
struct OutputSums {
    double v[NV];
    double* acc;
    int M;
    bool fixed;                                          // M1 = 0: one output per thread

    __device__ __forceinline__ OutputSums(double* acc_, const int M_)
        : acc(acc_), M(M_), fixed(M1 != 0 || gridDim.x * BLOCK >= static_cast<unsigned int>(M_)) {
        for (int i = 0; i < NV; ++i) {
            v[i] = 0.0;
        }
    }
    __device__ __forceinline__ void add(const int i, const int c, const double x) {
        if (M1 != 0 || fixed) {
            v[i] += x;
        } else {
            red_add(&acc[i * M + c], x);
        }
    }
    __device__ __forceinline__ void flush() {
        if constexpr (M1 != 0) {
            block_sums_to<NV>(v, acc);
        } else if (fixed) {
            block_pair_sums_to<NV>(v, acc, M);
        }
    }
};

// In the last block: the NV sums of output c (acc[(base + i) M + c]), zeroed for the next launch.
template <int NV>
__device__ __forceinline__ void take_sums(double* acc, const int M, const int c, double (&tot)[NV]) {
    for (int i = 0; i < NV; ++i) {
        tot[i] = load_coherent(&acc[i * M + c]);
        acc[i * M + c] = 0.0;
    }
}

// The gather of a segment: f(i, c, t, r, fl, dot) with dot = <x_r, V[:, c]> for every batch
// position i (row r, first-occurrence flag fl, read only when FIRST) and output c, t = i M + c.
// M1: balanced.cuh's tile_rows_dot (a row's sum in a fixed order: bitwise repeatable); else one
// thread per pair sums its row in CSR order (the thread of output 0 records a drawn row).  Every
// thread of the block must call it.
template <int M1, int FIRST, typename T, typename I, typename F>
__device__ __forceinline__ void batch_dots(const long long* __restrict__ indptr,
                                           const I* __restrict__ indices,
                                           const T* __restrict__ data, const T* __restrict__ V,
                                           const int M, const SegmentBatch& batch, const int k,
                                           const int tile_rows, F&& f) {
    int fl = 1;
    int* const want = FIRST != 0 ? &fl : nullptr;
    if constexpr (M1 != 0) {
        tile_rows_dot(indptr, indices, data, V, [&](const int g) { return batch.at(g, true, want); },
                      k, tile_rows, [&](const int g, const int r, const double dot) {
            f(g, 0, static_cast<long long>(g), r, fl, dot);
        });
    } else {
        grid_stride_pairs(k, M, [&](const long long t, const int i, const int c) {
            const int r = batch.at(i, c == 0, want);
            const long long end = indptr[r + 1];
            double z = 0.0;
            for (long long p = indptr[r]; p < end; ++p) {
                z += static_cast<double>(data[p])
                     * static_cast<double>(V[static_cast<long long>(indices[p]) * M + c]);
            }
            f(i, c, t, r, fl, z);
        });
    }
}

// The scatter of a segment: target[j, c] += coef x_rj for every batch position i and output c
// whose row(i, c, t, coef) returns its CSR row r (-1: adds nothing), with U[j, c] += u_scale(c)
// coef x_rj when U is given, and the exact change of ||target[:, c]||^2 added to
// sums (slot ACC_NORM).  M1: balanced.cuh's tile_rows_scatter (per tile one atomic per column,
// u_scale(0) read once); else one thread per pair, an atomic per nonzero.  Every thread of the
// block must call it.
template <int M1, typename T, typename I, typename V, typename S, typename US, typename F>
__device__ __forceinline__ void batch_scatter(const long long* __restrict__ indptr,
                                              const I* __restrict__ indices,
                                              const T* __restrict__ data, const int k, const int M,
                                              const int tile_rows, V* __restrict__ target,
                                              double* __restrict__ U, US&& u_scale, S& sums,
                                              F&& row) {
    if constexpr (M1 != 0) {
        const double us = U != nullptr ? u_scale(0) : 0.0;
        sums.v[ACC_NORM] += tile_rows_scatter(indptr, indices, data, k, tile_rows, target, U, us,
                                              [&](const int g, double& coef) {
            return row(g, 0, static_cast<long long>(g), coef);
        });
    } else {
        grid_stride_pairs(k, M, [&](const long long t, const int i, const int c) {
            double coef = 0.0;
            const int r = row(i, c, t, coef);
            if (r < 0 || coef == 0.0) {
                return;
            }
            const double us = U != nullptr ? u_scale(c) : 0.0;
            const long long end = indptr[r + 1];
            double dn = 0.0;
            for (long long p = indptr[r]; p < end; ++p) {
                const long long at = static_cast<long long>(indices[p]) * M + c;
                const double contrib = static_cast<double>(data[p]) * coef;
                dn += add_exact(&target[at], contrib);
                if (us != 0.0) {
                    red_add(&U[at], us * contrib);
                }
            }
            sums.add(ACC_NORM, c, dn);
        });
    }
}

// Weight s_ic of row r for output c: sw[r M + c], or the constant 1 without weights.
template <int WT>
__device__ __forceinline__ double weight_of(const double* __restrict__ sw, const int r,
                                            const int M, const int c) {
    if constexpr (WT != 0) {
        return sw[static_cast<long long>(r) * M + c];
    } else {
        return 1.0;
    }
}

// SDCA's coordinate step (Takac et al. 2013, eq. 15; docs/algorithms.md, "Weights" and "Squared
// hinge") for dual alpha in [0, s] (hinge) or [0, inf) (squared), with lamn = lam n.
template <int SQ>
__device__ __forceinline__ double sdca_step(const double alpha, const double s, const double lamn,
                                            const double beta, const double m, const double q) {
    if constexpr (SQ != 0) {
        const double x = (2.0 * s * (1.0 - m) - alpha) / (1.0 + 2.0 * s * beta * q / lamn);
        return x > -alpha ? x : -alpha;
    } else {
        const double hi = s - alpha;
        if (q == 0.0) {
            return hi;                                          // the limit ||x_i|| -> 0
        }
        const double raw = (lamn / beta) * (1.0 - m) * (1.0 / q);
        const double x = raw > -alpha ? raw : -alpha;
        return x < hi ? x : hi;
    }
}

// Machine epsilon of V's type (the dual check's rounding allowance).
template <typename T>
__device__ __forceinline__ double eps_of() {
    return sizeof(T) == 4 ? 0x1p-23 : 0x1p-52;
}

}  // namespace gpusvm

#endif  // GPUSVM_OUTPUTS_CUH
