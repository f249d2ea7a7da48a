"""QP's default hyperparameter search before and after the flat-objective rule, on real data.

On separable classes (UCI wine, classes 0 vs 1) the evidence rises towards a finite supremum
only as the signal variance goes to infinity: plain L-BFGS-B ends QP's own-objective search
(``qp_objective="evidence"``, the default) on the variance's upper bound 1e5 and warns
(:class:`qpinfer.inference.search_result.BoundWarning`), and QP's latent variance there can
exceed EP's, whose search stopped earlier on the same flat objective. The rule
(:func:`qpinfer.inference.optimize.search_evidence`'s ``flat_retry`` and ``flat_rtol``): a search
that ends on a bound is run again from its start in a trust region, moving the hyperparameters
at most ``GPClassifier._QP_SEARCH_TRUST`` log units per L-BFGS-B round, and stops once a round
gained at most ``_QP_FLAT_RTOL * |f|``; a search that ends inside the box is unchanged.

Per data set: 5 random folds (seed 0), features standardised on the training fold, training
folds subsampled to at most ``--max-train`` rows (seeded); EP, QP with plain L-BFGS-B ("before")
and QP with the rule ("after"), each at its default search. Prints a markdown table and writes
every number to ``--out`` (JSON)::

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python -m experiments.qp_flat_search \\
        --out docs/development/qp_flat_search.json
"""

from __future__ import annotations

import argparse
import json
import time
import warnings

import numpy as np

from experiments import datasets as ds

SETS = ("wine_0v1", "wine_1v2", "ionosphere", "sonar", "pima", "crabs", "breast_cancer")
VARIANTS = ("ep", "qp_before", "qp_after")


def load(name: str) -> tuple[np.ndarray, np.ndarray]:
    """``(X, y)`` raw, ``y`` in {-1, +1}: scikit-learn's bundled UCI copies (wine, breast
    cancer) or :func:`experiments.datasets.load_classification`."""
    if name.startswith("wine_"):
        from sklearn.datasets import load_wine

        X, y = load_wine(return_X_y=True)
        a, b = (int(c) for c in name[5:].split("v"))
        keep = np.isin(y, (a, b))
        return X[keep], np.where(y[keep] == b, 1.0, -1.0)
    if name == "breast_cancer":
        from sklearn.datasets import load_breast_cancer

        X, y = load_breast_cancer(return_X_y=True)
        return X, np.where(y == 1, 1.0, -1.0)
    return ds.load_classification(name)


def fit_one(variant: str, Xtr, ytr, Xte, yte) -> dict:
    """One default fit (EP, or QP with or without the rule) and its held-out numbers."""
    import qpinfer
    from qpinfer.inference.search_result import BoundWarning

    cls = qpinfer.GPClassifier
    saved = cls._QP_SEARCH_TRUST
    if variant == "qp_before":
        cls._QP_SEARCH_TRUST = None
    try:
        start = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            est = cls("ep" if variant == "ep" else "qp", blas_threads=1).fit(Xtr, ytr)
        seconds = time.perf_counter() - start
    finally:
        cls._QP_SEARCH_TRUST = saved
    p = est.predict_proba(Xte)[:, 1]
    ll = np.log(np.where(yte == 1, p, 1.0 - p))
    _, var = est.predict_latent(Xte)
    return {
        "seconds": seconds,
        "ntll": float(-ll.mean()),
        "var": var.tolist(),
        "hyperparameters": np.exp(est.kernel_.theta).tolist(),
        "bound_warnings": sum(issubclass(w.category, BoundWarning) for w in caught),
        "evaluations": int(est.n_evaluations_),
    }


def run(name: str, folds: int, max_train: int, seed: int = 0) -> list[dict]:
    X, y = load(name)
    rng = np.random.default_rng(seed)
    out = []
    for k, test in enumerate(ds.kfold_indices(y.size, folds, seed)):
        train = np.setdiff1d(np.arange(y.size), test)
        if train.size > max_train:
            train = np.sort(rng.choice(train, max_train, replace=False))
        Xtr, Xte = ds.standardize(X[train], X[test])
        fold = {"fold": k, "n_train": int(train.size), "n_test": int(test.size)}
        for v in VARIANTS:
            fold[v] = fit_one(v, Xtr, y[train], Xte, y[test])
        out.append(fold)
    return out


def summarise(name: str, folds: list[dict]) -> dict:
    s: dict = {
        "set": name,
        "n_train": folds[0]["n_train"],
        "n_test": sum(f["n_test"] for f in folds),
    }
    ve = np.concatenate([f["ep"]["var"] for f in folds])
    for v in VARIANTS:
        s[v] = {
            "ntll": float(np.mean([f[v]["ntll"] for f in folds])),
            "seconds": float(sum(f[v]["seconds"] for f in folds)),
            "bound_warnings": int(sum(f[v]["bound_warnings"] for f in folds)),
            "max_variance": float(max(f[v]["hyperparameters"][0] for f in folds)),
        }
        vq = np.concatenate([f[v]["var"] for f in folds])
        s[v]["frac_var_le_ep"] = float(np.mean(vq <= ve * (1 + 1e-9)))
        s[v]["median_var_ratio"] = float(np.median(vq / ve))
    d = np.array([f["qp_after"]["ntll"] - f["qp_before"]["ntll"] for f in folds])
    s["ntll_after_minus_before"] = {"mean": float(d.mean()), "fold_std": float(d.std(ddof=1))}
    n = np.array([f["qp_before"]["ntll"] for f in folds])
    s["qp_before_ntll_fold_std"] = float(n.std(ddof=1))
    return s


def table(summaries: list[dict]) -> str:
    rows = [
        "| data | n train | NTLL EP | NTLL QP before | NTLL QP after | after - before (fold std) "
        "| s EP / before / after | bound warnings before / after | QP var <= EP var, before / after "
        "| largest signal variance before / after |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summaries:
        b, a, e = s["qp_before"], s["qp_after"], s["ep"]
        d = s["ntll_after_minus_before"]
        rows.append(
            f"| {s['set']} | {s['n_train']} | {e['ntll']:.4f} | {b['ntll']:.4f} | {a['ntll']:.4f} "
            f"| {d['mean']:+.5f} ({s['qp_before_ntll_fold_std']:.4f}) "
            f"| {e['seconds']:.1f} / {b['seconds']:.1f} / {a['seconds']:.1f} "
            f"| {b['bound_warnings']} / {a['bound_warnings']} "
            f"| {100 * b['frac_var_le_ep']:.0f}% / {100 * a['frac_var_le_ep']:.0f}% "
            f"| {b['max_variance']:.3g} / {a['max_variance']:.3g} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sets", nargs="+", default=list(SETS), choices=SETS)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--max-train", type=int, default=300)
    ap.add_argument("--out", default="qp_flat_search.json")
    args = ap.parse_args(argv)
    summaries, raw = [], {}
    for name in args.sets:
        raw[name] = run(name, args.folds, args.max_train)
        summaries.append(summarise(name, raw[name]))
        print(table(summaries[-1:]).split("\n")[-1], flush=True)
    print(table(summaries))
    with open(args.out, "w") as fh:
        json.dump({"args": vars(args), "summaries": summaries, "folds": raw}, fh, indent=1)


if __name__ == "__main__":
    main()
