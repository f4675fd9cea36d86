// spmv.cu: y[r] = <A[r,:], x> for CSR A (emulator test kernel)
// grid: ceil(n_rows * LANES / blockDim.x) blocks; a group of LANES lanes owns one row, strides
//   over its nonzeros and reduces with log2(LANES) __shfl_down_sync (width LANES).
// in: indptr[n_rows+1], indices[nnz], data[nnz], x[n_cols], n_rows; out: y[n_rows]
// determinism: fixed reduction order -> bitwise repeatable
template <typename T, int LANES>
__global__ void emu_spmv(const int* __restrict__ indptr, const int* __restrict__ indices,
                         const T* __restrict__ data, const T* __restrict__ x, T* __restrict__ y,
                         const int n_rows) {
    const int gid = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = gid / LANES;
    const int lane = threadIdx.x % LANES;
    T s = T(0);
    if (row < n_rows) {  // no early return: every lane takes part in the shuffles
        for (int k = indptr[row] + lane; k < indptr[row + 1]; k += LANES)
            s += data[k] * __ldg(&x[indices[k]]);
    }
#pragma unroll
    for (int off = LANES / 2; off > 0; off /= 2)
        s += __shfl_down_sync(0xffffffffu, s, off, LANES);
    if (row < n_rows && lane == 0) y[row] = s;
}
