"""Issue #15 comparison on real data shipped by PyPI packages: logit vs probit on the paper's
classification sets, the log vs the square link on the coal-mining counts; QP, EP, Laplace, VB.

Protocol (as :mod:`experiments.paper`, Sec. 6 of Zhang et al. (2020), reduced to fit a time budget):
classification -- ``--folds``-fold partitions (seed = repeat), the first ``--folds-per-repeat``
folds of each; features standardized on the training fold; every method fits an isotropic SE
kernel (variance and one length scale, start 1 and 1) by L-BFGS-B on its own evidence. Metrics:
TE = test error of ``predict``, NTLL = ``-mean log q(y|x)`` with ``q`` the estimator's own
``predict_proba`` (probit: ``Phi(m / sqrt(1 + v))``; logit: ``E[sigma(f*)]`` by quadrature).
Mining -- the coal-mining dates thinned with probability 1/2 into train and test (seed = repeat),
binned by year; TE = mean ``|y - y_hat|`` (predictive mode), NTLL = ``-mean log p(y)`` (square
link: App. H's negative binomial; log link: the exact Poisson-lognormal mixture).

    python -m experiments.compare_logit_loglink --out out/issue15 [--repeats 1] \\
        [--folds 5 --folds-per-repeat 2] [--datasets ionosphere sonar pima crabs mining]

Writes ``OUT/results.json``, prints a table of means over folds (and QP's mean latent variance
relative to EP's at the test points), and plots NTLL per dataset to ``OUT/ntll.png``.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import numpy as np

from experiments import datasets as ds

METHODS = ("ep", "qp", "laplace", "vb")


def _classification(name, lik, method, Xtr, ytr, Xte, yte) -> dict:
    import qpinfer

    est = qpinfer.GPClassifier(method, likelihood=lik, variance=1.0, length_scale=1.0, ard=False)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(Xtr, ytr)
    seconds = time.perf_counter() - t0
    proba = est.predict_proba(Xte)
    p_true = proba[np.arange(len(yte)), (yte > 0).astype(int)]
    _, var = est.predict_latent(Xte)
    return {
        "te": float(np.mean(est.predict(Xte) != yte)),
        "ntll": float(-np.mean(np.log(p_true))),
        "seconds": seconds,
        "log_evidence": float(est.log_marginal_likelihood_),
        "latent_var": var.tolist(),
    }


def _mining(link, method, Xtr, ytr, Xte, yte) -> dict:
    import qpinfer

    est = qpinfer.GPPoissonRegressor(method, link=link, variance=1.0, length_scale=1.0)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(Xtr, ytr)
    seconds = time.perf_counter() - t0
    _, var = est.predict_latent(Xte)
    return {
        "te": float(np.mean(np.abs(yte - est.predict_mode(Xte)))),
        "ntll": float(-np.mean(est.log_pmf(Xte, yte))),
        "seconds": seconds,
        "log_evidence": float(est.log_marginal_likelihood_),
        "latent_var": var.tolist(),
    }


def run(args: argparse.Namespace) -> list[dict]:
    rows = []
    for name in args.datasets:
        for repeat in range(args.repeats):
            if name == "mining":
                split = ds.mining_split(repeat)
                Xtr, Xte = ds.standardize(split.years[:, None], split.years[:, None])
                folds = [(Xtr, split.train.astype(float), Xte, split.test.astype(float))]
                variants = ("square", "log")
            else:
                X, y = ds.load_classification(name)
                parts = ds.kfold_indices(len(y), args.folds, repeat)[: args.folds_per_repeat]
                folds = []
                for test in parts:
                    train = np.setdiff1d(np.arange(len(y)), test)
                    Xtr, Xte = ds.standardize(X[train], X[test])
                    folds.append((Xtr, y[train], Xte, y[test]))
                variants = ("probit", "logit")
            for k, (Xtr, ytr, Xte, yte) in enumerate(folds):
                for variant in variants:
                    for method in args.methods:
                        if name == "mining":
                            rec = _mining(variant, method, Xtr, ytr, Xte, yte)
                        else:
                            rec = _classification(name, variant, method, Xtr, ytr, Xte, yte)
                        rec.update(
                            dataset=name, repeat=repeat, fold=k, variant=variant, method=method
                        )
                        rows.append(rec)
                        print(
                            f"{name:10s} r{repeat} f{k} {variant:6s} {method:7s} "
                            f"TE {rec['te']:.4f} NTLL {rec['ntll']:.4f} "
                            f"({rec['seconds']:.1f} s)",
                            flush=True,
                        )
    return rows


def summarize(rows: list[dict]) -> str:
    header = (
        f"{'dataset':10s} {'variant':7s} {'method':7s} {'TE':>7s} {'NTLL':>7s} "
        f"{'evidence':>9s} {'var/EP':>7s} {'fits':>4s}"
    )
    out = [header]
    keys = sorted(
        {(r["dataset"], r["variant"], r["method"]) for r in rows},
        key=lambda k: (k[0], k[1], METHODS.index(k[2])),
    )
    for d, v, m in keys:
        sel = [r for r in rows if (r["dataset"], r["variant"], r["method"]) == (d, v, m)]
        ep = {
            (r["repeat"], r["fold"]): r
            for r in rows
            if (r["dataset"], r["variant"], r["method"]) == (d, v, "ep")
        }
        ratio = np.mean(
            [
                np.mean(
                    np.asarray(r["latent_var"])
                    / np.asarray(ep[(r["repeat"], r["fold"])]["latent_var"])
                )
                for r in sel
            ]
        )
        out.append(
            f"{d:10s} {v:7s} {m:7s} {np.mean([r['te'] for r in sel]):7.4f} "
            f"{np.mean([r['ntll'] for r in sel]):7.4f} "
            f"{np.mean([r['log_evidence'] for r in sel]):9.2f} {ratio:7.4f} {len(sel):4d}"
        )
    return "\n".join(out)


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datasets = sorted({r["dataset"] for r in rows})
    fig, axes = plt.subplots(1, len(datasets), figsize=(3.2 * len(datasets), 3.2), squeeze=False)
    for ax, d in zip(axes[0], datasets):
        variants = sorted({r["variant"] for r in rows if r["dataset"] == d})
        methods = [m for m in METHODS if any(r["method"] == m for r in rows)]
        width = 0.8 / len(variants)
        for i, v in enumerate(variants):
            vals = [
                np.mean(
                    [
                        r["ntll"]
                        for r in rows
                        if (r["dataset"], r["variant"], r["method"]) == (d, v, m)
                    ]
                )
                for m in methods
            ]
            ax.bar(np.arange(len(methods)) + i * width, vals, width, label=v)
        ax.set_xticks(np.arange(len(methods)) + 0.4 - width / 2, methods)
        ax.set_title(d)
        ax.set_ylabel("test NTLL")
        lo = min(r["ntll"] for r in rows if r["dataset"] == d)
        ax.set_ylim(bottom=0.9 * lo)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="+", default=list(ds.CLASSIFICATION) + ["mining"])
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--folds-per-repeat", type=int, default=2)
    ap.add_argument("--out", default="out/issue15")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = run(args)
    (out / "results.json").write_text(json.dumps(rows))
    table = summarize(rows)
    (out / "table.txt").write_text(table + "\n")
    print(table)
    plot(rows, out / "ntll.png")
    print(f"wrote {out / 'results.json'}, {out / 'table.txt'}, {out / 'ntll.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
