"""Accuracy and size of the Poisson (square link) and step-noise v2 boxes (issue #13).

Builds ``rho = sigma* / sigma_EP`` with the exact kernel at the Chebyshev-Gauss nodes of every
box of :func:`qpinfer.likelihoods.poisson_square.boxes.poisson_boxes` (all counts 1..1000) or
:func:`qpinfer.likelihoods.poisson_square.boxes.step_noise_boxes`, then compares the interpolant with the kernel
at random points of each box: coordinates uniform on the box's axis, counts log-uniform on
1..1000 plus 1, 2 and 1000 (a tenth of the points each). With ``--random-sigma`` the test
cavities have sigma log-uniform in [1e-3, 1e3] and go through ``Box.locate`` (the lookup path;
it then also measures the EP std's own variation with sigma at fixed r).

``student_t``: the 2-D boxes of the Student-t gap, s in [1e3, 1e10] with z < 25
(:func:`qpinfer.likelihoods.student_t.boxes.gap_boxes`, issue #27): rho at every node, then random
cavities with ``log10 s`` uniform on [3, 10] and z uniform on [0, 25], each looked up in the first
box that holds it (the reader's order), against the kernel.

Examples (the configurations of docs/development/tables-v2.md)::

    OPENBLAS_NUM_THREADS=1 python benchmarks/probe_v2_boxes.py poisson_square
    OPENBLAS_NUM_THREADS=1 python benchmarks/probe_v2_boxes.py step_noise --eps 0.2
    OPENBLAS_NUM_THREADS=1 python benchmarks/probe_v2_boxes.py student_t --points 100000
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import qpinfer
from qpinfer.likelihoods.poisson_square.boxes import MAX_COUNT, poisson_boxes
from qpinfer.likelihoods.step_noise.boxes import step_noise_boxes
from qpinfer.likelihoods.student_t.boxes import gap_boxes
from qpinfer.tables.chebyshev import coefficients, evaluate, tail_size


def ratio(lik, mu, sigma, y) -> np.ndarray:
    q = qpinfer.sigma_qp(lik, mu, sigma, y)
    _, ep = qpinfer.tilted_moments(lik, mu, sigma, y)
    return q / ep


def box_values(lik, box) -> np.ndarray:
    """rho at the box's nodes: shape (labels, nodes)."""
    (ax,) = box.axes
    x = ax.nodes()
    out = np.empty((len(box.labels), x.size))
    for i, label in enumerate(box.labels):
        mu, sigma = box.cavity(label, x)
        out[i] = ratio(lik, mu, sigma, np.full(x.size, label))
    return out


def interpolate(coef, box, label_index, x) -> np.ndarray:
    """The interpolant of label ``label_index`` at box coordinates ``x`` (1-D boxes)."""
    out = np.empty(x.shape)
    for k in np.unique(label_index):
        sel = label_index == k
        out[sel] = evaluate(coef[k], box.axes, (x[sel],))
    return out


def random_labels(rng, box, n) -> np.ndarray:
    labels = np.asarray(box.labels)
    if labels.size == 1:
        return np.zeros(n, dtype=np.intp)
    top = labels.size
    idx = np.floor(np.exp(rng.uniform(0.0, np.log(top + 1.0), n))).astype(np.intp) - 1
    idx = np.clip(idx, 0, top - 1)
    k = n // 10
    idx[:k], idx[k : 2 * k], idx[2 * k : 3 * k] = 0, min(1, top - 1), top - 1
    return idx


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("likelihood", choices=["poisson_square", "step_noise", "student_t"])
    p.add_argument("--eps", type=float, default=0.2, help="step_noise eps")
    p.add_argument("--points", type=int, default=200_000, help="random test points per box")
    p.add_argument("--max-count", type=int, default=MAX_COUNT, help="Poisson counts 1..N")
    p.add_argument("--worst", type=int, default=0, help="print the N worst points per box")
    p.add_argument("--random-sigma", action="store_true", help="test through Box.locate")
    args = p.parse_args(argv)
    if args.likelihood == "student_t":
        return student_t_gap(args.points, args.worst)
    if args.likelihood == "poisson_square":
        lik = qpinfer.get_likelihood("poisson_square")
        boxes = poisson_boxes(args.max_count)
    else:
        lik = qpinfer.get_likelihood(f"step_noise(eps={args.eps!r})")
        boxes = step_noise_boxes(args.eps)
    rng = np.random.default_rng(0)
    total = 0
    print(f"{lik.name}: box | cells x nodes | values | MB | max rel err | 99.9% | where | tail")
    for box in boxes:
        (ax,) = box.axes
        t = time.perf_counter()
        values = box_values(lik, box)
        t_build = time.perf_counter() - t
        total += values.size
        coef = np.stack([coefficients(v, box.axes) for v in values])
        labels = np.asarray(box.labels)
        li = random_labels(rng, box, args.points)
        x = rng.uniform(ax.start, ax.stop, args.points)
        y = labels[li]
        mu, sigma = box.cavity(1.0, x) if labels.size == 1 else _cavities(box, labels, li, x)
        if args.random_sigma:  # the same reduced coordinate at another sigma, then locate
            s = 10.0 ** rng.uniform(-3.0, 3.0, args.points)
            mu = mu / _unit(args.likelihood, sigma) * _unit(args.likelihood, s)
            sigma = s
            inside, li2, (x,) = box.locate(mu, sigma, y)
            keep = inside & (li2 == li)
            print(f"  {keep.size - keep.sum()} points left the box through rounding (dropped)")
            mu, sigma, y, li, x = mu[keep], sigma[keep], y[keep], li[keep], x[keep]
        exact = ratio(lik, mu, sigma, y)
        err = np.abs(interpolate(coef, box, li, x) / exact - 1.0)
        i = int(np.argmax(err))
        tails = max(tail_size(c, box.axes).max() for c in coef)
        print(
            f"{box.name}: {ax.name} [{ax.start:g}, {ax.stop:g}] | {ax.n_cells} x {ax.n} | "
            f"{values.size} | {values.nbytes / 1e6:.2f} | {err.max():.1e} | "
            f"{np.quantile(err, 0.999):.1e} | y={y[i]:g}, {ax.name}={x[i]:.4f} | {tails:.0e} "
            f"(kernel {t_build:.1f} s)",
            flush=True,
        )
        worst = np.argsort(err)[::-1][: args.worst]
        if args.worst:
            print(
                "  worst: "
                + ", ".join(f"y={y[j]:g} {ax.name}={x[j]:.4f} {err[j]:.1e}" for j in worst)
            )
    print(f"total {total} values, {total * 8 / 1e6:.2f} MB")


def student_t_gap(points: int, worst: int) -> None:
    """The Student-t gap boxes (module docstring), scale 1."""
    lik = qpinfer.get_likelihood("student_t(nu=4.0, scale=1.0)")
    boxes, coefs = gap_boxes(), []
    print(f"{lik.name}: box | cells x nodes | values | MB | kernel s")
    for box in boxes:
        t = time.perf_counter()
        grids = np.meshgrid(*(ax.nodes() for ax in box.axes), indexing="ij")
        mu, sigma = box.cavity(0.0, *(g.ravel() for g in grids))
        values = ratio(lik, mu, sigma, np.zeros_like(mu)).reshape(grids[0].shape)
        coefs.append(coefficients(values, box.axes))
        cells = " x ".join(f"{ax.name} [{ax.start:g}, {ax.stop:g}] {ax.n_cells}" for ax in box.axes)
        print(
            f"{box.name}: {cells} x {box.axes[0].n}^2 | {values.size} | {values.nbytes / 1e6:.2f}"
            f" | {time.perf_counter() - t:.0f}",
            flush=True,
        )
    rng = np.random.default_rng(0)
    s = 10.0 ** rng.uniform(3.0, 10.0, points)
    mu = rng.uniform(0.0, 25.0, points) * np.hypot(1.0, s)
    got, which = np.full(points, np.nan), np.full(points, -1)
    for k, (box, coef) in enumerate(zip(boxes, coefs, strict=True)):
        coords = box.axis_coords(mu, s, 0.0)
        inside = box._inside_axes(coords) & (which < 0)
        which[inside] = k
        got[inside] = evaluate(coef, box.axes, tuple(c[inside] for c in coords))
    err = np.abs(got / ratio(lik, mu, s, np.zeros_like(mu)) - 1.0)  # NaN: in no box
    print(f"{points} points: max rel err {err.max():.1e}, 99.9% {np.quantile(err, 0.999):.1e}")
    z = mu / np.hypot(1.0, s)
    for k, box in enumerate(boxes):
        sel = np.flatnonzero(which == k)
        order = sel[np.argsort(err[sel])[::-1]]
        print(f"  {box.name}: {sel.size} points, max {err[order[0]]:.1e}")
        for j in order[:worst]:
            print(f"    z={z[j]:.4f} log10 s={np.log10(s[j]):.4f} {err[j]:.1e}")
    print(
        f"total {sum(c.size for c in coefs)} values, {sum(c.size for c in coefs) * 8 / 1e6:.2f} MB"
    )


def _unit(likelihood, sigma):
    """mu per unit of the reduced coordinate: r = mu / unit (Poisson), z = mu / unit."""
    if likelihood == "poisson_square":
        return sigma * np.hypot(1.0, np.sqrt(2.0) * sigma)
    return sigma


def _cavities(box, labels, li, x):
    mu, sigma = np.empty(x.shape), np.empty(x.shape)
    for k in np.unique(li):
        sel = li == k
        mu[sel], sigma[sel] = box.cavity(labels[k], x[sel])
    return mu, sigma


if __name__ == "__main__":
    main()
