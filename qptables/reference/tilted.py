"""The likelihood-independent mpmath engine of the references: sigma* and the tilted moments of
any tilted density given as a log density.

A *model* is an object with ``ell(f)``, the unnormalised log tilted density ``log p(y|f) +
log N(f | mu, sigma^2)`` in mpmath (Zhang et al. (2020): ``q(f) = p(y|f) N(f | mu, sigma^2) / Z``), and
optionally ``shift`` (the model integrates in ``f - shift``; default 0). Models laid out by
:func:`mode_layout` also have ``modes()`` (the local maxima of ``ell``), ``neg_curvature(f)``
(``-ell''(f)``, positive near each mode) and ``graded_cuts`` (cuts at ``+-2^k`` about a step of
the likelihood at ``f = 0``); :class:`Tilted` is their common base. The likelihoods' models live
in :mod:`~qptables.reference.sigma` (probit, Poisson square link),
:mod:`~qptables.reference.logit` (logit, Poisson log link) and
:mod:`~qptables.reference.student_t`; this module never imports them.

Algorithm (composite Clenshaw-Curtis / spectral cumulative integration):

1. *Layout.* The ends ``L < R`` beyond which ``log q`` is more than ``T = ln(10) * (dps + 15)``
   below its maximum (the mass outside ``[L, R]`` is below ``10^-(dps+15)``), found by doubling
   and bisection from the extreme modes (:func:`tail_end`); cuts at the modes, at ``f = 0`` and
   the model's graded cuts (:func:`mode_layout`; Student-t has its own layout).
2. *Panels.* The pieces between cuts are bisected adaptively until, on every panel, the last
   three Chebyshev coefficients of the (max-normalised) density at ``N + 1`` Chebyshev-Lobatto
   points are below ``10^-(dps+3)`` in absolute terms (relative to the mass scale).
3. *Tilted CDF.* On each panel the polynomial interpolant of the density is integrated exactly
   from the panel's left end to every node (a precomputed spectral integration matrix,
   :func:`qptables.reference.mp_panels.rule`), so ``F`` is known at every node to ~``dps``
   digits in *absolute* terms. The survival function ``S`` is accumulated independently from the
   right end (never formed as ``1 - F``), and ``u = min(F, S)`` is what enters
   ``phi(Phi^{-1}(.))``, which is symmetric under ``u -> 1 - u``.
4. *Eq. (7).* ``phi(Phi^{-1}(u))`` is evaluated at the nodes (``Phi^{-1}`` by Halley's iteration
   on ``mpmath.ncdf`` from a double-precision start) and integrated by the Clenshaw-Curtis rule of
   the same panel; a panel whose integrand is not resolved is bisected and the pass repeated.
   The absolute error of ``F`` only enters through ``|d/du phi(Phi^{-1}(u))| = |Phi^{-1}(u)|``,
   which is at most ~15 on the retained range, so an absolute accuracy of ``F`` of ``10^-(dps+3)``
   gives ~``dps`` significant digits of ``sigma*``.
5. *Moments.* ``Z``, the mean and the variance come from the same panels (Clenshaw-Curtis on the
   nodes, centred second moment).

The numerical work happens at ``dps + 15`` decimal digits (:func:`evaluate`); results are
returned as ``mpmath.mpf`` rounded to ``dps`` digits. mpmath's working precision is
process-global, so evaluations must not run in threads of one process at the same time.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable
from typing import Any, NamedTuple

import mpmath
from mpmath import mp, mpf

from qptables.reference.mp_panels import phi_of_ndtri, rule, to_fixed

__all__ = [
    "DEFAULT_NODES",
    "GUARD_DIGITS",
    "ReferencePoint",
    "Tilted",
    "bisect_decreasing",
    "evaluate",
    "integrate_tilted",
    "mode_layout",
    "tail_end",
]

GUARD_DIGITS = 15  # extra working digits beyond the requested dps
DEFAULT_NODES = 64  # Chebyshev-Lobatto panels have N + 1 nodes
_MAX_PANELS = 4000
_MAX_SWEEPS = 40  # rounds of bisecting panels whose eq. (7) integrand is unresolved
_START_WIDTH = 16  # initial panel width in units of the main mode's curvature scale


class ReferencePoint(NamedTuple):
    """High-precision values at one cavity point (all ``mpmath.mpf``)."""

    sigma_qp: mpf  # eq. (7)
    log_z: mpf  # log of the tilted normaliser
    mean: mpf  # tilted mean (= QP and EP mean)
    std: mpf  # tilted standard deviation (= EP's sigma)
    panels: int  # number of quadrature panels used (diagnostic)


class Tilted:
    """Base of the models laid out by :func:`mode_layout`: the cavity ``N(mu, sigma^2)`` of one
    point with label ``y``, and ``const = log`` of the Gaussian's normaliser. Subclasses define
    ``ell``, ``neg_curvature`` and ``modes`` (module docstring)."""

    graded_cuts = False  # a step of the likelihood at f = 0: cuts at +-2^k about it

    def __init__(self, name: str, mu: mpf, sigma: mpf, y: int) -> None:
        self.name, self.mu, self.sigma, self.y = name, mu, sigma, y
        self.const = -mpmath.log(sigma) - mpmath.log(2 * mp.pi) / 2


def bisect_decreasing(derivative: Callable[[mpf], mpf], lo: mpf, hi: mpf, steps: int) -> mpf:
    """The root in ``[lo, hi]`` of a decreasing ``derivative`` (of ``ell``: its mode), by at most
    ``steps`` bisections (fewer once the bracket cannot shrink at the working precision)."""
    for _ in range(steps):
        mid = (lo + hi) / 2
        if mid in (lo, hi):
            break
        if derivative(mid) > 0:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def tail_end(model: Any, m: mpf, step: mpf, direction: int, level: mpf) -> mpf:
    """Where ``model.ell`` falls below ``level`` going from ``m`` in ``direction`` (+-1): the
    distance doubled from ``step`` until below, then 12 bisections; returns a point below."""
    d = step
    while model.ell(m + direction * d) > level:
        d *= 2
    lo, hi = d / 2, d  # ell(m + dir*lo) above level (or lo = step/2 near m), hi below
    for _ in range(12):
        mid = (lo + hi) / 2
        if model.ell(m + direction * mid) > level:
            lo = mid
        else:
            hi = mid
    return m + direction * hi


def mode_layout(model: Tilted, digits: int) -> tuple[list[mpf], mpf, mpf]:
    """Breakpoints ``[L, ..., R]``, the max of ``ell`` and a length scale of the main mode, for a
    model with ``modes`` (step 1 of the module docstring)."""
    modes = model.modes()
    ells = [model.ell(m) for m in modes]
    ell_max = max(ells)
    drop = mpf(digits) * mpmath.log(10)
    kept = [(m, e) for m, e in zip(modes, ells) if e > ell_max - drop]
    scales = [1 / mpmath.sqrt(model.neg_curvature(m)) for m, _ in kept]
    s_ref = scales[[e for _, e in kept].index(max(e for _, e in kept))]
    left = tail_end(model, kept[0][0], scales[0], -1, ell_max - drop)
    right = tail_end(model, kept[-1][0], scales[-1], +1, ell_max - drop)
    cuts = {left, right}
    for m, _ in kept:
        cuts.add(m)
    if left < 0 < right:
        cuts.add(mpf(0))
    if model.graded_cuts:
        # a step of width ~1 at f = 0; graded cuts +-2^k about it keep the adaptive bisection
        # from needing log2(sigma) rounds to reach it in a wide cavity
        k = 1
        while k < max(-left, right):
            cuts.update(c for c in (mpf(k), mpf(-k)) if left < c < right)
            k *= 2
    return sorted(cuts), ell_max, s_ref


def integrate_tilted(
    model,
    cuts: list,
    ell_max: mpf,
    s_ref: mpf,
    rule: Any,
    dps: int,
    digits: int,
    *,
    what: str,
    start_width: float = _START_WIDTH,
    cutoff: mpf | None = None,
    max_panels: int = _MAX_PANELS,
) -> tuple[mpf, mpf, mpf, mpf, int]:
    """The adaptive panel engine (steps 2-5 of the module docstring) for any tilted ``model``
    (``model.ell(f)`` its log density up to a constant, ``ell_max`` its maximum, ``cuts`` the
    panel layout, ``s_ref`` the length scale of the absolute tolerance): ``(sigma*, log Z, mean,
    std, panels)`` at the working precision (call inside ``mp.workdps(digits)``). ``cutoff``: log
    density (below ``ell_max``) under which the density is taken as 0 (default ``-4.62
    digits``); ``what`` names the point in the non-convergence error."""
    tol = s_ref * mpf(10) ** (-(dps + 3))

    floor_e = -2 * mpf(digits) * 2.31 if cutoff is None else cutoff

    def density(a: mpf, b: mpf) -> tuple[list, list]:
        c, r = (a + b) / 2, (b - a) / 2
        fs = [c + r * t for t in rule.nodes]
        fs[0], fs[-1] = a, b
        qs = []
        for f in fs:
            e = model.ell(f) - ell_max
            qs.append(mpmath.exp(e) if e > floor_e else mpf(0))
        return fs, qs

    def resolved(a: mpf, b: mpf, values: list, scale: mpf) -> bool:
        tail = sum(abs(mpmath.fdot(row, values)) for row in rule.tails)
        return (b - a) * tail <= scale

    # initial pieces: segments between cuts, at most start_width * s_ref wide
    pieces = []
    for a, b in itertools.pairwise(cuts):
        k = max(1, min(64, int(mpmath.ceil((b - a) / (start_width * s_ref)))))
        pieces += [(a + (b - a) * i / k, a + (b - a) * (i + 1) / k) for i in range(k)]
    pieces[-1] = (pieces[-1][0], cuts[-1])

    def refine(todo: list) -> list:
        done = []
        while todo:
            a, b = todo.pop()
            fs, qs = density(a, b)
            if resolved(a, b, qs, tol) or len(done) + len(todo) > max_panels:
                done.append((a, b, fs, qs))
            else:
                m = (a + b) / 2
                todo += [(a, m), (m, b)]
        return done

    panels = sorted(refine(pieces), key=lambda p: p[0])
    floor = mpf(10) ** (-(digits + 5))
    # phi(Phi^-1(u)) values per panel, kept across sweeps: splitting a panel whose outer
    # integrand is unresolved changes F elsewhere only at the 10^-(dps+3) level.
    g_cache: dict = {}
    local_cache: dict = {}
    g_memo: dict = {}  # u -> phi(Phi^-1(u)); u repeats exactly where the density is 0
    for _sweep in range(_MAX_SWEEPS):
        if len(panels) > max_panels:
            raise RuntimeError(f"reference quadrature did not converge for {what}")
        half = [(b - a) / 2 for a, b, _, _ in panels]
        local = []
        for h, (a, b, _, qs) in zip(half, panels):
            if (a, b) not in local_cache:
                # absolute accuracy is all that is needed: exact integer fixed-point products
                bits = rule.fixed_bits
                qi = [to_fixed(q, bits) for q in qs]
                local_cache[(a, b)] = [
                    h * mpf((sum(map(operator.mul, row, qi)), -2 * bits))
                    for row in rule.cumulative_fixed
                ]
            local.append(local_cache[(a, b)])
        totals = [loc[-1] for loc in local]
        z = mpmath.fsum(totals)
        # F from the left, S from the right (each an independent running sum)
        before, acc = [], mpf(0)
        for tot in totals:
            before.append(acc)
            acc += tot
        after, acc = [mpf(0)] * len(totals), mpf(0)
        for i in range(len(totals) - 1, -1, -1):
            after[i] = acc
            acc += totals[i]
        outer, redo = [], set()
        for i, (a, b, _, _) in enumerate(panels):
            gs = g_cache.get((a, b))
            if gs is None:
                gs = []
                for loc in local[i]:
                    cdf = (before[i] + loc) / z
                    sf = (after[i] + (totals[i] - loc)) / z
                    u = min(cdf, sf)
                    if u not in g_memo:
                        g_memo[u] = phi_of_ndtri(u, floor)
                    gs.append(g_memo[u])
                g_cache[(a, b)] = gs
                if not resolved(a, b, gs, tol):
                    redo.add(i)
            outer.append(half[i] * mpmath.fdot(rule.weights, gs))
        if not redo:
            break
        new = []
        for i, p in enumerate(panels):
            if i in redo:
                a, b = p[0], p[1]
                m = (a + b) / 2
                new += refine([(a, m), (m, b)])
            else:
                new.append(p)
        panels = sorted(new, key=lambda p: p[0])
    else:
        raise RuntimeError(f"reference quadrature did not converge for {what}")
    sigma_qp = mpmath.fsum(outer)
    mean = (
        mpmath.fsum(
            h * mpmath.fdot(rule.weights, [f * q for f, q in zip(fs, qs)])
            for h, (_, _, fs, qs) in zip(half, panels)
        )
        / z
    )
    var = (
        mpmath.fsum(
            h * mpmath.fdot(rule.weights, [(f - mean) ** 2 * q for f, q in zip(fs, qs)])
            for h, (_, _, fs, qs) in zip(half, panels)
        )
        / z
    )
    std = mpmath.sqrt(var)
    return sigma_qp, mpmath.log(z) + ell_max, mean, std, len(panels)


def evaluate(
    make_model: Callable[[], Any],
    layout: Callable[[Any, int], tuple[list, mpf, mpf]],
    dps: int,
    nodes: int,
    *,
    what: str,
    **engine: Any,
) -> ReferencePoint:
    """One reference point: at ``dps + 15`` digits, the model ``make_model()`` laid out by
    ``layout(model, digits)`` (``(cuts, ell_max, s_ref)``) and integrated by
    :func:`integrate_tilted` on panels of degree ``nodes`` (``engine``: its keyword options);
    the mean shifted back by ``model.shift``; everything rounded to ``dps`` digits."""
    digits = dps + GUARD_DIGITS
    with mp.workdps(digits):
        panel_rule = rule(nodes, mp.prec)
        model = make_model()
        cuts, ell_max, s_ref = layout(model, digits)
        sigma_qp, log_z, mean, std, n_panels = integrate_tilted(
            model, cuts, ell_max, s_ref, panel_rule, dps, digits, what=what, **engine
        )
        mean += getattr(model, "shift", 0)  # a model integrating in f - shift (the log link)
        log_z += getattr(model, "log_offset", 0)  # ... with ell relative to its log offset
    with mp.workdps(dps):
        return ReferencePoint(+sigma_qp, +log_z, +mean, +std, n_panels)
