"""Independent high-precision (mpmath) reference for sigma* and the tilted moments: the
probit and Poisson (square link) models, and the dispatch over every likelihood's reference.

This module is the yardstick that ``qpinfer``'s double-precision kernel and the published tables
are checked against. It shares no numerics with ``qpinfer``: everything is evaluated in mpmath
arbitrary-precision arithmetic by a different algorithm, the panel engine of
:mod:`qptables.reference.tilted` (adaptive Chebyshev-Lobatto panels, the tilted CDF by spectral
cumulative integration from both ends, eq. (7) by Clenshaw-Curtis).

What is computed (paper 000, Quantile Propagation):

* the tilted distribution ``q(f) = p(y|f) N(f | mu, sigma^2) / Z`` for a cavity mean ``mu`` and
  cavity *standard deviation* ``sigma``;
* ``log Z``, the tilted mean and standard deviation (EP's projection, App. C eqs. (27)-(34));
* the QP standard deviation of eq. (7), ``sigma* = int phi(Phi^{-1}(F(f))) df`` with ``F`` the
  tilted CDF.

Likelihoods (App. C.1, C.2): ``"probit"`` ``p(y|f) = Phi(y f)``, ``y in {-1, +1}``; and
``"poisson_square"`` ``p(y|f) = f^(2y) exp(-f^2) / y!``, ``y in {0, 1, 2, ...}``; their modes
are found here (probit: one, by bisection on the monotone derivative; Poisson: the two roots of a
quadratic, one each side of 0, or one Gaussian mode for ``y = 0``), and the layout cuts at them
and at ``f = 0`` (the likelihood transition / the Poisson zero). ``"logit"`` and
``"poisson_log"`` go to the models of :mod:`qptables.reference.logit`, step-noise names to
:mod:`qptables.reference.step_noise` (Student-t has its own entry point,
:func:`qptables.reference.student_t.student_t_reference`).

:func:`tilted_moments_reference` can instead return the closed forms (probit: App. C.1 eq.
(35)-(36) and Rasmussen & Williams eq. (3.58); Poisson: Gaussian moments of ``N(beta, alpha/2)``
weighted by ``f^(2y)``, App. C.2 eqs. (50)-(55)), which the tests use to cross-check the
quadrature.

With the default ``dps = 40`` the results agree with runs at other precisions / panel sizes to
better than 1e-30 relative (see ``tests/reference/test_reference.py``); the claim made to users is 25
significant digits. A typical evaluation takes 0.1-0.5 s of CPU.

mpmath's working precision is process-global, so evaluations are serialised within a process
(safe to call from threads, but parallelise with processes).
"""

from __future__ import annotations

import math
import threading
from functools import lru_cache

import mpmath
from mpmath import mp, mpf

from qptables.reference.logit import MODELS as LOGIT_MODELS
from qptables.reference.tilted import (
    DEFAULT_NODES,
    ReferencePoint,
    Tilted,
    bisect_decreasing,
    evaluate,
    mode_layout,
)

__all__ = [
    "LIKELIHOODS",
    "ReferencePoint",
    "reference_point",
    "sigma_qp_reference",
    "tilted_moments_reference",
]

LIKELIHOODS = ("probit", "poisson_square")

# mpmath's working precision is process-global (``mp.prec``), so evaluations in threads of one
# process would clobber each other's precision: they are serialised. Parallelise with processes.
_LOCK = threading.RLock()


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


class _ProbitTilted(Tilted):
    """``ell(f) = log Phi(y f) + log N(f | mu, sigma^2)`` (App. C.1)."""

    graded_cuts = True  # the step of Phi(y f) at f = 0 has width 1

    def ell(self, f: mpf) -> mpf:
        gauss = -((f - self.mu) ** 2) / (2 * self.sigma**2) + self.const
        return mpmath.log(mpmath.ncdf(self.y * f)) + gauss

    def neg_curvature(self, f: mpf) -> mpf:
        """``-ell''(f)`` (positive: ``ell`` is concave)."""
        t = self.y * f
        lam = mpmath.npdf(t) / mpmath.ncdf(t)
        return lam * (t + lam) + 1 / self.sigma**2

    def modes(self) -> list[mpf]:
        """The one maximum of ``ell``: ``ell'(f) = y lam(y f) - (f - mu)/s2`` is strictly
        decreasing; its root lies between ``mu`` and ``mu + y s2 lam(y mu)``."""
        mu, s2, y = self.mu, self.sigma**2, self.y

        def dell(f: mpf) -> mpf:
            t = y * f
            return y * mpmath.npdf(t) / mpmath.ncdf(t) - (f - mu) / s2

        a, b = mu, mu + y * s2 * mpmath.npdf(y * mu) / mpmath.ncdf(y * mu)
        return [bisect_decreasing(dell, *((a, b) if a < b else (b, a)), steps=200)]


class _PoissonSquareTilted(Tilted):
    """``ell(f) = 2y log|f| - f^2 - log y! + log N(f | mu, sigma^2)`` (App. C.2)."""

    def __init__(self, name: str, mu: mpf, sigma: mpf, y: int) -> None:
        super().__init__(name, mu, sigma, y)
        self.const -= mpmath.loggamma(y + 1)

    def ell(self, f: mpf) -> mpf:
        gauss = -((f - self.mu) ** 2) / (2 * self.sigma**2) + self.const
        if self.y == 0:
            return gauss - f * f
        if f == 0:
            return mpf("-inf")
        return self.y * mpmath.log(f * f) - f * f + gauss

    def neg_curvature(self, f: mpf) -> mpf:
        """``-ell''(f)`` (positive on each side of 0)."""
        extra = 2 * self.y / (f * f) if self.y else 0
        return extra + 2 + 1 / self.sigma**2

    def modes(self) -> list[mpf]:
        """One Gaussian mode for ``y = 0``; otherwise one each side of 0."""
        mu, s2, y = self.mu, self.sigma**2, self.y
        a = 2 + 1 / s2
        if y == 0:
            return [mu / (s2 * a)]
        # f * ell'(f) = 2y - a f^2 + (mu/s2) f = 0 ; roots of opposite sign, product -2y/a
        b = mu / s2
        disc = mpmath.sqrt(b * b + 8 * y * a)
        big = (b + disc) / (2 * a) if b >= 0 else (b - disc) / (2 * a)
        small = -2 * y / (a * big)
        return sorted([big, small])


#: the model of each likelihood the panel engine integrates (issue #15: logit and the log link
#: in :mod:`qptables.reference.logit`)
_MODELS: dict = {"probit": _ProbitTilted, "poisson_square": _PoissonSquareTilted, **LOGIT_MODELS}


# ----------------------------------------------------------------------------- the dispatch


def _compute(name: str, mu: float, sigma: float, y: int, dps: int, n: int) -> ReferencePoint:
    return evaluate(
        lambda: _MODELS[name](name, mpf(mu), mpf(sigma), y),
        mode_layout,
        dps,
        n,
        what=f"{name} mu={mu} sigma={sigma} y={y}",
    )


@lru_cache(maxsize=4096)
def _cached(name: str, mu: float, sigma: float, y: int, dps: int, n: int) -> ReferencePoint:
    return _compute(name, mu, sigma, y, dps, n)


def reference_point(
    likelihood_name: str, mu: float, sigma: float, y: int, dps: int = 40, nodes: int = DEFAULT_NODES
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
