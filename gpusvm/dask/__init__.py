"""Linear SVMs beyond one machine: distributed SDCA (CoCoA+) and Pegasos on a dask cluster.

Import it as ``gpusvm.dask`` (``import gpusvm`` does not import dask)::

    from distributed import Client, LocalCluster
    from gpusvm.dask import SDCASVC, SDCASVCCV, PegasosSVC, read_svmlight

    client = Client(LocalCluster(n_workers=2, threads_per_worker=1))
    X, y = read_svmlight(["part-0.svm", "part-1.svm"])    # read on the workers
    clf = SDCASVC(C=1.0, tol=1e-3).fit(X, y)              # two or more classes, weights, losses
    search = SDCASVCCV(Cs=[0.1, 1, 10], cv=5).fit(X, y)   # C by cross-validation, one pass
    clf.duality_gap_                                      # a certificate of P(w) - P(w*)
    gpusvm.model_io.save_model(clf.to_local(), "model.npz")

Needs ``pip install "gpusvm[dask]"`` (dask, distributed and numba).
"""

from ._blocks import StaleBlockError
from ._cv import SDCASVCCV
from ._estimators import DistributedFitError, PegasosSVC, SDCASVC
from ._io import read_svmlight

__all__ = ["DistributedFitError", "PegasosSVC", "SDCASVC", "SDCASVCCV", "StaleBlockError",
           "read_svmlight"]
