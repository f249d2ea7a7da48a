"""Independent mpmath reference for a likelihood the user writes
(:class:`qpinfer.CustomLikelihood`): its ``log_lik`` evaluated over mpmath's namespace, handed to
the panel engine of :mod:`qptables.reference.tilted`.

The user's one expression ``log_lik(f, y, m)`` is evaluated here with :data:`MPMATH` (mpmath
numbers, the same function names as :data:`qpinfer.likelihoods.custom.namespace.NUMPY`) -- or
with the class's own ``log_lik_mp(f, y)`` if it defines one -- at the original ``y`` (no label
reduction). Nothing numerical is shared with the double-precision kernel: the mode is
:func:`mpmath.findroot` on ``mpmath.diff`` of the log density (started from a bracket found by
doubling in mpmath), the curvature ``mpmath.diff`` of second order, the panels the engine's
adaptive Chebyshev ones; cuts are added at the likelihood's own centre ``c +- w 2^k`` (found
in mpmath from the same rule as the kernel's, :mod:`qpinfer.likelihoods.custom.features`, but
only to place cuts: the engine's adaptive bisection decides accuracy).
"""

from __future__ import annotations

import mpmath
from mpmath import mpf

from qpinfer.likelihoods.custom.namespace import MathNamespace
from qptables.reference.tilted import (
    ReferencePoint,
    Tilted,
    bisect_decreasing,
    evaluate,
    mode_layout,
)

__all__ = ["MPMATH", "CustomTilted", "custom_layout", "reference_point"]


def _log_ndtr(x):
    return mpmath.log(mpmath.ncdf(x))


#: mpmath's functions under the namespace's names
MPMATH = MathNamespace(
    exp=mpmath.exp,
    log=mpmath.log,
    log1p=mpmath.log1p,
    expm1=mpmath.expm1,
    sqrt=mpmath.sqrt,
    abs=mpmath.fabs,
    lgamma=mpmath.loggamma,
    ndtr=mpmath.ncdf,
    log_ndtr=_log_ndtr,
    expit=lambda x: 1 / (1 + mpmath.exp(-x)),
    softplus=lambda x: mpmath.log1p(mpmath.exp(x)),
    log1mexp=lambda x: mpmath.log(-mpmath.expm1(-x)),
    where=lambda cond, a, b: a if cond else b,
    pi=mpmath.pi,
)


class CustomTilted(Tilted):
    """``ell(f) = log_lik(f, y) + log N(f | mu, sigma^2)`` of a user likelihood ``lik``."""

    def __init__(self, lik, mu: mpf, sigma: mpf, y, label_scale=None) -> None:
        super().__init__(lik.name, mu, sigma, y)
        own = getattr(lik, "log_lik_mp", None)
        self.loglik = own if own is not None else (lambda f, yy: lik.log_lik(f, yy, MPMATH))
        self.y = mpf(y)
        self.label_scale = label_scale

    def ell(self, f: mpf) -> mpf:
        return self.loglik(f, self.y) - (f - self.mu) ** 2 / (2 * self.sigma**2) + self.const

    def neg_curvature(self, f: mpf) -> mpf:
        return -mpmath.diff(self.ell, f, 2)

    def modes(self) -> list[mpf]:
        """The one maximum of the (log-concave) tilt: a bracket of ``ell'`` by doubling from
        ``mu`` in steps of sigma, then bisection and polishing by ``findroot``."""

        def dell(f: mpf) -> mpf:
            return mpmath.diff(self.ell, f)

        step = self.sigma
        lo, hi = self.mu, self.mu
        while dell(lo) <= 0:
            lo -= step
            step *= 2
        step = self.sigma
        while dell(hi) >= 0:
            hi += step
            step *= 2
        mode = bisect_decreasing(dell, lo, hi, steps=60)
        try:
            mode = mpmath.findroot(dell, mode, tol=mpf(10) ** (-(mpmath.mp.dps - 8)))
        except (ValueError, ZeroDivisionError):
            pass  # the bisection's point (the mode only places a cut)
        return [mode]


def custom_layout(model: CustomTilted, digits: int) -> tuple[list, mpf, mpf]:
    """:func:`~qptables.reference.tilted.mode_layout` plus cuts at the likelihood's centre
    ``c`` and ``c +- w 2^k`` inside the layout's ends."""
    cuts, ell_max, s_ref = mode_layout(model, digits)
    scale = getattr(model, "label_scale", None)
    if scale is not None:
        c, w = scale
        left, right = cuts[0], cuts[-1]
        extra = {c} | {c + sign * w * 2**k / 2 for k in range(60) for sign in (-1, 1)}
        cuts = sorted(set(cuts) | {e for e in extra if left < e < right})
    return cuts, ell_max, s_ref


def reference_point(lik, mu: float, sigma: float, y: float, dps: int, nodes: int) -> ReferencePoint:
    """sigma*, log Z, the tilted mean and std of the user likelihood ``lik`` at one cavity
    (``mu``, ``sigma`` and ``y`` taken as exact binary values), to ``dps`` digits."""
    import numpy as np

    for what, value in (("mu", mu), ("sigma", sigma), ("y", y)):
        if not np.isfinite(float(value)):
            raise ValueError(f"{what} must be finite, got {value!r}")
    if not float(sigma) > 0:
        raise ValueError(f"sigma must be > 0, got {sigma!r}")
    yy = float(lik.check_y(np.array([y]))[0])
    offset, label = lik.reduce_y(np.array([yy]))
    feats = lik.features(float(label[0]))
    scale = (mpf(float(offset[0])) + mpf(feats.centre), mpf(feats.width))
    return evaluate(
        lambda: CustomTilted(lik, mpf(mu), mpf(sigma), yy, scale),
        custom_layout,
        dps,
        nodes,
        what=f"{lik.name} mu={mu} sigma={sigma} y={y}",
    )
