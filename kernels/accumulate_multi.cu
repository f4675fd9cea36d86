// accumulate_multi.cu: V[j, c] += coef[i, c] x_rj for the batch rows r = rows[i] and every output c
// with coef[i, c] != 0 (atomicAdd, rounded to T), with the exact change of each ||v_c||^2 summed
// into dn[c] (new^2 - old^2 of every addition, in double: the atomic returns the old value), and,
// when u_on, U[j, c] += u_scale[c] coef[i, c] x_rj (the running sums of averaged Pegasos).
// With zero != 0 it instead sets V[j, c] = 0 at the batch's nonzeros (cleans a scratch matrix).
// The one pass that adds the updates of all M outputs (ALGORITHMS.md, "Many outputs at once").
// grid: min(ceil(k M / BLOCK), max_blocks) blocks of BLOCK threads; thread t owns the pair
//   (i, c) = (t / M, t % M), as gpusvm_margins_multi; the M threads of a row add into the
//   consecutive addresses V[j, 0..M-1] (row-major V, d x M).
// in: indptr[n+1] (int64), indices[nnz], data[nnz] (T), rows[k], k, M, coef[k x M] (double),
//   u_scale[M] (double), u_on, zero; in/out: V[d x M] (T), U[d x M] (double), dn[M] (double,
//   zeroed by the caller).
// traffic: 4 + sizeof(T) B per nonzero (shared by the row's threads), one atomic read-modify-write
//   of V per nonzero and moving output (and of U when averaging), one atomic per thread on dn.
// determinism: float atomics add in any order: not bitwise repeatable (the sums agree to rounding);
//   the NumPy and numba backends are the deterministic paths.
#include "common.cuh"

template <typename T>
__global__ void __launch_bounds__(gpusvm::BLOCK, gpusvm::MIN_BLOCKS) gpusvm_accumulate_multi(
    const long long* __restrict__ indptr,  // CSR row pointers, n + 1
    const int* __restrict__ indices,       // CSR column indices, nnz
    const T* __restrict__ data,            // CSR values, nnz
    const int* __restrict__ rows,          // the batch A_t, k
    const int k,                           // batch size
    const int M,                           // number of outputs
    const double* __restrict__ coef,       // coefficients of the rows, k x M
    T* __restrict__ V,                     // d x M, row-major, updated atomically
    double* __restrict__ U,                // d x M running sums (read only when u_on)
    const double* __restrict__ u_scale,    // M scales of the additions into U
    const int u_on,                        // 1: add into U too
    const int zero,                        // 1: set V = 0 at the batch's nonzeros instead
    double* __restrict__ dn)               // M exact changes of ||v_c||^2, accumulated
{
    gpusvm::grid_stride_pairs(k, M, [&](const long long t, const int i, const int c) {
        const int r = rows[i];
        const long long end = indptr[r + 1];
        if (zero != 0) {
            for (long long p = indptr[r]; p < end; ++p) {
                V[static_cast<long long>(indices[p]) * M + c] = static_cast<T>(0);
            }
            return;
        }
        const double ci = coef[t];
        if (ci == 0.0) {
            return;                                            // this output does not move
        }
        const bool add_u = u_on != 0 && u_scale[c] != 0.0;
        double sum = 0.0;
        for (long long p = indptr[r]; p < end; ++p) {
            const long long at = static_cast<long long>(indices[p]) * M + c;
            const double contrib = static_cast<double>(data[p]) * ci;
            const T add = static_cast<T>(contrib);
            if (add == static_cast<T>(0)) {
                continue;
            }
            const T old = atomicAdd(&V[at], add);
            const T now = old + add;                           // the value the atomic stored
            const double o = static_cast<double>(old);
            const double n = static_cast<double>(now);
            sum += (n - o) * (n + o);                          // new^2 - old^2
            if (add_u) {
                atomicAdd(&U[at], u_scale[c] * contrib);
            }
        }
        atomicAdd(&dn[c], sum);
    });
}
