"""Independent high-precision (mpmath) reference for sigma* and the tilted moments: the
probit and Poisson (square link) models, and the dispatch over every likelihood's reference.

This module is the yardstick that ``qpinfer``'s double-precision kernel and the published tables
are checked against. It shares no numerics with ``qpinfer``: everything is evaluated in mpmath
arbitrary-precision arithmetic by a different algorithm, the panel engine of
:mod:`qptables.reference.tilted` (adaptive Chebyshev-Lobatto panels, the tilted CDF by spectral
cumulative integration from both ends, eq. (7) by Clenshaw-Curtis).

What is computed (Zhang et al., 2020, Quantile Propagation):

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

from qptables.reference import (
    custom,
    logit,
    poisson_log,
    poisson_square,
    probit,
    step_noise,
    student_t,
)
from qptables.reference.tilted import DEFAULT_NODES, ReferencePoint, evaluate, mode_layout

__all__ = [
    "LIKELIHOODS",
    "REFERENCES",
    "ReferencePoint",
    "reference_point",
    "sigma_qp_reference",
    "tilted_moments_reference",
]

#: the likelihoods with closed-form moments (:func:`tilted_moments_reference`)
LIKELIHOODS = ("probit", "poisson_square")
#: likelihood family -> the module of its reference: a model of the panel engine (``MODEL``,
#: with its ``LABELS``), or ``MODEL = None`` and its own ``reference_point``
REFERENCES = {
    "probit": probit,
    "poisson_square": poisson_square,
    "logit": logit,
    "poisson_log": poisson_log,
    "step_noise": step_noise,
    "student_t": student_t,
}
_ENGINE = tuple(name for name, module in REFERENCES.items() if module.MODEL is not None)

# mpmath's working precision is process-global (``mp.prec``), so evaluations in threads of one
# process would clobber each other's precision: they are serialised. Parallelise with processes.
_LOCK = threading.RLock()


# ----------------------------------------------------------------------------- validation


def _check_point(
    likelihood_name: str, mu: float, sigma: float, y: float, allowed: tuple = LIKELIHOODS
) -> tuple[str, int]:
    """Validate one point of a likelihood in ``allowed`` (``ValueError`` naming the argument);
    the label as an int."""
    if likelihood_name not in allowed:
        raise ValueError(
            f"likelihood_name must be one of {allowed} (or a step_noise(eps=...) or "
            f"student_t(nu=..., scale=...) name), got {likelihood_name!r}"
        )
    for name, value in (("mu", mu), ("sigma", sigma)):
        if not math.isfinite(float(value)):
            raise ValueError(f"{name} must be finite, got {value!r}")
    if not float(sigma) > 0:
        raise ValueError(f"sigma must be > 0, got {sigma!r}")
    yf = float(y)
    if not math.isfinite(yf) or yf != round(yf):
        raise ValueError(f"y must be an integer label/count, got {y!r}")
    yi = round(yf)
    kind = REFERENCES[likelihood_name].LABELS  # a class in {-1, +1} or a count >= 0
    if kind == "sign" and yi not in (-1, 1):
        raise ValueError(f"y must be -1 or +1 for the {likelihood_name} likelihood, got {y!r}")
    if kind == "count" and yi < 0:
        raise ValueError(f"y must be a count >= 0 for the {likelihood_name} likelihood, got {y!r}")
    return likelihood_name, yi


# ----------------------------------------------------------------------------- the dispatch


def _compute(name: str, mu: float, sigma: float, y: int, dps: int, n: int) -> ReferencePoint:
    return evaluate(
        lambda: REFERENCES[name].MODEL(name, mpf(mu), mpf(sigma), y),
        mode_layout,
        dps,
        n,
        what=f"{name} mu={mu} sigma={sigma} y={y}",
    )


@lru_cache(maxsize=4096)
def _cached(name: str, mu: float, sigma: float, y: int, dps: int, n: int) -> ReferencePoint:
    return _compute(name, mu, sigma, y, dps, n)


@lru_cache(maxsize=4096)
def _custom_cached(name: str, mu: float, sigma: float, y: float, dps: int, n: int):
    from qpinfer.likelihoods.registry import get_likelihood

    return custom.reference_point(get_likelihood(name), float(mu), float(sigma), float(y), dps, n)


def reference_point(
    likelihood_name: str, mu: float, sigma: float, y: int, dps: int = 40, nodes: int = DEFAULT_NODES
) -> ReferencePoint:
    """sigma*, log Z, tilted mean and std at one cavity point of any likelihood name that table
    stores record (e.g. ``"probit"``, ``"step_noise(eps=0.2)"``, ``"student_t(nu=4.0,
    scale=1.0)"``), by that likelihood's reference module (:data:`REFERENCES`).

    ``mu`` and ``sigma`` (the cavity standard deviation) are taken as exact binary values of the
    given floats. Results are cached per process. ``nodes`` is the panel degree ``N`` (changing
    it gives an independent discretisation, used by the self-consistency tests).
    """
    head = str(likelihood_name).split("(")[0]
    if ":" in head:  # a user likelihood, "package.module:ClassName(...)"
        with _LOCK:
            return _custom_cached(str(likelihood_name), mu, sigma, y, int(dps), int(nodes))
    own = REFERENCES.get(head)
    if own is not None and own.MODEL is None:
        with _LOCK:
            return own.reference_point(likelihood_name, mu, sigma, y, dps, nodes)
    name, yi = _check_point(likelihood_name, mu, sigma, y, _ENGINE)
    if int(dps) < 15:
        raise ValueError(f"dps must be >= 15, got {dps!r}")
    if int(nodes) < 8:
        raise ValueError(f"nodes must be >= 8, got {nodes!r}")
    with _LOCK:
        return _cached(name, float(mu), float(sigma), yi, int(dps), int(nodes))


def sigma_qp_reference(likelihood_name: str, mu: float, sigma: float, y: int, dps: int = 40) -> mpf:
    """The QP standard deviation sigma* (Zhang et al. (2020), equation (7)), to about ``dps`` digits.

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
