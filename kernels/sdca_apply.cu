// sdca_apply.cu: the step of a mini-batch SDCA iteration (Takáč et al. 2013) in the sparse form
// w = a v, decided on the device, in one launch (unchecked) or two (checked, Alg. 2):
//   phase 0 (step): coef_g = delta_g y_r / (lam n a); v_j += coef_g x_rj for every nonzero of the
//     rows with delta_g != 0 (atomicAdd, rounded to T), with the exact change dn of ||v||^2
//     (sum over additions of new^2 - old^2 from the atomics' old values); sums of delta and
//     |delta|.  Unchecked: alpha_r += delta_g at once.  The block that finishes last (ticket)
//     sets S_DNORM = dn, then, unchecked or when Delta D = sum delta / n - (lam/2) a^2 dn
//     >= -tau: S_VSQ += dn, S_ASUMD += sum delta; else (checked, rejected): S_NREJ += 1 and
//     acc[ACC_REJECT] = 1 (S_VSQ waits for the settle).
//   phase 1 (settle, checked only): every block reads acc[ACC_REJECT]; accepted: alpha_r += delta_g;
//     rejected: v_j -= coef_g x_rj (the same coefficients negated) with its exact change dn', and
//     the last block sets S_VSQ += S_DNORM + dn'; it zeroes acc[ACC_REJECT].
// These are exactly the semantics of NumpyBackend.sdca_apply, with no host synchronisation.
// grid: min(ceil(k / (BLOCK / LANES)), max_blocks) blocks of BLOCK threads; a group of LANES lanes
//   owns one row and strides over its nonzeros; groups stride over the rows; block sums and three
//   double atomics per block into acc; the last block finishes on one thread.
// in: indptr, indices, data, y, rows[k], k, delta[k] (double), lam, n, check, phase;
// in/out: v[d] (T), alpha[n] (double), state (double[N_SLOTS]), acc[N_ACC] (double; ACC_NORM,
//   ACC_DSUM, ACC_DABS zero on entry and exit; ACC_REJECT from phase 0 to phase 1),
//   ticket[1] (zero on entry and exit).
// traffic: per row 4 B rows + 8 B delta (+ 16 B indptr + 4 B y + one 8 B atomic on alpha when
//   delta != 0); per nonzero of a stepping row 4 + sizeof(T) B streamed and one atomic on v; the
//   settle of an accepted step touches no nonzero.
// determinism: float atomics on v, alpha and acc -> NOT bitwise repeatable (sums agree up to
//   rounding in any order; float32 v rounds once per addition); the NumPy backend is the
//   deterministic path.
#include "sdca_common.cuh"

namespace gpusvm {

// What a gpusvm_sdca_apply launch moves (shared with sdca_apply_balanced.cu), from a, ||v||^2 and
// the reject flag read before the block takes its ticket (hence before the last block writes
// them): phase 0 steps v (and alpha unless checked); phase 1 settles a checked step, moving v back
// when it was rejected and alpha when it was kept; scale = (+-) 1 / (lam n a), the sign of the
// phase, multiplies v's coefficients.
struct SdcaApplyPlan {
    double a;
    double vsq;
    bool rejected;
    bool move_v;
    bool move_alpha;
    double scale;
};

__device__ __forceinline__ SdcaApplyPlan sdca_apply_plan(const double* __restrict__ state,
                                                         const double* __restrict__ acc,
                                                         const double lam, const double n,
                                                         const int check, const int phase)
{
    SdcaApplyPlan p;
    p.a = state[S_A];
    p.vsq = state[S_VSQ];
    p.rejected = phase == 1 && acc[ACC_REJECT] != 0.0;
    p.move_v = phase == 0 || p.rejected;
    p.move_alpha = phase == 0 ? check == 0 : !p.rejected;
    p.scale = (phase == 0 ? 1.0 : -1.0) / (lam * n * p.a);
    return p;
}

// The end of a gpusvm_sdca_apply launch (shared with sdca_apply_balanced.cu): block sums of
// {dn, dsum, dabs} into acc, and the last block's scalar update (the step's acceptance test, or
// the settle).  Every thread of the block must call it.
template <typename T>
__device__ __forceinline__ void sdca_apply_close(double (&sums)[3], double* __restrict__ state,
                                                 double* __restrict__ acc,
                                                 unsigned int* __restrict__ ticket,
                                                 const double lam, const double n,
                                                 const int check, const int phase,
                                                 const SdcaApplyPlan& plan)
{
    block_sums_to<3>(sums, acc + ACC_NORM);              // ACC_NORM, ACC_DSUM, ACC_DABS
    if (last_block_done(ticket) && threadIdx.x == 0) {
        double tot[3];
        take_block_sums<3>(acc + ACC_NORM, ticket, tot);
        const double dn = tot[0];
        if (phase == 0) {
            state[S_DNORM] = dn;
            if (check && dual_drops(tot[1], tot[2], dn, plan.vsq, plan.a, lam, n, eps_of<T>())) {
                acc[ACC_REJECT] = 1.0;                       // the settle undoes the step
                state[S_NREJ] += 1.0;
            } else {
                acc[ACC_REJECT] = 0.0;
                state[S_VSQ] += dn;
                state[S_ASUMD] += tot[1];
            }
        } else {
            if (plan.rejected) {
                state[S_VSQ] += state[S_DNORM] + dn;
            }
            acc[ACC_REJECT] = 0.0;
        }
    }
}

}  // namespace gpusvm


template <int LANES, typename T>
__global__ void __launch_bounds__(gpusvm::BLOCK, gpusvm::MIN_BLOCKS) gpusvm_sdca_apply(
    const long long* __restrict__ indptr,  // CSR row pointers, n + 1
    const int* __restrict__ indices,       // CSR column indices, nnz
    const T* __restrict__ data,            // CSR values, nnz
    const T* __restrict__ y,               // labels in {-1, +1}, n
    const int* __restrict__ rows,          // the batch A_t (repeats allowed), k
    const int k,                           // batch size
    const double* __restrict__ delta,      // coordinate steps, k
    T* __restrict__ v,                     // w = a v, d (updated)
    double* __restrict__ alpha,            // dual variables, n (updated on acceptance)
    double* __restrict__ state,            // scalar state (updated by the last block)
    double* __restrict__ acc,              // SDCA accumulators {norm, dsum, dabs, -, reject}
    unsigned int* __restrict__ ticket,     // last-block ticket
    const double lam,                      // regularisation lambda
    const double n,                        // number of examples
    const int check,                       // 1: Alg. 2, keep the step only if D does not drop
    const int phase)                       // 0: step; 1: settle a checked step
{
    // read before this block takes its ticket, hence before the last block writes them
    const gpusvm::SdcaApplyPlan plan = gpusvm::sdca_apply_plan(state, acc, lam, n, check, phase);

    double sums[3] = {0.0, 0.0, 0.0};  // dn, dsum, dabs
    gpusvm::group_rows<LANES>(k, [&](const int g, const int lane) {
        const double dg = delta[g];
        if (dg == 0.0) {
            return;                                                  // nothing to add or count
        }
        const int r = rows[g];
        if (lane == 0) {
            sums[1] += dg;
            sums[2] += fabs(dg);
            if (plan.move_alpha) {
                atomicAdd(&alpha[r], dg);                            // a repeated row adds twice
            }
        }
        if (!plan.move_v) {
            return;
        }
        const double coef = dg * static_cast<double>(y[r]) * plan.scale;  // +-delta y / (lam n a)
        const long long end = indptr[r + 1];
        for (long long p = indptr[r] + lane; p < end; p += LANES) {
            sums[0] += gpusvm::add_exact(&v[indices[p]], static_cast<double>(data[p]) * coef);
        }
    });
    gpusvm::sdca_apply_close<T>(sums, state, acc, ticket, lam, n, check, phase, plan);
}
