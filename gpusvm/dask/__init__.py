"""Linear SVMs beyond one machine: distributed SDCA (CoCoA+) and Pegasos on a dask cluster.

Import it as ``gpusvm.dask`` (``import gpusvm`` does not import dask)::

    from distributed import Client, LocalCluster
    from gpusvm.dask import SDCASVC, PegasosSVC

    client = Client(LocalCluster(n_workers=2, threads_per_worker=1))
    clf = SDCASVC(lam=1e-4, tol=1e-3).fit(X, y)    # X: dask array of CSR row chunks, or CSR
    clf.duality_gap_                                # a certificate of P(w) - P(w*)
    gpusvm.model_io.save_model(clf.to_local(), "model.npz")

Needs ``pip install "gpusvm[dask]"`` (dask, distributed and numba).
"""

from ._blocks import StaleBlockError
from ._estimators import DistributedFitError, PegasosSVC, SDCASVC
from ._local import local_pegasos_partial, local_pegasos_steps, local_sdca_epoch

__all__ = ["DistributedFitError", "PegasosSVC", "SDCASVC", "StaleBlockError",
           "local_pegasos_partial", "local_pegasos_steps", "local_sdca_epoch"]
