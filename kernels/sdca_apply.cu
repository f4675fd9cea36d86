// sdca_apply.cu: the step of a captured mini-batch SDCA segment (Takac et al. 2013), per output c:
//   phase 0 (the step): alpha_A += delta (unless checked), V[:, c] += sum_i delta_ic y_ic x_i /
//     (lam n a_c) with the exact change of ||v_c||^2; with fused, delta_ic is computed here first
//     by eq. (15) with the beta_c that gpusvm_sdca_rho just adapted (and written to delta).  The
//     last block (ticket) updates the scalars; when check (Alg. 2) it keeps the step only if
//     D(alpha) does not drop, i.e. sum gain / n - lam/2 a_c^2 dn >= -tau (tau: the rounding
//     allowance 4 (eps lam a_c^2 ||v_c||^2 + eps64 sum |delta| / n); gain = delta for the hinge,
//     delta - delta (2 alpha + delta) / (4 s) for the squared hinge), else marks it rejected;
//   phase 1 (the settle of a checked step): alpha_A += delta where the step was kept, the
//     opposite of the step added to V[:, c] where it was rejected (S_NREJ counts it); with
//     fused, the scratch rows gpusvm_sdca_rho filled are zeroed again.
// grid: as gpusvm_pegasos_step (M1 = 1: tiles balanced by nonzeros with the column table; M1 = 0:
//   one thread per (row, output) pair); the last block's thread c finishes output c.
// in: indptr, indices, data, Y[n x M], sw[n x M] (WT), rows[k], k, tile_rows, M, lam, n, check,
//   phase, m[k x M], row_sq[n], first[k] (has_first), has_first, old[k x M] (fused phase 1),
//   fused; in/out: delta[k x M], V[d x M] (T), alpha[n x M], state, acc (zero on exit but for
//   ACC_REJECT between the phases), ticket[1], scratch[d x M] (fused phase 1).
// traffic: per pair 8 B delta (+ 16 B indptr, 4 B rows, sizeof(T) B y and an 8 B atomic on alpha
//   when it moves; fused: 8 B m, alpha and row_sq); per nonzero of a moving row 4 + sizeof(T) B
//   streamed and an atomic on V (M1: one per distinct column of a tile).
// determinism: float atomics on V, alpha and acc -> repeatable up to rounding.
#include "common.cuh"
#include "outputs.cuh"

template <typename T, int M1, int SQ, int WT, typename I = int>
__global__ void __launch_bounds__(gpusvm::BLOCK, gpusvm::MIN_BLOCKS) gpusvm_sdca_apply(
    const long long* __restrict__ indptr,  // CSR row pointers, n + 1
    const I* __restrict__ indices,         // CSR column indices, nnz (int or long long)
    const T* __restrict__ data,            // CSR values, nnz
    const T* __restrict__ Y,               // labels in {-1, +1}, n x M
    const double* __restrict__ sw,         // example weights, n x M (WT)
    const int* __restrict__ rows,          // the batch A_t, k
    const int k,                           // batch size
    const int tile_rows,                   // batch positions per tile (M1), 1 .. BLOCK
    const int outputs,                     // M, the number of outputs (1 when M1)
    double* __restrict__ delta,            // coordinate steps, k x M (written by a fused phase 0)
    T* __restrict__ V,                     // W = V diag(a), d x M (updated)
    double* __restrict__ alpha,            // dual variables, n x M
    double* __restrict__ state,            // scalar state (updated by the last block)
    double* __restrict__ acc,              // accumulators, N_ACC x M
    unsigned int* __restrict__ ticket,     // last-block ticket
    const double lam,                      // regularisation lambda
    const double n,                        // number of examples
    const int check,                       // 1: Alg. 2, keep the step only if D does not drop
    const int phase,                       // 0: step; 1: settle a checked step
    const double* __restrict__ m,          // margins, k x M (fused phase 0)
    const double* __restrict__ row_sq,     // squared row norms, n (fused phase 0)
    const int* __restrict__ first,         // first-occurrence mask, k (fused phase 0, has_first)
    const int has_first,                   // 0: every row steps
    double* __restrict__ scratch,          // rho's scratch, d x M (zeroed by a fused phase 1)
    const double* __restrict__ old,        // the tentative steps rho added, k x M (fused phase 1)
    const int fused)                       // 1: the steps computed here, the scratch zeroed here
{
    const int M = M1 != 0 ? 1 : outputs;               // a constant 1 in the M1 instances
    constexpr int NS = SQ != 0 ? 4 : 3;                // dn, dsum, dabs (, gain)
    constexpr int GAIN = SQ != 0 ? 3 : 1;              // the hinge's gain is dsum
    const bool steps_here = fused && phase == 0;
    // M1: the plan of the one output, read before this block takes its ticket (hence before the
    // last block writes the state); M outputs read theirs per pair, as early
    const double a0 = M1 != 0 ? state[gpusvm::S_A] : 0.0;
    const double beta0 = M1 != 0 ? state[gpusvm::S_BETA] : 0.0;          // adapted by the previous launch
    const bool rejected0 = M1 != 0 && phase == 1 && acc[gpusvm::ACC_REJECT] != 0.0;
    gpusvm::OutputSums<M1, NS> sums(acc, M);
    gpusvm::batch_scatter<M1>(indptr, indices, data, k, M, tile_rows, V,
                              static_cast<double*>(nullptr), [](int) { return 0.0; }, sums,
                              [&](const int i, const int c, const long long p, double& coef) {
        const int r = rows[i];
        const long long rc = static_cast<long long>(r) * M + c;
        const double s = gpusvm::weight_of<WT>(sw, r, M, c);
        double dp;
        if (steps_here) {                                            // eq. (15), beta^(t+1)
            dp = (has_first && first[i] == 0)
                ? 0.0
                : gpusvm::sdca_step<SQ>(alpha[rc], s, lam * n,
                                        M1 != 0 ? beta0 : state[gpusvm::S_BETA * M + c], m[p],
                                        row_sq[r]);
            delta[p] = dp;
        } else {
            dp = delta[p];
        }
        if (dp == 0.0) {
            return -1;                                               // nothing to add or count
        }
        const bool rejected = M1 != 0 ? rejected0
                                      : phase == 1 && acc[gpusvm::ACC_REJECT * M + c] != 0.0;
        sums.add(1, c, dp);
        sums.add(2, c, fabs(dp));
        if constexpr (SQ != 0) {
            sums.add(3, c, s > 0.0 ? dp - dp * (2.0 * alpha[rc] + dp) / (4.0 * s) : dp);
        }
        if (phase == 0 ? check == 0 : !rejected) {
            gpusvm::red_add(&alpha[rc], dp);                               // a repeated row adds twice
        }
        if (phase == 1 && !rejected) {
            return -1;                                               // kept: V stays
        }
        const double a = M1 != 0 ? a0 : state[gpusvm::S_A * M + c];
        coef = dp * static_cast<double>(Y[rc]) * ((phase == 0 ? 1.0 : -1.0) / (lam * n * a));
        return r;
    });
    if (fused && phase == 1) {                                       // rho's scratch, clean again
        if constexpr (M1 != 0) {
            gpusvm::tile_rows_zero(indptr, indices, k, tile_rows, scratch, [&](const int g) {
                return old[g] != 0.0 ? rows[g] : -1;
            });
        } else {
            gpusvm::grid_stride_pairs(k, M, [&](const long long p, const int i, const int c) {
                if (old[p] == 0.0) {
                    return;
                }
                const int r = rows[i];
                for (long long q = indptr[r]; q < indptr[r + 1]; ++q) {
                    double* const slot = &scratch[static_cast<long long>(indices[q]) * M + c];
                    atomicExch(reinterpret_cast<unsigned long long*>(slot), 0ull);
                }
            });
        }
    }
    sums.flush();
    if (!gpusvm::last_block_done(ticket)) {
        return;
    }
    for (int c = threadIdx.x; c < M; c += gpusvm::BLOCK) {
        double tot[NS];
        gpusvm::take_sums<NS>(acc, M, c, tot);
        double* const s = state + c;                                 // slot q of output c: s[q M]
        double* const reject = &acc[gpusvm::ACC_REJECT * M + c];
        const double dn = tot[0];
        if (phase == 0) {
            s[gpusvm::S_DNORM * M] = dn;
            const double a = s[gpusvm::S_A * M];
            const double tau = 4.0 * (gpusvm::eps_of<T>() * lam * a * a * s[gpusvm::S_VSQ * M]
                                      + 0x1p-52 * tot[2] / n);
            if (check && tot[GAIN] / n - 0.5 * lam * a * a * dn < -tau) {
                *reject = 1.0;                                       // the settle undoes the step
                s[gpusvm::S_NREJ * M] += 1.0;
            } else {
                *reject = 0.0;
                s[gpusvm::S_VSQ * M] += dn;
                s[gpusvm::S_ASUMD * M] += tot[1];
            }
        } else {
            if (*reject != 0.0) {
                s[gpusvm::S_VSQ * M] += s[gpusvm::S_DNORM * M] + dn;
            }
            *reject = 0.0;
        }
    }
    if (threadIdx.x == 0) {
        gpusvm::reset_ticket(ticket);
    }
}
