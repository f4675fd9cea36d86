"""Slots of the scalar state vector shared by every backend and by the CUDA kernels.

The solvers keep ``w = a * v`` with a scalar ``a`` and a dense ``v`` (Pegasos,
Shalev-Shwartz et al. 2007, Sec. 2.4 "sparse form"); every scalar that the iteration
updates lives in one small float64 vector, so that a device backend can keep it on the
device and never synchronise inside the iteration loop.  The indices are mirrored by
``kernels/common.cuh`` (a test checks that both lists agree).
"""

S_A = 0       #: scale ``a`` of ``w = a v``
S_VSQ = 1     #: ``||v||^2``, tracked exactly from the change of every update
S_B = 2       #: bias ``b``
S_ASUM = 3    #: averaging: ``A``, with the running sum of iterates ``S = A v - u``
S_NAVG = 4    #: averaging: number of iterates averaged so far
S_BSUM = 5    #: averaging: sum of the biases of the averaged iterates
S_NACT = 6    #: number of active rows (margin < 1) in the last batch
S_DNORM = 7   #: scratch: accumulated change of ``||v||^2`` during one update
S_LOSS = 8    #: sum of the hinge losses of the last batch
S_YACT = 9    #: scratch: sum of ``y_i`` over the active rows of the last batch
S_BETA = 10   #: SDCA: current step parameter beta (aggressive variant)
S_NREJ = 11   #: SDCA: number of rejected steps (aggressive variant)
S_ASUMD = 12  #: SDCA: sum of alpha_i (the linear term of the dual)
S_TMP0 = 13   #: scratch slots for kernels
S_TMP1 = 14
S_TMP2 = 15

N_SLOTS = 16  #: length of the state vector

SLOTS = {name: value for name, value in globals().items() if name.startswith("S_")}
