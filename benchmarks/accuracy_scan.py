"""Accuracy of the exact sigma* kernel against mpmath, and of the shipped tables against the
kernel, over cavity standard deviations from 1e-4 to 1e6 (docs/development/accuracy.md's figure).

For each likelihood with a shipped table (:data:`qpinfer.tables.shipped.SHIPPED`): seeded points
``(mu, sigma, y)`` with ``log10 sigma`` stratified over bands of ``[-4, 6]`` (one uniform draw
per stratum; poisson_log only to 4, its kernel refuses ``sigma > 1e4``), ``mu = c + tau sigma``
with ``tau`` in :data:`TAUS` and ``c`` the likelihood's centre in ``f`` (0 for the binary
likelihoods, ``sqrt(y)`` for poisson_square, ``log y`` for poisson_log, ``y`` for Student-t),
and labels ``+-1`` (drawn), counts ``y in {0, 1, 3, 10, 100}`` (all) or Student-t targets
(drawn). At each point:

* the reference sigma* by the independent mpmath quadrature of :mod:`qptables.reference` at
  :data:`DPS` digits (:func:`~qptables.reference.sigma.sigma_qp_reference`, Student-t:
  :func:`~qptables.reference.student_t.student_t_reference`);
* the exact kernel :func:`qpinfer.sigma_qp` and its relative error against the reference;
* the shipped table's ``sigma_qp`` (:func:`qpinfer.tables.shipped.shipped_table`) and its
  relative error against the kernel and the reference; points outside the table (``contains``
  false) are answered by the kernel itself and counted as fallbacks.

The mpmath reference costs 0.1-40 s a point (Student-t and step-noise are the slow ones, and
wide cavities), so the wide bands hold fewer points: the default scan takes ~3 minutes of one
core. Prints a per-likelihood summary; writes every point to ``--json`` and the figure to
``--png``. ::

    python benchmarks/accuracy_scan.py --json docs/development/accuracy_kernel.json \\
        --png docs/development/img/accuracy_kernel.png [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import mpmath
import numpy as np

import qpinfer
from qpinfer.likelihoods.registry import get_likelihood
from qpinfer.tables.shipped import shipped_table

ROOT = Path(__file__).resolve().parents[1]
DPS = 30  # digits of the mpmath reference
TOL = 1e-12  # the kernel's accuracy target
TAUS = (-2.0, 0.0, 1.0)  # (mu - centre) / sigma
FLOOR = 1e-18  # where a zero error is drawn on the log axis


@dataclass(frozen=True)
class Spec:
    """How one likelihood is sampled.

    labels : the labels / counts / targets ``y``;
    all_labels : every label at every ``(sigma, tau)`` (else one drawn per point);
    bands : ``(lo, hi, strata, taus_per_sigma)``: ``strata`` draws of ``log10 sigma``, one per
        equal stratum of ``[lo, hi]``, each with ``taus_per_sigma`` of :data:`TAUS` (cycled
        across strata when fewer than all).
    """

    labels: tuple
    all_labels: bool
    bands: tuple[tuple[float, float, int, int], ...]


STUDENT_T = "student_t(nu=4.0, scale=1.0)"
SPECS = {
    "probit": Spec((-1, 1), False, ((-4, 6, 10, 3),)),
    "logit": Spec((-1, 1), False, ((-4, 6, 10, 3),)),
    "poisson_square": Spec((0, 1, 3, 10, 100), True, ((-4, 6, 10, 3),)),
    "poisson_log": Spec((0, 1, 3, 10, 100), True, ((-4, 4, 8, 3),)),
    "step_noise(eps=0.2)": Spec((-1, 1), False, ((-4, 6, 8, 1),)),
    STUDENT_T: Spec((0.0, 2.5), False, ((-4, 2, 6, 2), (2, 6, 2, 1))),
}


@dataclass(frozen=True)
class Point:
    likelihood: str
    mu: float
    sigma: float
    y: float
    tau: float


def centre(likelihood: str, y: float) -> float:
    """Where the likelihood's own mass sits in ``f`` (the cavity means are ``centre + tau
    sigma``): the binary step at 0, ``sqrt(y)`` / ``log y`` for the Poisson links, ``y`` for
    Student-t."""
    if likelihood == "poisson_square":
        return math.sqrt(y)
    if likelihood == "poisson_log":
        return math.log(y) if y > 0 else 0.0
    if likelihood.startswith("student_t"):
        return float(y)
    return 0.0


def make_points(seed: int = 0, specs: dict[str, Spec] | None = None) -> list[Point]:
    """The scan's points for every likelihood of ``specs`` (default :data:`SPECS`), drawn from
    ``numpy.random.default_rng(seed)`` in the order of ``specs``."""
    rng = np.random.default_rng(seed)
    points = []
    for name, spec in (SPECS if specs is None else specs).items():
        for lo, hi, strata, k in spec.bands:
            if not (1 <= k <= len(TAUS)) or strata < 1 or not lo < hi:
                raise ValueError(
                    f"band of {name} must be (lo < hi, strata >= 1, 1 <= taus <= {len(TAUS)}); got {(lo, hi, strata, k)}"
                )
            edges = np.linspace(lo, hi, strata + 1)
            for i in range(strata):
                sigma = float(10.0 ** rng.uniform(edges[i], edges[i + 1]))
                for j in range(k):
                    tau = TAUS[(i + j) % len(TAUS)] if k < len(TAUS) else TAUS[j]
                    labels = (
                        spec.labels
                        if spec.all_labels
                        else (spec.labels[rng.integers(len(spec.labels))],)
                    )
                    for y in labels:
                        mu = centre(name, y) + tau * sigma
                        points.append(Point(name, mu, sigma, y, tau))
    return points


def reference(p: Point, dps: int = DPS) -> mpmath.mpf:
    """sigma* at ``p`` by the mpmath reference, to about ``dps`` digits."""
    if p.likelihood.startswith("student_t"):
        from qptables.reference.student_t import student_t_reference

        lik = get_likelihood(p.likelihood)
        return student_t_reference(lik.nu, lik.scale, p.mu, p.sigma, p.y, dps=dps).sigma_qp
    from qptables.reference.sigma import sigma_qp_reference

    return sigma_qp_reference(p.likelihood, p.mu, p.sigma, int(p.y), dps=dps)


def _rel(value: float, ref: mpmath.mpf) -> float:
    return float(abs(mpmath.mpf(value) - ref) / abs(ref))


def evaluate(points: list[Point], dps: int = DPS, tables: bool = True, log=None) -> list[dict]:
    """Reference, kernel and (if ``tables``) shipped-table sigma* at each point, with their
    relative errors (computed in mpmath: ``|value - reference| / reference``) and the CPU seconds
    of each reference evaluation. ``log(i, record)`` is called after each point if given."""
    out: list[dict] = []
    by_lik: dict[str, list[int]] = {}
    for i, p in enumerate(points):
        by_lik.setdefault(p.likelihood, []).append(i)
    kernel = np.empty(len(points))
    table = np.full(len(points), np.nan)
    inside = np.zeros(len(points), dtype=bool)
    for name, idx in by_lik.items():
        lik = get_likelihood(name)
        mu, sigma, y = (
            np.array([getattr(points[i], a) for i in idx]) for a in ("mu", "sigma", "y")
        )
        kernel[idx] = qpinfer.sigma_qp(lik, mu, sigma, y)
        t = shipped_table(lik) if tables else None
        if t is not None:
            table[idx] = t.sigma_qp(mu, sigma, y)
            inside[idx] = t.contains(mu, sigma, y)
    for i, p in enumerate(points):
        t0 = time.process_time()
        ref = reference(p, dps)
        rec = asdict(p) | {
            "reference": mpmath.nstr(ref, 25),
            "reference_cpu_s": round(time.process_time() - t0, 3),
            "kernel": float(kernel[i]),
            "kernel_rel_err": _rel(kernel[i], ref),
        }
        if tables:
            rec |= {
                "table": float(table[i]),
                "in_table": bool(inside[i]),
                "table_rel_err_vs_kernel": float(abs(table[i] - kernel[i]) / kernel[i]),
                "table_rel_err_vs_reference": _rel(table[i], ref),
            }
        out.append(rec)
        if log is not None:
            log(i, rec)
    return out


def summarise(records: list[dict]) -> dict[str, dict]:
    """Per likelihood: points, sigma range, max / median kernel error (and where), and the
    table's max error against the kernel and the reference on the points it answers itself."""
    summary = {}
    for name in dict.fromkeys(r["likelihood"] for r in records):
        rs = [r for r in records if r["likelihood"] == name]
        k = np.array([r["kernel_rel_err"] for r in rs])
        worst = rs[int(np.argmax(k))]
        s = {
            "points": len(rs),
            "sigma_min": min(r["sigma"] for r in rs),
            "sigma_max": max(r["sigma"] for r in rs),
            "kernel_max_rel_err": float(k.max()),
            "kernel_median_rel_err": float(np.median(k)),
            "kernel_worst_point": {a: worst[a] for a in ("mu", "sigma", "y")},
            "kernel_points_above_tol": int(np.sum(k > TOL)),
            "reference_cpu_s": round(sum(r["reference_cpu_s"] for r in rs), 1),
        }
        if "in_table" in rs[0]:
            ins = [r for r in rs if r["in_table"]]
            s["table_points"] = len(ins)
            s["table_fallbacks"] = len(rs) - len(ins)
            if ins:
                s["table_max_rel_err_vs_kernel"] = max(r["table_rel_err_vs_kernel"] for r in ins)
                s["table_max_rel_err_vs_reference"] = max(
                    r["table_rel_err_vs_reference"] for r in ins
                )
        summary[name] = s
    return summary


def print_summary(summary: dict[str, dict], out=sys.stdout) -> None:
    """The summary as a plain-text table."""
    print(f"{'likelihood':30s} {'pts':>4s} {'sigma range':>17s} {'kernel max':>10s} {'median':>8s} {'>1e-12':>6s} "
          f"{'table pts':>9s} {'table-kernel':>12s} {'table-mpmath':>12s} {'ref cpu s':>9s}", file=out)  # fmt: skip
    for name, s in summary.items():
        tk = s.get("table_max_rel_err_vs_kernel")
        tr = s.get("table_max_rel_err_vs_reference")
        print(f"{name:30s} {s['points']:4d} {s['sigma_min']:8.1e}-{s['sigma_max']:8.1e} "
              f"{s['kernel_max_rel_err']:10.1e} {s['kernel_median_rel_err']:8.1e} {s['kernel_points_above_tol']:6d} "
              f"{s.get('table_points', 0):4d}/{s['points']:<4d} "
              f"{'-' if tk is None else f'{tk:.1e}':>12s} {'-' if tr is None else f'{tr:.1e}':>12s} "
              f"{s['reference_cpu_s']:9.1f}", file=out)  # fmt: skip


def plot(records: list[dict], path: Path) -> None:
    """Two panels against sigma: the kernel's relative error against mpmath, and the shipped
    tables' against the kernel (points the tables answer themselves), with the 1e-12 line;
    exact agreement is drawn at :data:`FLOOR`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(r["likelihood"] for r in records))
    markers = "osD^vP"
    fig, (ax_k, ax_t) = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for i, name in enumerate(names):
        rs = [r for r in records if r["likelihood"] == name]
        kw = {"marker": markers[i % len(markers)], "s": 16, "alpha": 0.75, "color": f"C{i}"}
        ax_k.scatter(
            [r["sigma"] for r in rs],
            [max(r["kernel_rel_err"], FLOOR) for r in rs],
            label=name,
            **kw,
        )
        ins = [r for r in rs if r.get("in_table")]
        n_out = len(rs) - len(ins)
        label = name + (f" ({n_out} outside)" if n_out else "")
        ax_t.scatter(
            [r["sigma"] for r in ins],
            [max(r["table_rel_err_vs_kernel"], FLOOR) for r in ins],
            label=label,
            **kw,
        )
    for ax in (ax_k, ax_t):
        ax.axhline(TOL, color="k", ls="--", lw=1, label=f"{TOL:g} target")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_ylim(FLOOR / 3, 1e-8)
        ax.set_xlabel("cavity standard deviation sigma")
        ax.grid(True, which="major", alpha=0.3)
    ax_k.set_ylabel(f"relative error (0 drawn at {FLOOR:g})")
    ax_k.set_title(f"exact kernel qpinfer.sigma_qp vs mpmath ({DPS} digits)", fontsize=10)
    ax_t.set_title("shipped v2 tables vs the exact kernel", fontsize=10)
    ax_k.legend(fontsize=7, loc="upper right", ncol=2)
    ax_t.legend(fontsize=7, loc="upper right", ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _commit() -> str | None:
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path, required=True, help="where to write every point")
    ap.add_argument("--png", type=Path, required=True, help="where to draw the figure")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    points = make_points(args.seed)
    print(f"{len(points)} points; mpmath at {DPS} digits ...", file=sys.stderr, flush=True)
    t_wall, t_cpu = time.perf_counter(), time.process_time()

    def log(i, rec):
        if rec["reference_cpu_s"] > 5 or (i + 1) % 50 == 0:
            print(f"  [{i + 1}/{len(points)}] {rec['likelihood']} sigma={rec['sigma']:.3g}: "
                  f"{rec['reference_cpu_s']:.1f} s", file=sys.stderr, flush=True)  # fmt: skip

    records = evaluate(points, log=log)
    summary = summarise(records)
    doc = {
        "command": " ".join(["python", "benchmarks/accuracy_scan.py", *argv]),
        "seed": args.seed,
        "dps": DPS,
        "taus": list(TAUS),
        "specs": {k: asdict(v) for k, v in SPECS.items()},
        "qpinfer_version": qpinfer.__version__,
        "git_commit": _commit(),
        "wall_seconds": round(time.perf_counter() - t_wall, 1),
        "cpu_seconds": round(time.process_time() - t_cpu, 1),
        "summary": summary,
        "points": records,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(doc, indent=1) + "\n")
    args.png.parent.mkdir(parents=True, exist_ok=True)
    plot(records, args.png)
    print_summary(summary)
    print(f"{len(records)} points, {doc['cpu_seconds']} s CPU ({doc['wall_seconds']} s wall); "
          f"wrote {args.json} and {args.png}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
