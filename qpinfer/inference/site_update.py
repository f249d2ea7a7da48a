"""The site update of every EP-like method: cavity, projection, new site (Zhang et al., 2020, eq. (6)).

:func:`site_proposal` is the update the dense site loop (:func:`qpinfer.inference.ep.run_ep`)
proposes for every site from its posterior marginal: the (fractional, Power EP) cavity, the
projection of the tilted distribution (EP's moment matching, QP's sigma* of eq. (7), ...) and the
site natural parameters that turn the cavity into the projection. :func:`clip_precision` and
:func:`resolve_floor` are the precision floor every site update shares (the pseudo-point update of
:mod:`qpinfer.inference.sparse.sites` too): :data:`MIN_SITE_PRECISION` for log-concave likelihoods,
none (negative sites kept) for a likelihood that declares ``log_concave = False``. The loop that
sweeps, damps and stops is :mod:`qpinfer.inference.site_loop`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["MIN_SITE_PRECISION", "clip_precision", "resolve_floor", "site_proposal"]

#: Smallest site precision the loop keeps (GPy uses the same floor).
MIN_SITE_PRECISION: float = float(np.finfo(np.float64).eps)


def site_proposal(
    projection: Any,
    post_mean: np.ndarray,
    post_var: np.ndarray,
    tau: np.ndarray,
    nu: np.ndarray,
    y: np.ndarray,
    floor: float | None = MIN_SITE_PRECISION,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Cavity -> projection -> new site natural parameters (eq. (6)), vectorised over sites.

    ``tau_c = 1/var - power tau~``, ``nu_c = mean/var - power nu~`` (the fractional cavity of
    Power EP), ``tau~_new = (1/sigma*^2 - tau_c) / power``, ``nu~_new = (mu*/sigma*^2 - nu_c) /
    power``. Returns ``(tau_new, nu_new, ok, clipped)``: ``ok`` marks sites whose cavity was
    proper and projection finite (others must keep their old parameters), ``clipped`` the sites
    whose new precision was raised to ``floor`` (``None``: no floor, negative precisions are kept).
    """
    power = float(getattr(projection, "power", 1.0))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        tau_c = 1.0 / post_var - power * tau
        nu_c = post_mean / post_var - power * nu
        ok = np.isfinite(tau_c) & np.isfinite(nu_c) & (tau_c > 0)
        tau_c_safe = np.where(ok, tau_c, 1.0)
        cav_var = 1.0 / tau_c_safe
        cav_mean = np.where(ok, nu_c, 0.0) * cav_var
        project_with_site = getattr(projection, "project_with_site", None)
        if project_with_site is not None:  # relaxed EP: the relaxation factor uses the old site
            m, s = project_with_site(cav_mean, np.sqrt(cav_var), y, tau, nu)
        else:
            m, s = projection.project(cav_mean, np.sqrt(cav_var), y)
        m = np.asarray(m, dtype=np.float64)
        s = np.asarray(s, dtype=np.float64)
        prec = 1.0 / (s * s)
        tau_new = (prec - tau_c_safe) / power
        nu_new = (m * prec - nu_c) / power
    ok &= np.isfinite(tau_new) & np.isfinite(nu_new) & (s > 0)
    return tau_new, nu_new, *clip_precision(tau_new, ok, floor)


def clip_precision(
    tau_new: np.ndarray, ok: np.ndarray, floor: float | None
) -> tuple[np.ndarray, np.ndarray]:
    """``(ok, clipped)`` and ``tau_new`` raised to ``floor`` in place where it is below it."""
    if floor is None:
        return ok, np.zeros_like(ok)
    clipped = ok & (tau_new < floor)
    tau_new[clipped] = floor
    return ok, clipped


def resolve_floor(min_site_precision: Any, projection: Any) -> float | None:
    """The site-precision floor: ``"auto"`` is :data:`MIN_SITE_PRECISION`, or ``None`` (no floor:
    negative sites kept) for a likelihood that declares ``log_concave = False``."""
    if isinstance(min_site_precision, str):
        if min_site_precision != "auto":
            raise ValueError(
                f"min_site_precision must be 'auto', None or a number >= 0, got {min_site_precision!r}"
            )
        lik = getattr(projection, "likelihood", None)
        return MIN_SITE_PRECISION if lik is None or lik.log_concave else None
    if min_site_precision is None:
        return None
    v = float(min_site_precision)
    if not (np.isfinite(v) and v >= 0):
        raise ValueError(
            f"min_site_precision must be 'auto', None or a number >= 0, got {min_site_precision!r}"
        )
    return v
