"""An ordinary scikit-learn script, with no mention of gpusvm: a LinearSVC in a Pipeline, tuned by
GridSearchCV.  tests/test_accel.py runs it under ``python -m gpusvm.accel``."""

import sys

from sklearn.datasets import load_breast_cancer
from sklearn.model_selection import GridSearchCV, train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import LinearSVC

X, y = load_breast_cancer(return_X_y=True)
X_train, X_test, y_train, y_test = train_test_split(X, y, random_state=0, stratify=y)
pipe = make_pipeline(StandardScaler(), LinearSVC())
search = GridSearchCV(pipe, {"linearsvc__C": [0.01, 0.1, 1.0]}, cv=3).fit(X_train, y_train)
best = search.best_estimator_[-1]
print(f"best C: {search.best_params_['linearsvc__C']}")
print(f"test accuracy: {search.score(X_test, y_test):.3f}")
print(f"estimator: {type(best).__module__}.{type(best).__name__}")
print(f"arguments: {sys.argv[1:]}")
