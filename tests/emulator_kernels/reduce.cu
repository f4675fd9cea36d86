// reduce.cu: block sums through static and dynamic shared memory (emulator test kernels)
// grid: one block per blockDim.x inputs; block: a power of 2 up to 1024 (static: up to 256)
// out[b] = sum of x[b*blockDim.x : (b+1)*blockDim.x] (zero-padded past n)

// namespace-scope dynamic shared memory, shared by the kernels that declare no own buffer
extern __shared__ float g_dyn[];

extern "C" __global__ void block_sum_static(const float* __restrict__ x, float* __restrict__ out,
                                            const int n) {
    __shared__ float s[256];
    const int t = threadIdx.x;
    const int i = blockIdx.x * blockDim.x + t;
    s[t] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (t < stride) s[t] += s[t + stride];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = s[0];
}

extern "C" __global__ void block_sum_dynamic(const float* __restrict__ x, float* __restrict__ out,
                                             const int n) {
    extern __shared__ __align__(16) unsigned char smem[];   // blockDim.x floats
    float* s = reinterpret_cast<float*>(smem);
    const int t = threadIdx.x;
    const int i = blockIdx.x * blockDim.x + t;
    s[t] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (t < stride) s[t] += s[t + stride];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = s[0];
}

// double accumulation: warp shuffles, then one partial per warp in dynamic shared memory
extern "C" __global__ void block_sum_warps(const float* __restrict__ x, double* __restrict__ out,
                                           const int n) {
    extern __shared__ double partial[];   // blockDim.x / 32 doubles
    const int t = threadIdx.x;
    const int i = blockIdx.x * blockDim.x + t;
    double v = i < n ? double(x[i]) : 0.0;
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    if ((t & 31) == 0) partial[t >> 5] = v;
    __syncthreads();
    if (t < 32) {
        double p = t < int(blockDim.x >> 5) ? partial[t] : 0.0;
        for (int off = 16; off > 0; off >>= 1) p += __shfl_down_sync(0xffffffffu, p, off);
        if (t == 0) out[blockIdx.x] = p;
    }
}

// uses the namespace-scope buffer
extern "C" __global__ void block_max_global_dyn(const float* __restrict__ x, float* __restrict__ out) {
    const int t = threadIdx.x;
    g_dyn[t] = x[blockIdx.x * blockDim.x + t];
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (t < stride) g_dyn[t] = fmaxf(g_dyn[t], g_dyn[t + stride]);
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = g_dyn[0];
}

// out[i] = dynamic shared memory nobody wrote: NaN (the emulator fills it with 0xFF bytes)
extern "C" __global__ void read_unwritten_shared(float* __restrict__ out) {
    extern __shared__ float sd[];
    out[blockIdx.x * blockDim.x + threadIdx.x] = sd[threadIdx.x];
}

// __syncthreads_count/and/or over pred; exits early for threads past n (they no longer count)
extern "C" __global__ void sync_votes(const int* __restrict__ pred, int* __restrict__ out, const int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const int p = pred[i];
    const int c = __syncthreads_count(p);
    const int a = __syncthreads_and(p);
    const int o = __syncthreads_or(p);
    out[3 * i + 0] = c;
    out[3 * i + 1] = a;
    out[3 * i + 2] = o;
}
