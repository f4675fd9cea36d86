// sdca_rho_multi.cu: the scalar part of Alg. 2 of Takáč et al. (2013) on the general path, per
// output c (GeneralPath.sdca_adapt_beta_m), after gpusvm_sdca_coef_multi (mode 0: den_c in acc)
// and gpusvm_accumulate_multi into the zeroed scratch matrix (num_c = ||sum_i delta_ic y_ic x_i||^2,
// the exact change of its squared norm, in dn2):
//   where den_c > 0: rho = clip(num_c / den_c, 1, beta_b) -> S_TMP0;
//                    beta_c = clip(beta_c^theta rho^(1 - theta), 1, beta_b) -> S_BETA;
// then zeroes acc[MACC_DEN].
// grid: ONE block of BLOCK threads; thread c strides over the M outputs.
// in: M, dn2[M], beta_b, theta; in/out: state[N_SLOTS x M], acc[4 M].
// traffic: a few doubles per output; one launch of one block.
// determinism: per output sequential arithmetic -> bitwise repeatable.
#include "common.cuh"
#include "sdca_coef_multi.cu"

template <typename T>
__global__ void __launch_bounds__(gpusvm::BLOCK, gpusvm::MIN_BLOCKS) gpusvm_sdca_rho_multi(
    const int M,                           // number of outputs
    const double* __restrict__ dn2,        // num_c, M
    const double beta_b,                   // upper bound of beta
    const double theta,                    // Alg. 2's averaging exponent
    double* __restrict__ state,            // scalar state, N_SLOTS x M (S_TMP0, S_BETA)
    double* __restrict__ acc)              // accumulators, N_MACC x M (MACC_DEN zeroed)
{
    for (int c = threadIdx.x; c < M; c += gpusvm::BLOCK) {
        const double den = acc[gpusvm::MACC_DEN * M + c];
        acc[gpusvm::MACC_DEN * M + c] = 0.0;
        if (den > 0.0) {
            const double rho = fmin(fmax(gpusvm::load_coherent(&dn2[c]) / den, 1.0), beta_b);
            state[gpusvm::S_TMP0 * M + c] = rho;
            const double beta = pow(state[gpusvm::S_BETA * M + c], theta) * pow(rho, 1.0 - theta);
            state[gpusvm::S_BETA * M + c] = fmin(fmax(beta, 1.0), beta_b);
        }
    }
}
