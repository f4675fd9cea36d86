// deadlock.cu: kernels that must fail with a clear error, never hang (emulator test kernels)

// __syncthreads in divergent code: odd and even threads wait at different barriers
extern "C" __global__ void divergent_sync(float* __restrict__ x) {
    if (threadIdx.x & 1) {
        x[threadIdx.x] = 1.0f;
        __syncthreads();   // DIVERGENT_ODD
    } else {
        __syncthreads();   // DIVERGENT_EVEN
    }
}

// lanes 16-31 exit, lanes 0-15 shuffle with a full mask
extern "C" __global__ void shfl_after_exit(float* __restrict__ x) {
    if (threadIdx.x >= 16) return;
    x[threadIdx.x] = __shfl_xor_sync(0xffffffffu, x[threadIdx.x], 1);   // EXITED_SHFL
}

// a full mask in a 48-thread block: lanes 16-31 of warp 1 do not exist
extern "C" __global__ void full_mask_partial_warp(float* __restrict__ x) {
    x[threadIdx.x] = __shfl_down_sync(0xffffffffu, x[threadIdx.x], 1);
}

// a mask that does not include the calling lane
extern "C" __global__ void mask_without_caller(float* __restrict__ x) {
    x[threadIdx.x] = __shfl_sync(1u, x[threadIdx.x], 0);
}

extern "C" __global__ void trap_in_block_2(float* __restrict__ x) {
    if (blockIdx.x == 2 && threadIdx.x == 5) __trap();
    x[blockIdx.x * blockDim.x + threadIdx.x] = 1.0f;
}

// a correct kernel, run after the failures
extern "C" __global__ void fine(float* __restrict__ x) {
    __shared__ float s[64];
    s[threadIdx.x] = x[threadIdx.x];
    __syncthreads();
    x[threadIdx.x] = s[63 - threadIdx.x];
}
