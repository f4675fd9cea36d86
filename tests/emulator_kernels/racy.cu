// racy.cu: correct kernels and deliberately racy ones, for the ThreadSanitizer mode
// (emulator test kernels; the racy ones never give wrong numbers in a plain emulator run)

// RACY: non-atomic scatter-add; colliding idx[i] race within and across blocks
extern "C" __global__ void scatter_racy(const int* __restrict__ idx, const float* __restrict__ c,
                                        float* __restrict__ v, const int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) v[idx[i]] += c[i];
}

extern "C" __global__ void scatter_atomic(const int* __restrict__ idx, const float* __restrict__ c,
                                          float* __restrict__ v, const int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&v[idx[i]], c[i]);
}

// correct: tree reduction in shared memory with __syncthreads, then a warp xor butterfly
extern "C" __global__ void reduce_ok(const float* __restrict__ x, float* __restrict__ out) {
    __shared__ float s[128];
    const int t = threadIdx.x;
    s[t] = x[blockIdx.x * blockDim.x + t];
    __syncthreads();
    for (int stride = blockDim.x / 2; stride >= 32; stride >>= 1) {
        if (t < stride) s[t] += s[t + stride];
        __syncthreads();
    }
    if (t < 32) {
        float v = s[t];
        for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
        if (t == 0) out[blockIdx.x] = v;
    }
}

// RACY: the same reduction missing the __syncthreads inside the loop
extern "C" __global__ void reduce_nosync(const float* __restrict__ x, float* __restrict__ out) {
    __shared__ float s[128];
    const int t = threadIdx.x;
    s[t] = x[blockIdx.x * blockDim.x + t];
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (t < stride) s[t] += s[t + stride];
    }
    if (t == 0) out[blockIdx.x] = s[0];
}
