// cuda_emu.h: CUDA's execution model on the host CPU (gpusvm kernel emulator).
//
// A generated wrapper includes this header, then one .cu file, then a kernel
// table; g++ builds it into a shared object that Python drives through ctypes
// (see gpusvm_emulator/__init__.py).  Only one translation unit may include
// this header: it defines the builtins, the scheduler and the entry points.
//
// Execution model:
//   * one OS worker thread per core takes blocks from an atomic counter;
//   * every CUDA thread of a block is a fiber on that worker (hand-written
//     x86-64 context switch, ucontext elsewhere), with an mmap'd stack that
//     has a guard page and is reused across blocks and launches;
//   * __syncthreads and every warp intrinsic are "arrive, then yield until the
//     barrier completes"; results are computed once, when the last participant
//     arrives, and handed to each participant, so fast lanes cannot overwrite
//     data slow lanes still have to read;
//   * when every live thread of a block waits, the launch fails with a message
//     naming where each group of threads waits (never a hang);
//   * __shared__ is per worker (= per running block) thread_local storage;
//     extern __shared__ arrays alias one per-worker byte buffer that is filled
//     with 0xFF before each block (unwritten floats read as NaN).
//
// Built with -fsanitize=thread, fibers are announced to ThreadSanitizer
// (__tsan_create_fiber / __tsan_switch_to_fiber without synchronisation) and
// barriers and block boundaries publish explicit release/acquire pairs, so a
// correct kernel is silent and a racy one is reported.
//
// Limits: no independent thread scheduling inside a warp between barriers;
// __activemask() is "lanes not exited"; no occupancy, register or memory-model
// checks; no PTX inline assembly, textures, cooperative groups or half types.
#ifndef GPUSVM_CUDA_EMU_H
#define GPUSVM_CUDA_EMU_H

// ---- standard headers first: the CUDA keyword macros below (__noinline__ in
// particular) would break libstdc++ headers included after them.  Kernels
// written for NVRTC include no standard headers; the usual C ones are here.
#include <algorithm>
#include <atomic>
#include <bit>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <source_location>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__SANITIZE_THREAD__)
#  define GPUSVM_EMU_TSAN 1
#  include <sanitizer/tsan_interface.h>
#else
#  define GPUSVM_EMU_TSAN 0
#endif

#if defined(__x86_64__) && !defined(GPUSVM_EMU_UCONTEXT)
#  define GPUSVM_EMU_ASM_SWITCH 1
#else
#  define GPUSVM_EMU_ASM_SWITCH 0
#  include <ucontext.h>
#endif

// Emulator internals: never inlined into kernels, never instrumented by TSAN
// (helpers are always inlined into internals, so uninstrumented as well).
#define GPUSVM_EMU_INTERNAL __attribute__((noinline, no_sanitize("thread")))
#define GPUSVM_EMU_HELPER inline __attribute__((always_inline, no_sanitize("thread")))
#define GPUSVM_EMU_EXPORT extern "C" __attribute__((visibility("default"), no_sanitize("thread")))

// =========================================================================
// CUDA keywords
// =========================================================================
#define GPUSVM_EMULATOR 1
#ifndef __CUDACC__
#  define __CUDACC__ 1
#endif
#ifndef __CUDACC_RTC__
#  define __CUDACC_RTC__ 1
#endif
#ifndef __CUDA_ARCH__
#  define __CUDA_ARCH__ 800
#endif
#define __global__
#define __device__
#define __host__
#define __constant__
#define __managed__
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
#define __shared__ thread_local

// =========================================================================
// vector types and builtins
// =========================================================================
struct uint3 { unsigned int x, y, z; };
struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1) : x(x_), y(y_), z(z_) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const { return uint3{x, y, z}; }
};

#define GPUSVM_EMU_VEC2(T, N, A) \
    struct __attribute__((aligned(A))) N##2 { T x, y; }; \
    inline N##2 make_##N##2(T x, T y) { return N##2{x, y}; }
#define GPUSVM_EMU_VEC3(T, N) \
    struct N##3 { T x, y, z; }; \
    inline N##3 make_##N##3(T x, T y, T z) { return N##3{x, y, z}; }
#define GPUSVM_EMU_VEC4(T, N, A) \
    struct __attribute__((aligned(A))) N##4 { T x, y, z, w; }; \
    inline N##4 make_##N##4(T x, T y, T z, T w) { return N##4{x, y, z, w}; }
GPUSVM_EMU_VEC2(float, float, 8)
GPUSVM_EMU_VEC3(float, float)
GPUSVM_EMU_VEC4(float, float, 16)
GPUSVM_EMU_VEC2(double, double, 16)
GPUSVM_EMU_VEC3(double, double)
GPUSVM_EMU_VEC4(double, double, 16)
GPUSVM_EMU_VEC2(int, int, 8)
GPUSVM_EMU_VEC3(int, int)
GPUSVM_EMU_VEC4(int, int, 16)
GPUSVM_EMU_VEC2(unsigned int, uint, 8)
GPUSVM_EMU_VEC4(unsigned int, uint, 16)
GPUSVM_EMU_VEC2(long long, longlong, 16)
GPUSVM_EMU_VEC2(unsigned long long, ulonglong, 16)
inline uint3 make_uint3(unsigned int x, unsigned int y, unsigned int z) { return uint3{x, y, z}; }
#undef GPUSVM_EMU_VEC2
#undef GPUSVM_EMU_VEC3
#undef GPUSVM_EMU_VEC4

// Per OS worker thread; the scheduler sets threadIdx at every fiber switch and
// the other three once per block.
thread_local uint3 threadIdx;
thread_local uint3 blockIdx;
thread_local dim3 blockDim;
thread_local dim3 gridDim;
constexpr int warpSize = 32;

// =========================================================================
// runtime
// =========================================================================
namespace gpusvm_emu {

using Loc = std::source_location;

enum Op : uint8_t {
    OP_SYNCTHREADS, OP_SYNCTHREADS_COUNT, OP_SYNCTHREADS_AND, OP_SYNCTHREADS_OR,
    OP_SYNCWARP, OP_SHFL, OP_SHFL_UP, OP_SHFL_DOWN, OP_SHFL_XOR,
    OP_BALLOT, OP_ANY, OP_ALL, OP_MATCH_ANY, OP_MATCH_ALL,
    OP_REDUCE_ADD, OP_REDUCE_MIN_U, OP_REDUCE_MAX_U, OP_REDUCE_MIN_I, OP_REDUCE_MAX_I,
    OP_REDUCE_AND, OP_REDUCE_OR, OP_REDUCE_XOR,
};

static GPUSVM_EMU_INTERNAL const char* op_name(int op) {
    switch (op) {
    case OP_SYNCTHREADS: return "__syncthreads";
    case OP_SYNCTHREADS_COUNT: return "__syncthreads_count";
    case OP_SYNCTHREADS_AND: return "__syncthreads_and";
    case OP_SYNCTHREADS_OR: return "__syncthreads_or";
    case OP_SYNCWARP: return "__syncwarp";
    case OP_SHFL: return "__shfl_sync";
    case OP_SHFL_UP: return "__shfl_up_sync";
    case OP_SHFL_DOWN: return "__shfl_down_sync";
    case OP_SHFL_XOR: return "__shfl_xor_sync";
    case OP_BALLOT: return "__ballot_sync";
    case OP_ANY: return "__any_sync";
    case OP_ALL: return "__all_sync";
    case OP_MATCH_ANY: return "__match_any_sync";
    case OP_MATCH_ALL: return "__match_all_sync";
    case OP_REDUCE_ADD: return "__reduce_add_sync";
    case OP_REDUCE_MIN_U: case OP_REDUCE_MIN_I: return "__reduce_min_sync";
    case OP_REDUCE_MAX_U: case OP_REDUCE_MAX_I: return "__reduce_max_sync";
    case OP_REDUCE_AND: return "__reduce_and_sync";
    case OP_REDUCE_OR: return "__reduce_or_sync";
    case OP_REDUCE_XOR: return "__reduce_xor_sync";
    }
    return "?";
}

enum class St : uint8_t { Ready, WaitBlock, WaitWarp, Done, Trapped };

struct Fiber;
struct Worker;

// ---- context switch --------------------------------------------------------
#if GPUSVM_EMU_ASM_SWITCH
extern "C" __attribute__((visibility("hidden"))) void gpusvm_emu_ctx_switch(void** save_sp, void* load_sp);
extern "C" __attribute__((visibility("hidden"))) void gpusvm_emu_fiber_trampoline();
// Saves callee-saved registers, MXCSR and the x87 control word on the current
// stack, stores the stack pointer in *save_sp, then restores the same from
// load_sp.  A fresh fiber "returns" into the trampoline, which calls
// r13(r12) and never returns.
asm(R"(
    .pushsection .text
    .p2align 4
    .globl gpusvm_emu_ctx_switch
    .hidden gpusvm_emu_ctx_switch
    .type gpusvm_emu_ctx_switch, @function
gpusvm_emu_ctx_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size gpusvm_emu_ctx_switch, .-gpusvm_emu_ctx_switch

    .p2align 4
    .globl gpusvm_emu_fiber_trampoline
    .hidden gpusvm_emu_fiber_trampoline
    .type gpusvm_emu_fiber_trampoline, @function
gpusvm_emu_fiber_trampoline:
    movq %r12, %rdi
    callq *%r13
    ud2
    .size gpusvm_emu_fiber_trampoline, .-gpusvm_emu_fiber_trampoline
    .popsection
)");

struct Ctx { void* sp = nullptr; };

static GPUSVM_EMU_HELPER void ctx_switch(Ctx* from, Ctx* to) { gpusvm_emu_ctx_switch(&from->sp, to->sp); }

static GPUSVM_EMU_INTERNAL void ctx_init(Ctx* c, unsigned char* lo, size_t size, void (*entry)(Fiber*), Fiber* arg) {
    uintptr_t top = (reinterpret_cast<uintptr_t>(lo) + size) & ~uintptr_t(15);
    uint64_t* s = reinterpret_cast<uint64_t*>(top);
    uint32_t mxcsr; uint16_t fpucw;
    asm volatile("stmxcsr %0" : "=m"(mxcsr));
    asm volatile("fnstcw %0" : "=m"(fpucw));
    s[-1] = 0;
    s[-2] = 0;
    s[-3] = reinterpret_cast<uint64_t>(&gpusvm_emu_fiber_trampoline);  // return address
    s[-4] = 0;                                      // rbp
    s[-5] = 0;                                      // rbx
    s[-6] = reinterpret_cast<uint64_t>(arg);        // r12: argument
    s[-7] = reinterpret_cast<uint64_t>(entry);      // r13: entry point
    s[-8] = 0;                                      // r14
    s[-9] = 0;                                      // r15
    s[-10] = uint64_t(mxcsr) | (uint64_t(fpucw) << 32);
    c->sp = &s[-10];
}
#else
struct Ctx { ucontext_t uc; };

static GPUSVM_EMU_HELPER void ctx_switch(Ctx* from, Ctx* to) { swapcontext(&from->uc, &to->uc); }

static GPUSVM_EMU_INTERNAL void uc_entry(unsigned hi, unsigned lo) {
    uintptr_t p = (uintptr_t(hi) << 32) | uintptr_t(lo);
    auto* pair = reinterpret_cast<std::pair<void (*)(Fiber*), Fiber*>*>(p);
    pair->first(pair->second);
    abort();
}

static GPUSVM_EMU_INTERNAL void ctx_init(Ctx* c, unsigned char* lo, size_t size, void (*entry)(Fiber*), Fiber* arg) {
    auto* start = new std::pair<void (*)(Fiber*), Fiber*>(entry, arg);   // small leak per reset
    getcontext(&c->uc);
    c->uc.uc_stack.ss_sp = lo;
    c->uc.uc_stack.ss_size = size;
    c->uc.uc_link = nullptr;
    uintptr_t p = reinterpret_cast<uintptr_t>(start);
    makecontext(&c->uc, reinterpret_cast<void (*)()>(&uc_entry), 2, unsigned(p >> 32), unsigned(p & 0xffffffffu));
}
#endif

// ---- ThreadSanitizer annotations ------------------------------------------
#if GPUSVM_EMU_TSAN
struct Token { unsigned refs; };
static GPUSVM_EMU_HELPER void tsan_switch(void* f) { __tsan_switch_to_fiber(f, __tsan_switch_to_fiber_no_sync); }
static GPUSVM_EMU_HELPER void tsan_acquire(void* a) { __tsan_acquire(a); }
static GPUSVM_EMU_HELPER void tsan_release(void* a) { __tsan_release(a); }
static GPUSVM_EMU_INTERNAL Token* token_new() { Token* t = static_cast<Token*>(malloc(sizeof(Token))); t->refs = 0; return t; }
// Acquire what every participant released at the barrier; the last one frees
// the token, which also makes TSAN forget its clock.
static GPUSVM_EMU_INTERNAL void token_acquire(void* tok) {
    if (!tok) return;
    Token* t = static_cast<Token*>(tok);
    __tsan_acquire(t);
    if (--t->refs == 0) free(t);
}
static char g_fence_token;
#else
struct Token { unsigned refs; };
static GPUSVM_EMU_HELPER void tsan_switch(void*) {}
static GPUSVM_EMU_HELPER void tsan_acquire(void*) {}
static GPUSVM_EMU_HELPER void tsan_release(void*) {}
static GPUSVM_EMU_HELPER Token* token_new() { return nullptr; }
static GPUSVM_EMU_HELPER void token_acquire(void*) {}
#endif

// ---- data structures --------------------------------------------------------
struct Group {                    // one pending warp-level operation
    bool active = false;
    uint8_t op = 0;
    unsigned mask = 0, arrived = 0;
    const char* file = nullptr;
    unsigned line = 0;
    Token* token = nullptr;
    uint64_t val[32];
    int arg[32];
    int width[32];
};

struct Fiber {                    // one CUDA thread slot of a worker
    Ctx ctx;
    unsigned char* map = nullptr;
    size_t map_len = 0;
    Worker* w = nullptr;
    unsigned index = 0;           // linear thread index inside the block
    uint3 tid{0, 0, 0};
    St state = St::Done;
    uint8_t op = 0;
    const char* file = nullptr;
    unsigned line = 0;
    Group* group = nullptr;
    uint64_t result = 0;
    Token* token = nullptr;
    void* tsan = nullptr;
};

using Invoker = void (*)(void* fn, void** args);

struct KernelEntry {
    std::string name;
    void* fn;
    Invoker invoke;
    std::string signature;
    int nargs;
};

struct Launch {
    const KernelEntry* k = nullptr;
    const char* name = "";
    void** args = nullptr;
    dim3 grid, block;
    size_t shmem = 0;
    unsigned long long nblocks = 0;
    unsigned nthreads = 0;
    std::atomic<unsigned long long> next{0};
    std::atomic<bool> abort{false};
    pthread_mutex_t err_m = PTHREAD_MUTEX_INITIALIZER;
    std::string error;
};

// Internal state is touched only by GPUSVM_EMU_INTERNAL functions, in raw
// arrays: instrumented std:: helpers would show TSAN the (deliberately
// unsynchronised) fiber switches as races.
struct Worker {
    int index = 0;
    Fiber** fibers = nullptr;     // fiber slots, grown to the largest block
    unsigned nfibers = 0;
    Ctx sched;
    void* sched_tsan = nullptr;
    Fiber* cur = nullptr;
    Launch* launch = nullptr;
    unsigned nthreads = 0, live = 0;
    Fiber** rq = nullptr;         // ready ring of nfibers slots; each fiber at most once
    unsigned rq_head = 0, rq_count = 0;
    // block barrier state
    unsigned bwait = 0, btrue = 0;
    bool bsame = true;
    uint8_t bop = 0;
    const char* bfile = nullptr;
    unsigned bline = 0;
    Token* btoken = nullptr;
    Group** groups = nullptr;     // 32 slots per warp (a lane waits in one group at most)
    unsigned char* ngroups = nullptr;
    unsigned nwarps = 0;
    unsigned char* dyn = nullptr;
    size_t dyn_cap = 0;
    bool failed = false;
    bool unwinding = false;
    char error[4096];
    char tok_start = 0, tok_end = 0;   // TSAN: block boundary sync addresses
};

static constexpr size_t kMaxDynamicShared = 232448;   // 227 KiB, as on sm_80/sm_90

static thread_local Worker* t_worker = nullptr;

static GPUSVM_EMU_HELPER Fiber* rq_pop(Worker* w) {
    if (!w->rq_count) return nullptr;
    Fiber* f = w->rq[w->rq_head];
    if (++w->rq_head == w->nfibers) w->rq_head = 0;
    --w->rq_count;
    return f;
}

static GPUSVM_EMU_HELPER void rq_push(Worker* w, Fiber* f) {
    unsigned i = w->rq_head + w->rq_count;
    w->rq[i >= w->nfibers ? i - w->nfibers : i] = f;
    ++w->rq_count;
}

static std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
static std::string fmt(const char* f, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, f);
    vsnprintf(buf, sizeof buf, f, ap);
    va_end(ap);
    return buf;
}

static std::string lanes_text(unsigned m) {
    std::string s;
    for (int i = 0; i < 32;) {
        if (!((m >> i) & 1)) { ++i; continue; }
        int j = i;
        while (j + 1 < 32 && ((m >> (j + 1)) & 1)) ++j;
        if (!s.empty()) s += ",";
        s += (i == j) ? fmt("%d", i) : fmt("%d-%d", i, j);
        i = j + 1;
    }
    return s;
}


// ---- switching -----------------------------------------------------------------
// A failed block is unwound: the scheduler resumes each unfinished fiber once,
// which publishes its accesses to TSAN and returns at once (then it is reset).
[[noreturn]] static GPUSVM_EMU_INTERNAL void unwind(Fiber* f) {
    Worker* w = f->w;
    tsan_release(&w->tok_end);
    f->state = St::Trapped;
    w->cur = nullptr;
    tsan_switch(w->sched_tsan);
    ctx_switch(&f->ctx, &w->sched);
    abort();  // unreachable: an unwound fiber is reset, never resumed
}

// Leave fiber f (blocked or finished): run the next ready fiber of the block,
// or return to the scheduler when none is ready.
static GPUSVM_EMU_INTERNAL void switch_away(Fiber* f) {
    Worker* w = f->w;
    Fiber* n = rq_pop(w);
    if (n) {
        w->cur = n;
        threadIdx = n->tid;
        tsan_switch(n->tsan);
        ctx_switch(&f->ctx, &n->ctx);
    } else {
        w->cur = nullptr;
        tsan_switch(w->sched_tsan);
        ctx_switch(&f->ctx, &w->sched);
    }
    if (w->unwinding) unwind(f);
}

// Abort the block from inside a fiber; the scheduler resets the fiber later.
[[noreturn]] static GPUSVM_EMU_INTERNAL void fiber_fail(const char* format, ...)
    __attribute__((format(printf, 1, 2)));
[[noreturn]] static GPUSVM_EMU_INTERNAL void fiber_fail(const char* format, ...) {
    Worker* w = t_worker;
    Fiber* f = w->cur;
    if (!w->failed) {
        w->failed = true;
        int n = snprintf(w->error, sizeof w->error, "kernel '%s', block (%u,%u,%u), thread (%u,%u,%u): ",
                         w->launch->name, blockIdx.x, blockIdx.y, blockIdx.z, f->tid.x, f->tid.y, f->tid.z);
        if (n < 0 || size_t(n) >= sizeof w->error) n = 0;
        va_list ap;
        va_start(ap, format);
        vsnprintf(w->error + n, sizeof w->error - size_t(n), format, ap);
        va_end(ap);
    }
    f->state = St::Trapped;
    w->cur = nullptr;
    tsan_release(&w->tok_end);
    tsan_switch(w->sched_tsan);
    ctx_switch(&f->ctx, &w->sched);
    unwind(f);
}

// ---- block barrier ---------------------------------------------------------------
static GPUSVM_EMU_INTERNAL void complete_block(Worker* w, Fiber* self) {
    uint64_t r = 0;
    switch (w->bop) {
    case OP_SYNCTHREADS_COUNT: r = w->btrue; break;
    case OP_SYNCTHREADS_AND: r = (w->btrue == w->bwait); break;
    case OP_SYNCTHREADS_OR: r = (w->btrue != 0); break;
    default: break;
    }
    Token* tok = w->btoken;
    if (tok) tok->refs = w->bwait;
    for (unsigned i = 0; i < w->nthreads; ++i) {
        Fiber* t = w->fibers[i];
        if (t->state != St::WaitBlock) continue;
        t->result = r;
        t->token = tok;
        t->state = St::Ready;
        if (t != self) rq_push(w, t);
    }
    w->bwait = 0;
    w->btrue = 0;
    w->btoken = nullptr;
}

static GPUSVM_EMU_INTERNAL int block_sync(uint8_t op, int pred, const char* file, unsigned line) {
    Worker* w = t_worker;
    Fiber* f = w->cur;
    if (w->bwait == 0) {
        w->bop = op; w->bfile = file; w->bline = line; w->bsame = true; w->btrue = 0;
        w->btoken = token_new();
    } else if (w->bop != op || w->bline != line || (w->bfile != file && strcmp(w->bfile, file) != 0)) {
        w->bsame = false;
    }
    ++w->bwait;
    if (pred) ++w->btrue;
    f->state = St::WaitBlock; f->op = op; f->file = file; f->line = line;
    tsan_release(w->btoken);
    if (w->bwait == w->live && w->bsame) complete_block(w, f);
    else switch_away(f);
    token_acquire(f->token);
    f->token = nullptr;
    return int(f->result);
}

// ---- warp operations ------------------------------------------------------------
static GPUSVM_EMU_HELPER bool shfl_src(int op, unsigned lane, int b, int width, unsigned* src) {
    unsigned seg = lane & ~unsigned(width - 1);
    unsigned last = seg + unsigned(width) - 1;
    unsigned bv = unsigned(b) & 31u;
    int j;
    bool ok;
    switch (op) {
    case OP_SHFL: j = int(seg | (unsigned(b) & unsigned(width - 1))); ok = true; break;
    case OP_SHFL_UP: j = int(lane) - int(bv); ok = j >= int(seg); break;
    case OP_SHFL_DOWN: j = int(lane + bv); ok = j <= int(last); break;
    default: j = int(lane ^ bv); ok = j <= int(last); break;   // xor
    }
    *src = ok ? unsigned(j) : lane;
    return ok;
}

static GPUSVM_EMU_INTERNAL void complete_group(Worker* w, unsigned warp, Group* g, Fiber* self) {
    const unsigned mask = g->mask;
    uint64_t ballot = 0, acc = 0;
    bool all_equal = true;
    int first = __builtin_ctz(mask);
    switch (g->op) {
    case OP_BALLOT: case OP_ANY: case OP_ALL:
        for (int l = 0; l < 32; ++l)
            if (((mask >> l) & 1) && g->val[l]) ballot |= 1ull << l;
        break;
    case OP_MATCH_ALL:
        for (int l = 0; l < 32; ++l)
            if (((mask >> l) & 1) && g->val[l] != g->val[first]) all_equal = false;
        break;
    case OP_REDUCE_ADD: case OP_REDUCE_MIN_U: case OP_REDUCE_MAX_U: case OP_REDUCE_MIN_I:
    case OP_REDUCE_MAX_I: case OP_REDUCE_AND: case OP_REDUCE_OR: case OP_REDUCE_XOR: {
        uint32_t a = uint32_t(g->val[first]);
        for (int l = first + 1; l < 32; ++l) {
            if (!((mask >> l) & 1)) continue;
            uint32_t v = uint32_t(g->val[l]);
            switch (g->op) {
            case OP_REDUCE_ADD: a += v; break;
            case OP_REDUCE_MIN_U: a = std::min(a, v); break;
            case OP_REDUCE_MAX_U: a = std::max(a, v); break;
            case OP_REDUCE_MIN_I: a = uint32_t(std::min(int32_t(a), int32_t(v))); break;
            case OP_REDUCE_MAX_I: a = uint32_t(std::max(int32_t(a), int32_t(v))); break;
            case OP_REDUCE_AND: a &= v; break;
            case OP_REDUCE_OR: a |= v; break;
            default: a ^= v; break;
            }
        }
        acc = a;
        break;
    }
    default: break;
    }
    Token* tok = g->token;
    if (tok) tok->refs = unsigned(__builtin_popcount(mask));
    for (unsigned l = 0; l < 32; ++l) {
        if (!((mask >> l) & 1)) continue;
        Fiber* t = w->fibers[warp * 32 + l];
        uint64_t r = 0;
        switch (g->op) {
        case OP_SHFL: case OP_SHFL_UP: case OP_SHFL_DOWN: case OP_SHFL_XOR: {
            unsigned src;
            shfl_src(g->op, l, g->arg[l], g->width[l], &src);
            // reading a lane outside the mask is undefined in CUDA: all ones
            r = ((mask >> src) & 1) ? g->val[src] : ~uint64_t(0);
            break;
        }
        case OP_BALLOT: r = ballot; break;
        case OP_ANY: r = ballot != 0; break;
        case OP_ALL: r = ballot == mask; break;
        case OP_MATCH_ANY:
            for (unsigned k = 0; k < 32; ++k)
                if (((mask >> k) & 1) && g->val[k] == g->val[l]) r |= 1ull << k;
            break;
        case OP_MATCH_ALL: r = all_equal ? (uint64_t(mask) | (1ull << 32)) : 0; break;
        case OP_SYNCWARP: break;
        default: r = acc; break;
        }
        t->result = r;
        t->token = tok;
        t->group = nullptr;
        t->state = St::Ready;
        if (t != self) rq_push(w, t);
    }
    g->active = false;
    g->token = nullptr;
}

static GPUSVM_EMU_INTERNAL uint64_t warp_op(uint8_t op, unsigned mask, uint64_t v, int arg, int width,
                                            const char* file, unsigned line) {
    Worker* w = t_worker;
    Fiber* f = w->cur;
    const unsigned lane = f->index & 31u, warp = f->index >> 5;
    if (!((mask >> lane) & 1))
        fiber_fail("%s at %s:%u called with mask 0x%08x, which does not include the calling lane %u",
                   op_name(op), file, line, mask, lane);
    if (op >= OP_SHFL && op <= OP_SHFL_XOR && (width < 1 || width > 32 || (width & (width - 1))))
        fiber_fail("%s at %s:%u: width %d is not a power of 2 in [1, 32]", op_name(op), file, line, width);
    if (op == OP_SYNCWARP && mask == (1u << lane)) return 0;
    Group** gs = w->groups + warp * 32;
    Group* g = nullptr;
    Group* spare = nullptr;
    for (unsigned k = 0; k < w->ngroups[warp]; ++k) {
        Group* p = gs[k];
        if (p->active && p->mask == mask) { g = p; break; }
        if (!p->active && !spare) spare = p;
    }
    if (!g) {
        if (!spare) { spare = new Group(); gs[w->ngroups[warp]++] = spare; }
        g = spare;
        g->active = true; g->op = op; g->mask = mask; g->arrived = 0; g->file = file; g->line = line;
        g->token = token_new();
    } else if (g->op != op) {
        fiber_fail("lanes of warp %u call different warp intrinsics with the same mask 0x%08x: "
                   "%s at %s:%u and %s at %s:%u", warp, mask, op_name(g->op), g->file, g->line, op_name(op), file, line);
    }
    g->val[lane] = v;
    g->arg[lane] = arg;
    g->width[lane] = width;
    g->arrived |= 1u << lane;
    tsan_release(g->token);
    if (g->arrived == mask) {
        complete_group(w, warp, g, f);
    } else {
        f->state = St::WaitWarp; f->op = op; f->file = file; f->line = line; f->group = g;
        switch_away(f);
    }
    token_acquire(f->token);
    f->token = nullptr;
    return f->result;
}

static GPUSVM_EMU_INTERNAL unsigned active_mask() {
    Worker* w = t_worker;
    Fiber* f = w->cur;
    unsigned warp = f->index >> 5, m = 0;
    for (unsigned l = 0; l < 32; ++l) {
        unsigned i = warp * 32 + l;
        if (i < w->nthreads && w->fibers[i]->state != St::Done && w->fibers[i]->state != St::Trapped) m |= 1u << l;
    }
    return m;
}

[[noreturn]] static GPUSVM_EMU_INTERNAL void trap(const char* file, unsigned line) {
    fiber_fail("__trap() at %s:%u", file, line);
}

static GPUSVM_EMU_INTERNAL void thread_fence() {
    std::atomic_thread_fence(std::memory_order_seq_cst);
#if GPUSVM_EMU_TSAN
    // TSAN does not model stand-alone fences: order all fences instead.
    __tsan_release(&g_fence_token);
    __tsan_acquire(&g_fence_token);
#endif
}

static GPUSVM_EMU_INTERNAL unsigned char* dynamic_shared() { return t_worker->dyn; }

template <class T>
static inline uint64_t to_bits(T v) {
    uint64_t b = 0;
    std::memcpy(&b, &v, sizeof(T));
    return b;
}

template <class T>
static inline T from_bits(uint64_t b) {
    T v;
    std::memcpy(&v, &b, sizeof(T));
    return v;
}

// ---- kernel table ------------------------------------------------------------------
template <class T>
static const char* pretty_type() { return __PRETTY_FUNCTION__; }

template <class T>
static std::string type_name() {
    std::string_view p = pretty_type<T>();
    size_t s = p.find("[with T = ");
    size_t e = p.rfind(']');
    if (s == std::string_view::npos || e == std::string_view::npos) return "?";
    s += 10;
    return std::string(p.substr(s, e - s));
}

template <class... A, size_t... I>
static GPUSVM_EMU_HELPER void invoke_unpacked(void* fn, void** args, std::index_sequence<I...>) {
    reinterpret_cast<void (*)(A...)>(fn)(*static_cast<std::remove_cv_t<A>*>(args[I])...);
}

template <class... A>
static GPUSVM_EMU_INTERNAL void invoke(void* fn, void** args) {
    invoke_unpacked<A...>(fn, args, std::index_sequence_for<A...>{});
}

// Records the parameter types as "type|size;type|size;..."
template <class... A>
static KernelEntry make_entry(const char* name, void (*fn)(A...)) {
    KernelEntry e;
    e.name = name;
    e.fn = reinterpret_cast<void*>(fn);
    e.invoke = &invoke<A...>;
    e.nargs = int(sizeof...(A));
    std::string sig;
    ((sig += (sig.empty() ? "" : ";") + type_name<A>() + "|" + std::to_string(sizeof(A))), ...);
    e.signature = sig;
    return e;
}

}  // namespace gpusvm_emu

// Defined by the generated wrapper after the kernel source.
static const std::vector<gpusvm_emu::KernelEntry>& gpusvm_emu_kernel_table();

// =========================================================================
// CUDA device API
// =========================================================================
#define GPUSVM_EMU_LOC gpusvm_emu::Loc loc = gpusvm_emu::Loc::current()
#define GPUSVM_EMU_AT loc.file_name(), loc.line()

inline void __syncthreads(GPUSVM_EMU_LOC) {
    gpusvm_emu::block_sync(gpusvm_emu::OP_SYNCTHREADS, 0, GPUSVM_EMU_AT);
}
inline int __syncthreads_count(int pred, GPUSVM_EMU_LOC) {
    return gpusvm_emu::block_sync(gpusvm_emu::OP_SYNCTHREADS_COUNT, pred, GPUSVM_EMU_AT);
}
inline int __syncthreads_and(int pred, GPUSVM_EMU_LOC) {
    return gpusvm_emu::block_sync(gpusvm_emu::OP_SYNCTHREADS_AND, pred, GPUSVM_EMU_AT);
}
inline int __syncthreads_or(int pred, GPUSVM_EMU_LOC) {
    return gpusvm_emu::block_sync(gpusvm_emu::OP_SYNCTHREADS_OR, pred, GPUSVM_EMU_AT);
}
inline void __syncwarp(unsigned mask = 0xffffffffu, GPUSVM_EMU_LOC) {
    gpusvm_emu::warp_op(gpusvm_emu::OP_SYNCWARP, mask, 0, 0, 32, GPUSVM_EMU_AT);
}

#define GPUSVM_EMU_SHFL(T)                                                                          \
    inline T __shfl_sync(unsigned mask, T var, int srcLane, int width = warpSize, GPUSVM_EMU_LOC) { \
        return gpusvm_emu::from_bits<T>(gpusvm_emu::warp_op(gpusvm_emu::OP_SHFL, mask,              \
            gpusvm_emu::to_bits(var), srcLane, width, GPUSVM_EMU_AT));                              \
    }                                                                                               \
    inline T __shfl_up_sync(unsigned mask, T var, unsigned int delta, int width = warpSize,         \
                            GPUSVM_EMU_LOC) {                                                       \
        return gpusvm_emu::from_bits<T>(gpusvm_emu::warp_op(gpusvm_emu::OP_SHFL_UP, mask,           \
            gpusvm_emu::to_bits(var), int(delta), width, GPUSVM_EMU_AT));                           \
    }                                                                                               \
    inline T __shfl_down_sync(unsigned mask, T var, unsigned int delta, int width = warpSize,       \
                              GPUSVM_EMU_LOC) {                                                     \
        return gpusvm_emu::from_bits<T>(gpusvm_emu::warp_op(gpusvm_emu::OP_SHFL_DOWN, mask,         \
            gpusvm_emu::to_bits(var), int(delta), width, GPUSVM_EMU_AT));                           \
    }                                                                                               \
    inline T __shfl_xor_sync(unsigned mask, T var, int laneMask, int width = warpSize,              \
                             GPUSVM_EMU_LOC) {                                                      \
        return gpusvm_emu::from_bits<T>(gpusvm_emu::warp_op(gpusvm_emu::OP_SHFL_XOR, mask,          \
            gpusvm_emu::to_bits(var), laneMask, width, GPUSVM_EMU_AT));                             \
    }                                                                                               \
    inline unsigned __match_any_sync(unsigned mask, T value, GPUSVM_EMU_LOC) {                     \
        return unsigned(gpusvm_emu::warp_op(gpusvm_emu::OP_MATCH_ANY, mask,                         \
            gpusvm_emu::to_bits(value), 0, 32, GPUSVM_EMU_AT));                                     \
    }                                                                                               \
    inline unsigned __match_all_sync(unsigned mask, T value, int* pred, GPUSVM_EMU_LOC) {          \
        uint64_t r = gpusvm_emu::warp_op(gpusvm_emu::OP_MATCH_ALL, mask,                            \
            gpusvm_emu::to_bits(value), 0, 32, GPUSVM_EMU_AT);                                      \
        *pred = int(r >> 32);                                                                       \
        return unsigned(r);                                                                         \
    }
GPUSVM_EMU_SHFL(int)
GPUSVM_EMU_SHFL(unsigned int)
GPUSVM_EMU_SHFL(long)
GPUSVM_EMU_SHFL(unsigned long)
GPUSVM_EMU_SHFL(long long)
GPUSVM_EMU_SHFL(unsigned long long)
GPUSVM_EMU_SHFL(float)
GPUSVM_EMU_SHFL(double)
#undef GPUSVM_EMU_SHFL

inline unsigned __ballot_sync(unsigned mask, int pred, GPUSVM_EMU_LOC) {
    return unsigned(gpusvm_emu::warp_op(gpusvm_emu::OP_BALLOT, mask, pred != 0, 0, 32, GPUSVM_EMU_AT));
}
inline int __any_sync(unsigned mask, int pred, GPUSVM_EMU_LOC) {
    return int(gpusvm_emu::warp_op(gpusvm_emu::OP_ANY, mask, pred != 0, 0, 32, GPUSVM_EMU_AT));
}
inline int __all_sync(unsigned mask, int pred, GPUSVM_EMU_LOC) {
    return int(gpusvm_emu::warp_op(gpusvm_emu::OP_ALL, mask, pred != 0, 0, 32, GPUSVM_EMU_AT));
}
inline unsigned __reduce_add_sync(unsigned mask, unsigned value, GPUSVM_EMU_LOC) {
    return unsigned(gpusvm_emu::warp_op(gpusvm_emu::OP_REDUCE_ADD, mask, value, 0, 32, GPUSVM_EMU_AT));
}
inline int __reduce_add_sync(unsigned mask, int value, GPUSVM_EMU_LOC) {
    return int(uint32_t(gpusvm_emu::warp_op(gpusvm_emu::OP_REDUCE_ADD, mask, uint32_t(value), 0, 32, GPUSVM_EMU_AT)));
}
inline unsigned __reduce_min_sync(unsigned mask, unsigned value, GPUSVM_EMU_LOC) {
    return unsigned(gpusvm_emu::warp_op(gpusvm_emu::OP_REDUCE_MIN_U, mask, value, 0, 32, GPUSVM_EMU_AT));
}
inline int __reduce_min_sync(unsigned mask, int value, GPUSVM_EMU_LOC) {
    return int(uint32_t(gpusvm_emu::warp_op(gpusvm_emu::OP_REDUCE_MIN_I, mask, uint32_t(value), 0, 32, GPUSVM_EMU_AT)));
}
inline unsigned __reduce_max_sync(unsigned mask, unsigned value, GPUSVM_EMU_LOC) {
    return unsigned(gpusvm_emu::warp_op(gpusvm_emu::OP_REDUCE_MAX_U, mask, value, 0, 32, GPUSVM_EMU_AT));
}
inline int __reduce_max_sync(unsigned mask, int value, GPUSVM_EMU_LOC) {
    return int(uint32_t(gpusvm_emu::warp_op(gpusvm_emu::OP_REDUCE_MAX_I, mask, uint32_t(value), 0, 32, GPUSVM_EMU_AT)));
}
inline unsigned __reduce_and_sync(unsigned mask, unsigned value, GPUSVM_EMU_LOC) {
    return unsigned(gpusvm_emu::warp_op(gpusvm_emu::OP_REDUCE_AND, mask, value, 0, 32, GPUSVM_EMU_AT));
}
inline unsigned __reduce_or_sync(unsigned mask, unsigned value, GPUSVM_EMU_LOC) {
    return unsigned(gpusvm_emu::warp_op(gpusvm_emu::OP_REDUCE_OR, mask, value, 0, 32, GPUSVM_EMU_AT));
}
inline unsigned __reduce_xor_sync(unsigned mask, unsigned value, GPUSVM_EMU_LOC) {
    return unsigned(gpusvm_emu::warp_op(gpusvm_emu::OP_REDUCE_XOR, mask, value, 0, 32, GPUSVM_EMU_AT));
}
// Lanes of the caller's warp that have not exited (no independent scheduling).
inline unsigned __activemask() { return gpusvm_emu::active_mask(); }
[[noreturn]] inline void __trap(GPUSVM_EMU_LOC) { gpusvm_emu::trap(GPUSVM_EMU_AT); }
inline void __threadfence() { gpusvm_emu::thread_fence(); }
inline void __threadfence_block() { std::atomic_signal_fence(std::memory_order_seq_cst); }
inline void __threadfence_system() { gpusvm_emu::thread_fence(); }

// ---- bit manipulation ----------------------------------------------------------------
inline int __popc(unsigned int x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(unsigned(x)); }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
inline unsigned int __brev(unsigned int x) {
    x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
    x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
    x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
    return __builtin_bswap32(x);
}
inline int __float_as_int(float x) { return std::bit_cast<int>(x); }
inline float __int_as_float(int x) { return std::bit_cast<float>(x); }
inline unsigned int __float_as_uint(float x) { return std::bit_cast<unsigned int>(x); }
inline float __uint_as_float(unsigned int x) { return std::bit_cast<float>(x); }
inline long long __double_as_longlong(double x) { return std::bit_cast<long long>(x); }
inline double __longlong_as_double(long long x) { return std::bit_cast<double>(x); }

// ---- math ------------------------------------------------------------------------------
using std::isfinite;
using std::isinf;
using std::isnan;
using std::signbit;
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __powf(float a, float b) { return powf(a, b); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }

#define GPUSVM_EMU_MINMAX(T)                        \
    inline T min(T a, T b) { return b < a ? b : a; } \
    inline T max(T a, T b) { return a < b ? b : a; }
GPUSVM_EMU_MINMAX(int)
GPUSVM_EMU_MINMAX(unsigned int)
GPUSVM_EMU_MINMAX(long)
GPUSVM_EMU_MINMAX(unsigned long)
GPUSVM_EMU_MINMAX(long long)
GPUSVM_EMU_MINMAX(unsigned long long)
#undef GPUSVM_EMU_MINMAX
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
template <class A, class B,
          std::enable_if_t<std::is_arithmetic_v<A> && std::is_arithmetic_v<B> && !std::is_same_v<A, B>, int> = 0>
inline std::common_type_t<A, B> min(A a, B b) {
    using C = std::common_type_t<A, B>;
    return min(C(a), C(b));
}
template <class A, class B,
          std::enable_if_t<std::is_arithmetic_v<A> && std::is_arithmetic_v<B> && !std::is_same_v<A, B>, int> = 0>
inline std::common_type_t<A, B> max(A a, B b) {
    using C = std::common_type_t<A, B>;
    return max(C(a), C(b));
}

template <class T>
inline T __ldg(const T* p) { return *p; }

// ---- atomic counting (off unless gpusvm_emu_count_atomics(1)): every atomic of a kernel is
// recorded as (address, linear block, kind), kind 0 for the value-returning atomics (atomicAdd,
// atomicCAS, ...), 1 for gpusvm_emu_red_add (the non-returning reduction, RED on a GPU).  Python
// takes the records after each launch and keeps those on the launch's argument arrays (global
// memory); the others are shared memory.
namespace gpusvm_emu {
struct AtomicEvent { unsigned long long addr; unsigned long long block_kind; };   // block << 1 | kind
static std::atomic<int> g_count_atomics{0};
static pthread_mutex_t g_events_m = PTHREAD_MUTEX_INITIALIZER;
static std::vector<AtomicEvent> g_events;
static GPUSVM_EMU_INTERNAL void note_atomic(const void* p, unsigned kind) {
    const unsigned long long b =
        blockIdx.x + 1ull * gridDim.x * (blockIdx.y + 1ull * gridDim.y * blockIdx.z);
    pthread_mutex_lock(&g_events_m);
    g_events.push_back(AtomicEvent{reinterpret_cast<unsigned long long>(p), (b << 1) | kind});
    pthread_mutex_unlock(&g_events_m);
}
}  // namespace gpusvm_emu
#define GPUSVM_EMU_NOTE(p, kind)                                                          \
    do {                                                                                  \
        if (gpusvm_emu::g_count_atomics.load(std::memory_order_relaxed)) gpusvm_emu::note_atomic((p), (kind)); \
    } while (0)

// ---- atomics (relaxed, like CUDA's; each returns the old value) -------------------
#define GPUSVM_EMU_REF(T, p) std::atomic_ref<T>(*(p))
#define GPUSVM_EMU_RLX std::memory_order_relaxed
inline int atomicAdd(int* p, int v) { GPUSVM_EMU_NOTE(p, 0); return GPUSVM_EMU_REF(int, p).fetch_add(v, GPUSVM_EMU_RLX); }
inline unsigned int atomicAdd(unsigned int* p, unsigned int v) { GPUSVM_EMU_NOTE(p, 0); return GPUSVM_EMU_REF(unsigned int, p).fetch_add(v, GPUSVM_EMU_RLX); }
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
    GPUSVM_EMU_NOTE(p, 0);
    return GPUSVM_EMU_REF(unsigned long long, p).fetch_add(v, GPUSVM_EMU_RLX);
}
inline float atomicAdd(float* p, float v) { GPUSVM_EMU_NOTE(p, 0); return GPUSVM_EMU_REF(float, p).fetch_add(v, GPUSVM_EMU_RLX); }
inline double atomicAdd(double* p, double v) { GPUSVM_EMU_NOTE(p, 0); return GPUSVM_EMU_REF(double, p).fetch_add(v, GPUSVM_EMU_RLX); }
inline int atomicSub(int* p, int v) { GPUSVM_EMU_NOTE(p, 0); return GPUSVM_EMU_REF(int, p).fetch_sub(v, GPUSVM_EMU_RLX); }
inline unsigned int atomicSub(unsigned int* p, unsigned int v) { GPUSVM_EMU_NOTE(p, 0); return GPUSVM_EMU_REF(unsigned int, p).fetch_sub(v, GPUSVM_EMU_RLX); }
#define GPUSVM_EMU_EXCH(T) \
    inline T atomicExch(T* p, T v) { GPUSVM_EMU_NOTE(p, 0); return GPUSVM_EMU_REF(T, p).exchange(v, GPUSVM_EMU_RLX); }
GPUSVM_EMU_EXCH(int)
GPUSVM_EMU_EXCH(unsigned int)
GPUSVM_EMU_EXCH(unsigned long long)
GPUSVM_EMU_EXCH(float)
#define GPUSVM_EMU_CAS(T)                                                             \
    inline T atomicCAS(T* p, T compare, T v) {                                        \
        GPUSVM_EMU_NOTE(p, 0);                                                        \
        GPUSVM_EMU_REF(T, p).compare_exchange_strong(compare, v, GPUSVM_EMU_RLX, GPUSVM_EMU_RLX); \
        return compare;                                                               \
    }
GPUSVM_EMU_CAS(int)
GPUSVM_EMU_CAS(unsigned int)
GPUSVM_EMU_CAS(unsigned long long)
GPUSVM_EMU_CAS(unsigned short)
#define GPUSVM_EMU_MINMAX_ATOMIC(T)                                                        \
    inline T atomicMax(T* p, T v) {                                                        \
        GPUSVM_EMU_NOTE(p, 0);                                                             \
        std::atomic_ref<T> r(*p);                                                          \
        T old = r.load(GPUSVM_EMU_RLX);                                                    \
        while (old < v && !r.compare_exchange_weak(old, v, GPUSVM_EMU_RLX, GPUSVM_EMU_RLX)) {} \
        return old;                                                                        \
    }                                                                                      \
    inline T atomicMin(T* p, T v) {                                                        \
        GPUSVM_EMU_NOTE(p, 0);                                                             \
        std::atomic_ref<T> r(*p);                                                          \
        T old = r.load(GPUSVM_EMU_RLX);                                                    \
        while (v < old && !r.compare_exchange_weak(old, v, GPUSVM_EMU_RLX, GPUSVM_EMU_RLX)) {} \
        return old;                                                                        \
    }
GPUSVM_EMU_MINMAX_ATOMIC(int)
GPUSVM_EMU_MINMAX_ATOMIC(unsigned int)
GPUSVM_EMU_MINMAX_ATOMIC(long long)
GPUSVM_EMU_MINMAX_ATOMIC(unsigned long long)
#define GPUSVM_EMU_BITS_ATOMIC(T)                                                                    \
    inline T atomicAnd(T* p, T v) { GPUSVM_EMU_NOTE(p, 0); return GPUSVM_EMU_REF(T, p).fetch_and(v, GPUSVM_EMU_RLX); }      \
    inline T atomicOr(T* p, T v) { GPUSVM_EMU_NOTE(p, 0); return GPUSVM_EMU_REF(T, p).fetch_or(v, GPUSVM_EMU_RLX); }        \
    inline T atomicXor(T* p, T v) { GPUSVM_EMU_NOTE(p, 0); return GPUSVM_EMU_REF(T, p).fetch_xor(v, GPUSVM_EMU_RLX); }
GPUSVM_EMU_BITS_ATOMIC(int)
GPUSVM_EMU_BITS_ATOMIC(unsigned int)
GPUSVM_EMU_BITS_ATOMIC(unsigned long long)
inline unsigned int atomicInc(unsigned int* p, unsigned int limit) {
    GPUSVM_EMU_NOTE(p, 0);
    std::atomic_ref<unsigned int> r(*p);
    unsigned int old = r.load(GPUSVM_EMU_RLX);
    while (!r.compare_exchange_weak(old, old >= limit ? 0u : old + 1u, GPUSVM_EMU_RLX, GPUSVM_EMU_RLX)) {}
    return old;
}
inline unsigned int atomicDec(unsigned int* p, unsigned int limit) {
    GPUSVM_EMU_NOTE(p, 0);
    std::atomic_ref<unsigned int> r(*p);
    unsigned int old = r.load(GPUSVM_EMU_RLX);
    while (!r.compare_exchange_weak(old, (old == 0u || old > limit) ? limit : old - 1u, GPUSVM_EMU_RLX, GPUSVM_EMU_RLX)) {}
    return old;
}
// The non-returning atomic addition (RED): kernels call it through gpusvm::red_add.
#define GPUSVM_EMU_RED(T) \
    inline void gpusvm_emu_red_add(T* p, T v) { GPUSVM_EMU_NOTE(p, 1); GPUSVM_EMU_REF(T, p).fetch_add(v, GPUSVM_EMU_RLX); }
GPUSVM_EMU_RED(int)
GPUSVM_EMU_RED(unsigned int)
GPUSVM_EMU_RED(unsigned long long)
GPUSVM_EMU_RED(float)
GPUSVM_EMU_RED(double)
#undef GPUSVM_EMU_RED
#undef GPUSVM_EMU_EXCH
#undef GPUSVM_EMU_CAS
#undef GPUSVM_EMU_MINMAX_ATOMIC
#undef GPUSVM_EMU_BITS_ATOMIC

// CUDA graph conditional nodes (CUDA 12.4): a kernel of a WHILE node's body sets the node's
// condition.  The emulator's handle is the address of the node's condition word, which the
// emulated WHILE graph reads after each pass of its body (gpusvm_emulator.streams.WhileGraph).
typedef unsigned long long cudaGraphConditionalHandle;
inline void cudaGraphSetConditional(cudaGraphConditionalHandle handle, unsigned int value) {
    __atomic_store_n(reinterpret_cast<unsigned int*>(static_cast<uintptr_t>(handle)), value,
                     __ATOMIC_RELEASE);
}

// =========================================================================
// scheduler, worker pool, entry points
// =========================================================================
namespace gpusvm_emu {

static GPUSVM_EMU_INTERNAL void thread_exit(Fiber* f) {
    Worker* w = f->w;
    f->state = St::Done;
    --w->live;
    // an exited thread no longer counts for __syncthreads
    if (w->bwait && w->bwait == w->live && w->bsame) complete_block(w, nullptr);
    switch_away(f);
}

// Body of every fiber: run one CUDA thread per block, forever.
static GPUSVM_EMU_INTERNAL void fiber_main(Fiber* f) {
    for (;;) {
        Worker* w = f->w;
        if (w->unwinding) unwind(f);   // reset before it ever ran in the failed block
        tsan_acquire(&w->tok_start);
        const KernelEntry* k = w->launch->k;
        k->invoke(k->fn, w->launch->args);
        tsan_release(&w->tok_end);
        thread_exit(f);
    }
}

static size_t stack_bytes() {
    static size_t bytes = [] {
        size_t kb = GPUSVM_EMU_TSAN ? 512 : 256;
        if (const char* e = getenv("GPUSVM_EMU_STACK_KB")) {
            long v = atol(e);
            if (v >= 16) kb = size_t(v);
        }
        return kb * 1024;
    }();
    return bytes;
}

static GPUSVM_EMU_INTERNAL void fiber_reset(Fiber* f) {
    size_t page = size_t(sysconf(_SC_PAGESIZE));
    ctx_init(&f->ctx, f->map + page, f->map_len - page, &fiber_main, f);
#if GPUSVM_EMU_TSAN
    if (f->tsan) __tsan_destroy_fiber(f->tsan);
    f->tsan = __tsan_create_fiber(0);
    char name[64];
    snprintf(name, sizeof name, "emulated CUDA thread slot %u of worker %d", f->index, f->w->index);
    __tsan_set_fiber_name(f->tsan, name);
#endif
    f->state = St::Done;
    f->group = nullptr;
    f->token = nullptr;
}

static GPUSVM_EMU_INTERNAL bool fiber_create(Worker* w, unsigned index) {
    size_t page = size_t(sysconf(_SC_PAGESIZE));
    size_t len = ((stack_bytes() + page - 1) / page) * page + page;
    void* m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return false;
    mprotect(m, page, PROT_NONE);  // guard page below the stack
    Fiber* f = new Fiber();
    f->map = static_cast<unsigned char*>(m);
    f->map_len = len;
    f->w = w;
    f->index = index;
    fiber_reset(f);
    w->fibers[index] = f;
    return true;
}

static GPUSVM_EMU_INTERNAL std::string deadlock_message(Worker* w) {
    struct Key { St st; uint8_t op; const char* file; unsigned line; unsigned count; Fiber* first; };
    std::vector<Key> keys;
    unsigned exited = 0;
    for (unsigned i = 0; i < w->nthreads; ++i) {
        Fiber* f = w->fibers[i];
        if (f->state == St::Done) { ++exited; continue; }
        bool found = false;
        for (auto& k : keys) {
            if (k.st == f->state && k.op == f->op && k.line == f->line &&
                (k.file == f->file || strcmp(k.file, f->file) == 0)) { ++k.count; found = true; break; }
        }
        if (!found) keys.push_back({f->state, f->op, f->file, f->line, 1, f});
    }
    std::string s = fmt("deadlock in kernel '%s', block (%u,%u,%u): every live thread waits: ",
                        w->launch->name, blockIdx.x, blockIdx.y, blockIdx.z);
    bool all_block = true;
    for (size_t n = 0; n < keys.size(); ++n) {
        const Key& k = keys[n];
        if (n == 12) { s += fmt("; ... (%zu more places)", keys.size() - n); break; }
        if (n) s += "; ";
        s += fmt("%u thread%s in %s at %s:%u", k.count, k.count == 1 ? "" : "s", op_name(k.op), k.file, k.line);
        if (k.st != St::WaitBlock) all_block = false;
        if (k.st == St::WaitWarp && k.first->group) {
            Group* g = k.first->group;
            unsigned warp = k.first->index >> 5;
            unsigned missing = g->mask & ~g->arrived, gone = 0, absent = 0, blocked = 0, elsewhere = 0;
            for (unsigned l = 0; l < 32; ++l) {
                if (!((missing >> l) & 1)) continue;
                unsigned i = warp * 32 + l;
                if (i >= w->nthreads) absent |= 1u << l;
                else if (w->fibers[i]->state == St::Done) gone |= 1u << l;
                else if (w->fibers[i]->state == St::WaitBlock) blocked |= 1u << l;
                else elsewhere |= 1u << l;
            }
            s += fmt(" (warp %u, mask 0x%08x", warp, g->mask);
            if (gone) s += "; lanes " + lanes_text(gone) + " named in the mask have exited";
            if (absent) s += "; lanes " + lanes_text(absent) + fmt(" named in the mask do not exist (block has %u threads)", w->nthreads);
            if (blocked) s += "; lanes " + lanes_text(blocked) + " wait in a block barrier";
            if (elsewhere) s += "; lanes " + lanes_text(elsewhere) + " wait in another warp operation";
            s += ")";
        }
    }
    if (exited) s += fmt("; %u thread%s exited", exited, exited == 1 ? "" : "s");
    if (all_block && keys.size() > 1)
        s += " -- all live threads wait in block barriers, but not in the same one (__syncthreads in divergent code)";
    return s;
}

static GPUSVM_EMU_INTERNAL void run_block(Worker* w, Launch* L, unsigned long long b) {
    const dim3 g = L->grid, bd = L->block;
    blockIdx = uint3{unsigned(b % g.x), unsigned((b / g.x) % g.y), unsigned(b / (uint64_t(g.x) * g.y))};
    blockDim = bd;
    gridDim = g;
    const unsigned n = L->nthreads;
    w->nthreads = n;
    w->live = n;
    w->bwait = 0;
    w->btrue = 0;
    w->btoken = nullptr;
    w->failed = false;
    w->error[0] = 0;
    for (unsigned warp = 0; warp < (n + 31) / 32; ++warp)
        for (unsigned k = 0; k < w->ngroups[warp]; ++k) {
            w->groups[warp * 32 + k]->active = false;
            w->groups[warp * 32 + k]->token = nullptr;
        }
    w->rq_head = 0;
    w->rq_count = 0;
    tsan_acquire(&w->tok_end);
    if (L->shmem) memset(w->dyn, 0xff, L->shmem);
    tsan_release(&w->tok_start);
    for (unsigned i = 0; i < n; ++i) {
        Fiber* f = w->fibers[i];
        f->state = St::Ready;
        f->tid = uint3{i % bd.x, (i / bd.x) % bd.y, i / (bd.x * bd.y)};
        f->group = nullptr;
        f->token = nullptr;
        rq_push(w, f);
    }
    while (!w->failed && w->rq_count) {
        Fiber* f = rq_pop(w);
        w->cur = f;
        threadIdx = f->tid;
        tsan_switch(f->tsan);
        ctx_switch(&w->sched, &f->ctx);
    }
    w->cur = nullptr;
    if (w->failed || w->live) {
        tsan_acquire(&w->tok_end);
        std::string msg = w->failed ? std::string(w->error) : deadlock_message(w);
        pthread_mutex_lock(&L->err_m);
        if (L->error.empty()) L->error = msg;
        pthread_mutex_unlock(&L->err_m);
        L->abort.store(true);
        w->unwinding = true;
        for (unsigned i = 0; i < n; ++i) {
            Fiber* f = w->fibers[i];
            if (f->state == St::Done) continue;
            w->cur = f;
            threadIdx = f->tid;
            tsan_switch(f->tsan);
            ctx_switch(&w->sched, &f->ctx);
        }
        w->unwinding = false;
        w->cur = nullptr;
        tsan_acquire(&w->tok_end);
        for (unsigned i = 0; i < n; ++i)
            if (w->fibers[i]->state != St::Done) fiber_reset(w->fibers[i]);
        w->failed = false;
    }
}

static GPUSVM_EMU_INTERNAL void run_launch(Worker* w, Launch* L) {
    w->launch = L;
    const unsigned n = L->nthreads;
    if (w->nfibers < n) {
        Fiber** fibers = new Fiber*[n]();
        for (unsigned i = 0; i < w->nfibers; ++i) fibers[i] = w->fibers[i];
        delete[] w->fibers;
        w->fibers = fibers;
        delete[] w->rq;
        w->rq = new Fiber*[n]();
        for (unsigned i = w->nfibers; i < n; ++i) {
            if (!fiber_create(w, i)) {
                pthread_mutex_lock(&L->err_m);
                if (L->error.empty()) L->error = "cannot allocate fiber stacks (mmap failed)";
                pthread_mutex_unlock(&L->err_m);
                L->abort.store(true);
                return;
            }
            w->nfibers = i + 1;
        }
    }
    const unsigned nwarps = (n + 31) / 32;
    if (w->nwarps < nwarps) {
        Group** groups = new Group*[size_t(nwarps) * 32]();
        unsigned char* ngroups = new unsigned char[nwarps]();
        for (unsigned i = 0; i < w->nwarps * 32; ++i) groups[i] = w->groups[i];
        for (unsigned i = 0; i < w->nwarps; ++i) ngroups[i] = w->ngroups[i];
        delete[] w->groups;
        delete[] w->ngroups;
        w->groups = groups;
        w->ngroups = ngroups;
        w->nwarps = nwarps;
    }
    while (!L->abort.load(std::memory_order_relaxed)) {
        unsigned long long b = L->next.fetch_add(1, std::memory_order_relaxed);
        if (b >= L->nblocks) break;
        run_block(w, L, b);
    }
    tsan_acquire(&w->tok_end);
}

struct Pool {
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cv_go = PTHREAD_COND_INITIALIZER, cv_done = PTHREAD_COND_INITIALIZER;
    std::vector<Worker*> workers;
    unsigned long long gen = 0;
    int active = 0, done = 0;
    Launch* launch = nullptr;
    pthread_mutex_t launch_m = PTHREAD_MUTEX_INITIALIZER;   // one launch at a time per module
};

static Pool* g_pool = nullptr;

// In a forked child the workers do not exist: start afresh (the old ones leak).
static GPUSVM_EMU_INTERNAL void pool_after_fork_in_child() {
    Pool* p = g_pool;
    if (!p) return;
    p->workers.clear();
    pthread_mutex_init(&p->m, nullptr);
    pthread_mutex_init(&p->launch_m, nullptr);
    pthread_cond_init(&p->cv_go, nullptr);
    pthread_cond_init(&p->cv_done, nullptr);
    p->gen = 0;
    p->active = p->done = 0;
    p->launch = nullptr;
}

static GPUSVM_EMU_INTERNAL Pool& pool() {
    static Pool* p = [] {
        Pool* q = new Pool();   // never destroyed: workers outlive static destructors
        g_pool = q;
        pthread_atfork(nullptr, nullptr, &pool_after_fork_in_child);
        return q;
    }();
    return *p;
}

static GPUSVM_EMU_INTERNAL void* worker_main(void* arg) {
    Worker* w = static_cast<Worker*>(arg);
    t_worker = w;
#if GPUSVM_EMU_TSAN
    w->sched_tsan = __tsan_get_current_fiber();
#endif
    Pool& p = pool();
    unsigned long long seen = 0;
    for (;;) {
        Launch* L;
        pthread_mutex_lock(&p.m);
        while (p.gen == seen) pthread_cond_wait(&p.cv_go, &p.m);
        seen = p.gen;
        L = w->index < p.active ? p.launch : nullptr;
        pthread_mutex_unlock(&p.m);
        if (!L) continue;
        run_launch(w, L);
        pthread_mutex_lock(&p.m);
        if (++p.done == p.active) pthread_cond_broadcast(&p.cv_done);
        pthread_mutex_unlock(&p.m);
    }
    return nullptr;
}

static GPUSVM_EMU_INTERNAL bool ensure_workers(Pool& p, int n) {
    while (int(p.workers.size()) < n) {
        Worker* w = new Worker();
        w->index = int(p.workers.size());
        size_t page = size_t(sysconf(_SC_PAGESIZE));
        w->dyn_cap = ((kMaxDynamicShared + page - 1) / page) * page;
        void* m = mmap(nullptr, w->dyn_cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) { delete w; return false; }
        w->dyn = static_cast<unsigned char*>(m);
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_t th;
        int rc = pthread_create(&th, &attr, &worker_main, w);
        pthread_attr_destroy(&attr);
        if (rc != 0) { munmap(m, w->dyn_cap); delete w; return false; }
        p.workers.push_back(w);
    }
    return true;
}

static void copy_error(const std::string& msg, char* err, size_t errlen) {
    if (!err || !errlen) return;
    size_t n = std::min(msg.size(), errlen - 1);
    memcpy(err, msg.data(), n);
    err[n] = 0;
}

}  // namespace gpusvm_emu

// ---- exported entry points (the only visible symbols) ------------------------------
GPUSVM_EMU_EXPORT int gpusvm_emu_abi_version() { return 1; }

GPUSVM_EMU_EXPORT int gpusvm_emu_is_tsan() { return GPUSVM_EMU_TSAN; }

// Atomic counting: on != 0 starts recording (and drops older records), 0 stops.
GPUSVM_EMU_EXPORT void gpusvm_emu_count_atomics(int on) {
    using namespace gpusvm_emu;
    pthread_mutex_lock(&g_events_m);
    g_events.clear();
    g_count_atomics.store(on != 0);
    pthread_mutex_unlock(&g_events_m);
}

// Copies up to max records (2 x uint64 each: address, block << 1 | kind) to out, drops them all,
// and returns how many there were (call with max = 0 to learn the size first).
GPUSVM_EMU_EXPORT long long gpusvm_emu_take_atomics(unsigned long long* out, long long max) {
    using namespace gpusvm_emu;
    pthread_mutex_lock(&g_events_m);
    const long long n = static_cast<long long>(g_events.size());
    if (max > 0) {
        const long long m = std::min(n, max);
        for (long long i = 0; i < m; ++i) {
            out[2 * i] = g_events[size_t(i)].addr;
            out[2 * i + 1] = g_events[size_t(i)].block_kind;
        }
        g_events.clear();
    }
    pthread_mutex_unlock(&g_events_m);
    return n;
}

GPUSVM_EMU_EXPORT int gpusvm_emu_num_kernels() { return int(gpusvm_emu_kernel_table().size()); }

GPUSVM_EMU_EXPORT const char* gpusvm_emu_kernel_name(int i) {
    const auto& t = gpusvm_emu_kernel_table();
    return (i >= 0 && size_t(i) < t.size()) ? t[size_t(i)].name.c_str() : nullptr;
}

GPUSVM_EMU_EXPORT const char* gpusvm_emu_kernel_signature(int i) {
    const auto& t = gpusvm_emu_kernel_table();
    return (i >= 0 && size_t(i) < t.size()) ? t[size_t(i)].signature.c_str() : nullptr;
}

// Runs kernel i to completion.  Returns 0 on success, 1 when the kernel failed
// (deadlock, __trap, invalid warp operation), 2 for an invalid configuration;
// the message goes to err.
GPUSVM_EMU_EXPORT int gpusvm_emu_launch(int i, const unsigned* grid, const unsigned* block,
                                        unsigned long long shared_bytes, void** args, int nworkers,
                                        char* err, size_t errlen) {
    using namespace gpusvm_emu;
    const auto& t = gpusvm_emu_kernel_table();
    if (i < 0 || size_t(i) >= t.size()) { copy_error("no such kernel", err, errlen); return 2; }
    unsigned long long nthreads = 1ull * block[0] * block[1] * block[2];
    unsigned long long nblocks = 1ull * grid[0] * grid[1] * grid[2];
    if (nthreads == 0 || nthreads > 1024 || block[2] > 64) {
        copy_error(fmt("invalid block (%u,%u,%u)", block[0], block[1], block[2]), err, errlen);
        return 2;
    }
    if (nblocks == 0 || grid[1] > 65535 || grid[2] > 65535 || grid[0] > 2147483647u) {
        copy_error(fmt("invalid grid (%u,%u,%u)", grid[0], grid[1], grid[2]), err, errlen);
        return 2;
    }
    if (shared_bytes > kMaxDynamicShared) {
        copy_error(fmt("shared_mem=%llu exceeds the %zu bytes of dynamic shared memory a block may use",
                       shared_bytes, kMaxDynamicShared), err, errlen);
        return 2;
    }
    Pool& p = pool();
    pthread_mutex_lock(&p.launch_m);
    Launch L;
    L.k = &t[size_t(i)];
    L.name = L.k->name.c_str();
    L.args = args;
    L.grid = dim3(grid[0], grid[1], grid[2]);
    L.block = dim3(block[0], block[1], block[2]);
    L.shmem = size_t(shared_bytes);
    L.nblocks = nblocks;
    L.nthreads = unsigned(nthreads);
    int nw = std::max(1, std::min(nworkers, 256));
    if (nblocks < (unsigned long long)nw) nw = int(nblocks);
    if (!ensure_workers(p, nw)) {
        pthread_mutex_unlock(&p.launch_m);
        copy_error("cannot start worker threads", err, errlen);
        return 2;
    }
    pthread_mutex_lock(&p.m);
    p.launch = &L;
    p.active = nw;
    p.done = 0;
    ++p.gen;
    pthread_cond_broadcast(&p.cv_go);
    while (p.done < p.active) pthread_cond_wait(&p.cv_done, &p.m);
    p.launch = nullptr;
    pthread_mutex_unlock(&p.m);
    pthread_mutex_unlock(&p.launch_m);
    fflush(stdout);
    if (!L.error.empty()) { copy_error(L.error, err, errlen); return 1; }
    return 0;
}

// Replays a recorded sequence of n launches `times` times, in order (a captured CUDA graph's
// replay, or a segment of identical iterations): launch j of the sequence is kernel idx[j] with
// grid[3j..3j+2], block[3j..3j+2], shared[j] and the argument vector args[j].  Stops at the
// first failing launch; its message names the repetition and the launch.
GPUSVM_EMU_EXPORT int gpusvm_emu_replay(int n, const int* idx, const unsigned* grid,
                                        const unsigned* block, const unsigned long long* shared,
                                        void*** args, long long times, int nworkers, char* err,
                                        size_t errlen) {
    for (long long r = 0; r < times; ++r) {
        for (int j = 0; j < n; ++j) {
            int rc = gpusvm_emu_launch(idx[j], grid + 3 * j, block + 3 * j, shared[j], args[j],
                                       nworkers, err, errlen);
            if (rc != 0) {
                std::string msg = gpusvm_emu::fmt("replay %lld, launch %d: ", r, j) +
                                  std::string(err ? err : "");
                gpusvm_emu::copy_error(msg, err, errlen);
                return rc;
            }
        }
    }
    return 0;
}

#endif  // GPUSVM_CUDA_EMU_H
