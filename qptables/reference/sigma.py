# Over 400 lines: one reference per likelihood kept together (the dispatch new likelihoods extend).
"""Independent high-precision (mpmath) reference for sigma* and the tilted moments.

This module is the yardstick that ``qpinfer``'s double-precision kernel and the published tables
are checked against. It shares no numerics with ``qpinfer``: everything below is evaluated in
mpmath arbitrary-precision arithmetic by a different algorithm.

What is computed (paper 000, Quantile Propagation):

* the tilted distribution ``q(f) = p(y|f) N(f | mu, sigma^2) / Z`` for a cavity mean ``mu`` and
  cavity *standard deviation* ``sigma``;
* ``log Z``, the tilted mean and standard deviation (EP's projection, App. C eqs. (27)-(34));
* the QP standard deviation of eq. (7), ``sigma* = int phi(Phi^{-1}(F(f))) df`` with ``F`` the
  tilted CDF.

Likelihoods (App. C.1, C.2): ``"probit"`` ``p(y|f) = Phi(y f)``, ``y in {-1, +1}``; and
``"poisson_square"`` ``p(y|f) = f^(2y) exp(-f^2) / y!``, ``y in {0, 1, 2, ...}``.

Algorithm (composite Clenshaw-Curtis / spectral cumulative integration):

1. *Layout.* Locate the mode(s) of ``log q`` (probit: one, by bisection on the monotone
   derivative; Poisson: the two roots of a quadratic, one each side of 0, or one Gaussian mode for
   ``y = 0``) and the ends ``L < R`` beyond which ``log q`` is more than ``T = ln(10) * (dps + 15)``
   below its maximum, so the mass outside ``[L, R]`` is below ``10^-(dps+15)``.
2. *Panels.* ``[L, R]`` is cut at the modes and at ``f = 0`` (the likelihood transition / the
   Poisson zero) and the pieces are bisected adaptively until, on every panel, the last three
   Chebyshev coefficients of the (max-normalised) density at ``N + 1`` Chebyshev-Lobatto points are
   below ``10^-(dps+3)`` in absolute terms (relative to the mass scale).
3. *Tilted CDF.* On each panel the polynomial interpolant of the density is integrated exactly
   from the panel's left end to every node (a precomputed spectral integration matrix), so ``F``
   is known at every node to ~``dps`` digits in *absolute* terms. The survival function ``S`` is
   accumulated independently from the right end (never formed as ``1 - F``), and
   ``u = min(F, S)`` is what enters ``phi(Phi^{-1}(.))``, which is symmetric under ``u -> 1 - u``.
4. *Eq. (7).* ``phi(Phi^{-1}(u))`` is evaluated at the nodes (``Phi^{-1}`` by Halley's iteration
   on ``mpmath.ncdf`` from a double-precision start) and integrated by the Clenshaw-Curtis rule of
   the same panel; a panel whose integrand is not resolved is bisected and the pass repeated.
   The absolute error of ``F`` only enters through ``|d/du phi(Phi^{-1}(u))| = |Phi^{-1}(u)|``,
   which is at most ~15 on the retained range, so an absolute accuracy of ``F`` of ``10^-(dps+3)``
   gives ~``dps`` significant digits of ``sigma*``.
5. *Moments.* ``Z``, the mean and the variance come from the same panels (Clenshaw-Curtis on the
   nodes, centred second moment). :func:`tilted_moments_reference` can instead return the closed
   forms (probit: App. C.1 eq. (35)-(36) and Rasmussen & Williams eq. (3.58); Poisson: Gaussian
   moments of ``N(beta, alpha/2)`` weighted by ``f^(2y)``, App. C.2 eqs. (50)-(55)), which the
   tests use to cross-check the quadrature.

The numerical work happens at ``dps + 15`` decimal digits; results are returned as ``mpmath.mpf``
rounded to ``dps`` digits. With the default ``dps = 40`` the results agree with runs at other
precisions / panel sizes to better than 1e-30 relative (see ``tests/test_reference.py``); the
claim made to users is 25 significant digits. A typical evaluation takes 0.1-0.5 s of CPU.

mpmath's working precision is process-global, so evaluations are serialised within a process
(safe to call from threads, but parallelise with processes).
"""

from __future__ import annotations

import itertools
import math
import operator
import threading
from functools import lru_cache
from typing import Any, NamedTuple

import mpmath
from mpmath import mp, mpf

from qptables.reference.logit import MODELS as LOGIT_MODELS
from qptables.reference.mp_panels import phi_of_ndtri as _phi_of_ndtri
from qptables.reference.mp_panels import rule as _rule
from qptables.reference.mp_panels import to_fixed as _to_fixed

__all__ = [
    "LIKELIHOODS",
    "ReferencePoint",
    "reference_point",
    "sigma_qp_reference",
    "tilted_moments_reference",
]

LIKELIHOODS = ("probit", "poisson_square")

_GUARD_DIGITS = 15  # extra working digits beyond the requested dps
_DEFAULT_NODES = 64  # Chebyshev-Lobatto panels have N + 1 nodes
_MAX_PANELS = 4000
_MAX_SWEEPS = 40  # rounds of bisecting panels whose eq. (7) integrand is unresolved
_START_WIDTH = 16  # initial panel width in units of the main mode's curvature scale
# mpmath's working precision is process-global (``mp.prec``), so evaluations in threads of one
# process would clobber each other's precision: they are serialised. Parallelise with processes.
_LOCK = threading.RLock()


class ReferencePoint(NamedTuple):
    """High-precision values at one cavity point (all ``mpmath.mpf``)."""

    sigma_qp: mpf  # eq. (7)
    log_z: mpf  # log of the tilted normaliser
    mean: mpf  # tilted mean (= QP and EP mean)
    std: mpf  # tilted standard deviation (= EP's sigma)
    panels: int  # number of quadrature panels used (diagnostic)


# ----------------------------------------------------------------------------- validation


#: what each likelihood's label is: a class label in {-1, +1} or a count >= 0
_LABELS = {"probit": "sign", "logit": "sign", "poisson_square": "count", "poisson_log": "count"}


def _check_point(
    likelihood_name: str, mu: float, sigma: float, y: float, allowed: tuple = LIKELIHOODS
) -> tuple[str, int]:
    """Validate one point of a likelihood in ``allowed`` (``ValueError`` naming the argument);
    the label as an int."""
    if likelihood_name not in allowed:
        raise ValueError(f"likelihood_name must be one of {allowed}, got {likelihood_name!r}")
    for name, value in (("mu", mu), ("sigma", sigma)):
        if not math.isfinite(float(value)):
            raise ValueError(f"{name} must be finite, got {value!r}")
    if not float(sigma) > 0:
        raise ValueError(f"sigma must be > 0, got {sigma!r}")
    yf = float(y)
    if not math.isfinite(yf) or yf != round(yf):
        raise ValueError(f"y must be an integer label/count, got {y!r}")
    yi = round(yf)
    kind = _LABELS[likelihood_name]
    if kind == "sign" and yi not in (-1, 1):
        raise ValueError(f"y must be -1 or +1 for the {likelihood_name} likelihood, got {y!r}")
    if kind == "count" and yi < 0:
        raise ValueError(f"y must be a count >= 0 for the {likelihood_name} likelihood, got {y!r}")
    return likelihood_name, yi


# ----------------------------------------------------------------------------- log densities


class _Tilted:
    """Unnormalised log tilted density ``ell(f) = log p(y|f) + log N(f|mu, sigma^2)``."""

    def __init__(self, name: str, mu: mpf, sigma: mpf, y: int) -> None:
        self.name, self.mu, self.sigma, self.y = name, mu, sigma, y
        self.const = -mpmath.log(sigma) - mpmath.log(2 * mp.pi) / 2
        if name == "poisson_square":
            self.const -= mpmath.loggamma(y + 1)

    def ell(self, f: mpf) -> mpf:
        gauss = -((f - self.mu) ** 2) / (2 * self.sigma**2) + self.const
        if self.name == "probit":
            return mpmath.log(mpmath.ncdf(self.y * f)) + gauss
        if self.y == 0:
            return gauss - f * f
        if f == 0:
            return mpf("-inf")
        return self.y * mpmath.log(f * f) - f * f + gauss

    def neg_curvature(self, f: mpf) -> mpf:
        """``-ell''(f)`` (positive on each log-concave piece)."""
        if self.name == "probit":
            t = self.y * f
            lam = mpmath.npdf(t) / mpmath.ncdf(t)
            return lam * (t + lam) + 1 / self.sigma**2
        extra = 2 * self.y / (f * f) if self.y else 0
        return extra + 2 + 1 / self.sigma**2

    def modes(self) -> list[mpf]:
        """Local maxima of ``ell`` (one for probit / y = 0; one each side of 0 otherwise)."""
        mu, s2, y = self.mu, self.sigma**2, self.y
        if self.name == "probit":
            # ell'(f) = y * lam(y f) - (f - mu)/s2 is strictly decreasing; the root lies between
            # mu and mu + y * s2 * lam(y mu).
            def dell(f: mpf) -> mpf:
                t = y * f
                return y * mpmath.npdf(t) / mpmath.ncdf(t) - (f - mu) / s2

            a, b = mu, mu + y * s2 * mpmath.npdf(y * mu) / mpmath.ncdf(y * mu)
            lo, hi = (a, b) if a < b else (b, a)
            for _ in range(200):
                mid = (lo + hi) / 2
                if mid in (lo, hi):
                    break
                if dell(mid) > 0:
                    lo = mid
                else:
                    hi = mid
            return [(lo + hi) / 2]
        a = 2 + 1 / s2
        if y == 0:
            return [mu / (s2 * a)]
        # f * ell'(f) = 2y - a f^2 + (mu/s2) f = 0 ; roots of opposite sign, product -2y/a
        b = mu / s2
        disc = mpmath.sqrt(b * b + 8 * y * a)
        big = (b + disc) / (2 * a) if b >= 0 else (b - disc) / (2 * a)
        small = -2 * y / (a * big)
        return sorted([big, small])


# issue #15: models of other likelihoods (same interface as _Tilted), defined in their own
# modules (qptables.reference.logit); the engine below is shared
_MODELS: dict = dict(LOGIT_MODELS)


# ----------------------------------------------------------------------------- the engine


def _layout(model: _Tilted, digits: int) -> tuple[list[mpf], mpf, mpf]:
    """Breakpoints ``[L, ..., R]``, the max of ``ell`` and a length scale of the main mode."""
    modes = model.modes()
    ells = [model.ell(m) for m in modes]
    ell_max = max(ells)
    drop = mpf(digits) * mpmath.log(10)
    kept = [(m, e) for m, e in zip(modes, ells) if e > ell_max - drop]
    scales = [1 / mpmath.sqrt(model.neg_curvature(m)) for m, _ in kept]
    s_ref = scales[[e for _, e in kept].index(max(e for _, e in kept))]

    def end(m: mpf, s: mpf, direction: int) -> mpf:
        d = s
        while model.ell(m + direction * d) > ell_max - drop:
            d *= 2
        lo, hi = d / 2, d  # ell(m + dir*lo) > threshold (or lo = s/2 near the mode), hi below
        for _ in range(12):
            mid = (lo + hi) / 2
            if model.ell(m + direction * mid) > ell_max - drop:
                lo = mid
            else:
                hi = mid
        return m + direction * hi

    left = end(kept[0][0], scales[0], -1)
    right = end(kept[-1][0], scales[-1], +1)
    cuts = {left, right}
    for m, _ in kept:
        cuts.add(m)
    if left < 0 < right:
        cuts.add(mpf(0))
    if model.name == "probit" or getattr(model, "graded_cuts", False):
        # the step of Phi(y f) at f = 0 has width 1; graded cuts +-2^k about it keep the
        # adaptive bisection from needing log2(sigma) rounds to reach it in a wide cavity
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
    """The adaptive panel engine (see the module doc) for any tilted ``model`` (``model.ell(f)``
    its log density up to a constant, ``ell_max`` its maximum, ``cuts`` the panel layout,
    ``s_ref`` the length scale of the absolute tolerance): ``(sigma*, log Z, mean, std,
    panels)`` at the working precision (call inside ``mp.workdps(digits)``). ``cutoff``: log
    density (below ``ell_max``) under which the density is taken as 0 (default ``-4.62 digits``);
    ``what`` names the point in the non-convergence error. Shared by every likelihood's
    reference (:mod:`qptables.reference.student_t` too)."""
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

    # initial pieces: segments between cuts, at most _START_WIDTH * s_ref wide
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
                qi = [_to_fixed(q, bits) for q in qs]
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
                        g_memo[u] = _phi_of_ndtri(u, floor)
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


def _compute(name: str, mu: float, sigma: float, y: int, dps: int, n: int) -> ReferencePoint:
    digits = dps + _GUARD_DIGITS
    with mp.workdps(digits):
        rule = _rule(n, mp.prec)
        model = _MODELS.get(name, _Tilted)(name, mpf(mu), mpf(sigma), y)
        cuts, ell_max, s_ref = _layout(model, digits)
        what = f"{name} mu={mu} sigma={sigma} y={y}"
        sigma_qp, log_z, mean, std, n_panels = integrate_tilted(
            model, cuts, ell_max, s_ref, rule, dps, digits, what=what
        )
        mean += getattr(model, "shift", 0)  # a model integrating in f - shift (logit, log link)
    with mp.workdps(dps):
        return ReferencePoint(+sigma_qp, +log_z, +mean, +std, n_panels)


@lru_cache(maxsize=4096)
def _cached(name: str, mu: float, sigma: float, y: int, dps: int, n: int) -> ReferencePoint:
    return _compute(name, mu, sigma, y, dps, n)


def reference_point(
    likelihood_name: str,
    mu: float,
    sigma: float,
    y: int,
    dps: int = 40,
    nodes: int = _DEFAULT_NODES,
) -> ReferencePoint:
    """sigma*, log Z, tilted mean and std at one cavity point by the panel quadrature.

    ``mu`` and ``sigma`` (the cavity standard deviation) are taken as exact binary values of the
    given floats. Results are cached per process. ``nodes`` is the panel degree ``N`` (changing
    it gives an independent discretisation, used by the self-consistency tests).
    """
    name, yi = _check_point(likelihood_name, mu, sigma, y, LIKELIHOODS + tuple(LOGIT_MODELS))
    if int(dps) < 15:
        raise ValueError(f"dps must be >= 15, got {dps!r}")
    if int(nodes) < 8:
        raise ValueError(f"nodes must be >= 8, got {nodes!r}")
    with _LOCK:
        return _cached(name, float(mu), float(sigma), yi, int(dps), int(nodes))


def sigma_qp_reference(likelihood_name: str, mu: float, sigma: float, y: int, dps: int = 40) -> mpf:
    """The QP standard deviation sigma* of paper 000 eq. (7), to about ``dps`` digits.

    Step-noise names (``"step_noise(eps=0.2)"``) go to the independent closed-CDF routine of
    :mod:`qptables.reference.step_noise`.
    """
    from qpinfer.likelihoods.step_noise import parse_name

    eps = parse_name(likelihood_name)
    if eps is not None:
        from qptables.reference.step_noise import step_noise_sigma_reference

        yi = int(y)
        with _LOCK:
            return step_noise_sigma_reference(eps, float(mu), float(sigma), yi, dps=dps)
    return reference_point(likelihood_name, mu, sigma, y, dps).sigma_qp


def tilted_moments_reference(
    likelihood_name: str,
    mu: float,
    sigma: float,
    y: int,
    dps: int = 40,
    method: str = "quadrature",
) -> tuple[mpf, mpf, mpf]:
    """``(log Z, mean, std)`` of the tilted distribution (EP's projection).

    ``method="quadrature"`` (default) integrates the density on the same panels as sigma*;
    ``method="closed_form"`` uses the analytic expressions (App. C.1 / C.2).
    """
    if method == "quadrature":
        p = reference_point(likelihood_name, mu, sigma, y, dps)
        return p.log_z, p.mean, p.std
    if method != "closed_form":
        raise ValueError(f"method must be 'quadrature' or 'closed_form', got {method!r}")
    name, yi = _check_point(likelihood_name, mu, sigma, y)
    with _LOCK:
        return _closed_form(name, float(mu), float(sigma), yi, int(dps))


def _closed_form(name: str, mu: float, sigma: float, y: int, dps: int) -> tuple[mpf, mpf, mpf]:
    # generous guard digits: the variance formulas cancel when the tilt is strong
    with mp.workdps(2 * dps + 40):
        m, s = mpf(mu), mpf(sigma)
        s2 = s * s
        if name == "probit":
            # App. C.1 eq. (35)-(36); variance: Rasmussen & Williams (2006) eq. (3.58)
            z = y * m / mpmath.sqrt(1 + s2)
            cdf = mpmath.ncdf(z)
            lam = mpmath.npdf(z) / cdf
            log_z = mpmath.log(cdf)
            mean = m + y * s2 * lam / mpmath.sqrt(1 + s2)
            var = s2 - s2 * s2 * lam * (z + lam) / (1 + s2)
        else:
            # p(y|f) N(f|mu,s2) = f^(2y) c / y! N(f | beta, v), v = s2/(1+2 s2), beta = mu/(1+2 s2)
            # c = exp(-mu^2/(1+2 s2)) / sqrt(1+2 s2); moments of N(beta, v) by the binomial sum.
            beta, v = m / (1 + 2 * s2), s2 / (1 + 2 * s2)

            def raw(k: int) -> mpf:  # E[X^k], X ~ N(beta, v); all terms share one sign
                return mpmath.fsum(
                    mpmath.binomial(k, j) * beta ** (k - j) * v ** (j // 2) * mpmath.fac2(j - 1)
                    for j in range(0, k + 1, 2)
                )

            e0, e1, e2 = raw(2 * y), raw(2 * y + 1), raw(2 * y + 2)
            log_z = (
                -m * m / (1 + 2 * s2)
                - mpmath.log(1 + 2 * s2) / 2
                - mpmath.loggamma(y + 1)
                + mpmath.log(e0)
            )
            mean = e1 / e0
            var = e2 / e0 - mean * mean
        std = mpmath.sqrt(var)
    with mp.workdps(dps):
        return +log_z, +mean, +std
