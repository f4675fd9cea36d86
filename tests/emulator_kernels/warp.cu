// warp.cu: warp intrinsics, builtins and printf (emulator test kernels)
// warp_ops: 1-D blocks, blockDim.x a multiple of 32; thread t = global index, lane = t % 32.
//   oi/of/od/ol/ou hold K rows of n values each (row k at [k * n + t]); see test_emulator.py.
#define FULL 0xffffffffu

extern "C" __global__ void warp_ops(const int* __restrict__ vi, const float* __restrict__ vf,
                                    const double* __restrict__ vd, const long long* __restrict__ vl,
                                    const unsigned int* __restrict__ vu, const int* __restrict__ pred,
                                    const int width, int* __restrict__ oi, float* __restrict__ of,
                                    double* __restrict__ od, long long* __restrict__ ol,
                                    unsigned int* __restrict__ ou, const int n) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    const int lane = threadIdx.x & 31;
    const int src = (lane * 7 + 3) % 40;    // may exceed width: taken modulo width
    const int up = 3, down = 5, xmask = 5;

    oi[0 * n + t] = __shfl_sync(FULL, vi[t], src, width);
    oi[1 * n + t] = __shfl_up_sync(FULL, vi[t], up, width);
    oi[2 * n + t] = __shfl_down_sync(FULL, vi[t], down, width);
    oi[3 * n + t] = __shfl_xor_sync(FULL, vi[t], xmask, width);
    of[0 * n + t] = __shfl_sync(FULL, vf[t], src, width);
    of[1 * n + t] = __shfl_up_sync(FULL, vf[t], up, width);
    of[2 * n + t] = __shfl_down_sync(FULL, vf[t], down, width);
    of[3 * n + t] = __shfl_xor_sync(FULL, vf[t], xmask, width);
    od[0 * n + t] = __shfl_sync(FULL, vd[t], src, width);
    od[1 * n + t] = __shfl_up_sync(FULL, vd[t], up, width);
    od[2 * n + t] = __shfl_down_sync(FULL, vd[t], down, width);
    od[3 * n + t] = __shfl_xor_sync(FULL, vd[t], xmask, width);
    ol[0 * n + t] = __shfl_sync(FULL, vl[t], src, width);
    ol[1 * n + t] = __shfl_up_sync(FULL, vl[t], up, width);
    ol[2 * n + t] = __shfl_down_sync(FULL, vl[t], down, width);
    ol[3 * n + t] = __shfl_xor_sync(FULL, vl[t], xmask, width);
    ou[0 * n + t] = __shfl_sync(FULL, vu[t], src, width);
    ou[1 * n + t] = __shfl_up_sync(FULL, vu[t], up, width);
    ou[2 * n + t] = __shfl_down_sync(FULL, vu[t], down, width);
    ou[3 * n + t] = __shfl_xor_sync(FULL, vu[t], xmask, width);

    const unsigned int b = __ballot_sync(FULL, pred[t]);
    ou[4 * n + t] = b;
    oi[4 * n + t] = __any_sync(FULL, pred[t]);
    oi[5 * n + t] = __all_sync(FULL, pred[t]);
    oi[6 * n + t] = __popc(b);
    oi[7 * n + t] = __ffs(int(b));
    oi[8 * n + t] = __clz(int(b));
    ou[5 * n + t] = __activemask();
    ou[6 * n + t] = __match_any_sync(FULL, vi[t] & 3);
    __syncwarp();

    // a partial mask: only the lanes with pred set take part
    if (pred[t]) {
        oi[9 * n + t] = __shfl_sync(b, vi[t], __ffs(int(b)) - 1);   // from the lowest such lane
        oi[10 * n + t] = __reduce_add_sync(b, vi[t]);
        __syncwarp(b);
    } else {
        oi[9 * n + t] = -7;
        oi[10 * n + t] = -7;
    }
}

// 14 ints per thread: threadIdx, blockIdx, blockDim, gridDim, warp and lane of the linear index
extern "C" __global__ void builtins(int* __restrict__ out) {
    const int tpb = blockDim.x * blockDim.y * blockDim.z;
    const int lin = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const int blk = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    int* o = out + 14 * (blk * tpb + lin);
    o[0] = threadIdx.x; o[1] = threadIdx.y; o[2] = threadIdx.z;
    o[3] = blockIdx.x;  o[4] = blockIdx.y;  o[5] = blockIdx.z;
    o[6] = blockDim.x;  o[7] = blockDim.y;  o[8] = blockDim.z;
    o[9] = gridDim.x;   o[10] = gridDim.y;  o[11] = gridDim.z;
    o[12] = lin / warpSize;
    o[13] = lin % warpSize;
}

extern "C" __global__ void hello(const int tag) {
    if (threadIdx.x == 0) printf("hello from block %u tag %d\n", blockIdx.x, tag);
}

// y = a x + y; a scalar float parameter (the argument checks are tested with it)
extern "C" __global__ void axpy(const float a, const float* __restrict__ x, float* __restrict__ y,
                                const int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
