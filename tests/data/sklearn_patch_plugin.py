"""pytest plugin: scikit-learn's own tests with ``sklearn.svm.LinearSVC`` patched to gpusvm's."""

import gpusvm


def pytest_configure(config):
    gpusvm.patch_sklearn()
