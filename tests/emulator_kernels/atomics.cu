// atomics.cu: atomic scatter-add with the exact change of the squared norm (emulator test kernels)
// grid: ceil(n / blockDim.x); one thread per update i: v[idx[i]] += c[i]
// dsq += (old + c)^2 - old^2 summed over updates == ||v_new||^2 - ||v_old||^2 (telescoping)
// determinism: atomics -> not bitwise repeatable across workers (repeatable with one worker)
extern "C" __global__ void scatter_sq_f32(const int* __restrict__ idx, const float* __restrict__ c,
                                          float* __restrict__ v, double* __restrict__ dsq, const int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float old = atomicAdd(&v[idx[i]], c[i]);
    const float now = old + c[i];   // the value the atomic stored
    atomicAdd(dsq, double(now) * double(now) - double(old) * double(old));
}

extern "C" __global__ void scatter_sq_f64(const int* __restrict__ idx, const double* __restrict__ c,
                                          double* __restrict__ v, double* __restrict__ dsq, const int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const double old = atomicAdd(&v[idx[i]], c[i]);
    const double now = old + c[i];
    atomicAdd(dsq, now * now - old * old);
}

// integer atomics; each thread i < n does one of each. ex_old[i] receives atomicExch's old value.
extern "C" __global__ void atomic_misc(int* __restrict__ ic, unsigned int* __restrict__ uc,
                                       unsigned long long* __restrict__ ull, float* __restrict__ fc,
                                       int* __restrict__ ex_old, const int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    atomicAdd(&ic[0], 1);
    atomicMax(&ic[1], i);
    atomicMin(&ic[2], -i);
    int cur = atomicAdd(&ic[3], 0);               // CAS loop: add 2
    for (;;) {
        const int prev = atomicCAS(&ic[3], cur, cur + 2);
        if (prev == cur) break;
        cur = prev;
    }
    ex_old[i] = atomicExch(&ic[4], i);
    atomicSub(&ic[5], 3);
    atomicOr(&ic[6], 1 << (i % 31));
    atomicXor(&ic[7], i);
    atomicAdd(&uc[0], 3u);
    atomicMax(&uc[1], unsigned(i) * 7u);
    atomicMin(&uc[2], unsigned(i) + 5u);
    atomicAnd(&uc[3], ~(1u << (i % 32)));
    atomicInc(&uc[4], 9u);                        // wraps to 0 after 9
    unsigned long long c = atomicCAS(&ull[1], 0ull, 1ull);   // exactly one thread sees 0
    if (c == 0ull) atomicAdd(&ull[2], 1ull);
    atomicAdd(&ull[0], 1ull << 33);
    atomicExch(&fc[0], 2.5f);
}
