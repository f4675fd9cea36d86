// while_more.cu: the condition of a segment's WHILE node (a CUDA 12.4 conditional graph node):
// the node replays its body, a chunk of C iterations followed by this kernel, while chunks are
// left, so a segment of any length is one graph launch on the device (runtime.py, SegmentGraph).
// grid: one block; thread 0 of block 0 counts a chunk down and sets the node's condition, the
//   other threads return.
// in/out: left[1] (chunks still to run, set by the host before the graph launch); out: the
//   condition of the WHILE node of `handle` (1: run the body again, 0: leave the loop).
// traffic: 8 B read and 8 B written per chunk of C iterations.
// determinism: one thread -> bitwise repeatable.
#include "common.cuh"

#ifndef GPUSVM_EMULATOR
// the device runtime's setter, a builtin of the CUDA compiler (no header or device runtime library
// is needed); the CPU emulator defines its own in cuda_emu.h
typedef __device_builtin__ unsigned long long cudaGraphConditionalHandle;
extern "C" __device__ __cudart_builtin__ void cudaGraphSetConditional(
    cudaGraphConditionalHandle handle, unsigned int value);
#endif

__global__ void gpusvm_while_more(
    const unsigned long long handle,       // the WHILE node's conditional handle
    long long* __restrict__ left)          // chunks still to run, this one included
{
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        const long long rest = left[0] - 1;
        left[0] = rest;
        cudaGraphSetConditional(handle, rest > 0 ? 1u : 0u);
    }
}
