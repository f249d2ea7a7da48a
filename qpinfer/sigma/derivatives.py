"""Exact derivatives of sigma* in the cavity mean and std, on the kernel's panels (eq. (7)).

With sigma* = integral of phi(Phi^{-1}(F(f))) df and d phi(Phi^{-1}(u)) / du = -Phi^{-1}(u),

    d sigma* / d theta = -integral of Phi^{-1}(F(f)) dF(f)/d theta df,

and for the tilted CDF F(f) = E_q[1{t <= f}], q(t) proportional to p(y|t) N(t | mu, sigma^2),
``dF(f)/d theta = E_q[1{t <= f} g(t)]`` with the *centred* cavity score g = s - E_q[s],
``s_mu = (t - mu) / sigma^2`` and ``s_sigma = ((t - mu)^2 - sigma^2) / sigma^3``. On the kernel's
own panels (:func:`qpinfer.quadrature.panels.sigma_qp_quadrature`) the partial integrals of ``q g``
are the same spectral cumulative sums as those of ``q`` (from the left for F, from the right for
S = 1 - F, whose derivative is ``E_q[1{t > f} g]``; min(F, S) as in the kernel), so a point costs
about three sigma* evaluations' worth of GEMM and one pass. The centred scores are translation
invariant: ``s_mu - E s_mu = (x - m) / sigma^2`` in any kernel coordinate x = f - A, and
``s_sigma - E s_sigma = ((x - m)^2 - v + 2 D (x - m)) / sigma^3`` with D = E_q[t] - mu, the only
place the likelihood's anchor A (``_anchor``) enters.

The value returned is :func:`qpinfer.sigma.exact.sigma_qp`'s, bit for bit (the same operations).
Derivatives of the symmetries: the mirror ``canonical`` maps (sign of mu), exact rescalings by
the chain rule (``step_noise``'s sigma' = 1, a Student-t ``scale``). Regimes the kernel answers
without panels -- closed forms (``_sigma_closed_form``: sigma* = sigma, = sigma_EP, Poisson's
mode-relative far lobes) and the approximate rescalings (the probit beyond sigma = 1e8, Poisson's
sigma outside [1e-100, 1e100], step_noise's deep tail) -- take a Richardson-extrapolated central
difference of :func:`~qpinfer.sigma.exact.sigma_qp` itself (steps 1e-3 and 5e-4 sigma, error
~1e-12 relative), and only there. Where the Theorem-2 clamp moved sigma* onto sigma_EP (a rounding
of <= 2e-14) the derivative is the quadrature's.
"""

from __future__ import annotations

import numpy as np
from scipy.special import ndtri

from qpinfer.quadrature.panels import panel_moments_of, panel_sums
from qpinfer.sigma.exact import _clamp_to_ep, _prepare, lobe_batches, sigma_qp

__all__ = ["central_difference", "sigma_qp_gradient", "tilted_third_cumulant"]

_RICHARDSON_STEP = 1e-3  # relative to sigma: truncation ~h^4, rounding ~1e-16 / h


def sigma_qp_gradient(likelihood, mu, sigma, y, *, third_cumulant: bool = False):
    """sigma* and its derivatives in the cavity mean and standard deviation.

    Parameters
    ----------
    likelihood : str or Likelihood
    mu, sigma, y : array_like
        Cavity mean, cavity standard deviation (> 0) and observation; broadcast together (the
        checks of :func:`qpinfer.sigma.exact.sigma_qp`).
    third_cumulant : bool
        Also return the tilted third central moment (:func:`tilted_third_cumulant`), from the
        same panels (no second pass).

    Returns
    -------
    s, ds_dmu, ds_dsigma : ndarray of float64
        ``s`` equals ``sigma_qp(likelihood, mu, sigma, y)`` bit for bit; the derivatives are exact
        by quadrature (~1e-13 relative) where the kernel integrates, Richardson central differences
        of the kernel in its closed-form and approximate-rescaling regimes (see the module).
        With ``third_cumulant``, a fourth array: kappa3.
    """
    out = _gradient(likelihood, mu, sigma, y, third=third_cumulant)
    return out if third_cumulant else out[:3]


def tilted_third_cumulant(likelihood, mu, sigma, y) -> np.ndarray:
    """Third central moment kappa3 of the tilted distribution p(y|f) N(f|mu, sigma^2) / Z.

    ``d(tilted variance)/d mu = kappa3 / sigma^2``. From the sigma* kernel's panels where it
    integrates; in its closed-form regimes ``sigma^2`` times a Richardson central difference of
    the likelihood's tilted variance in mu.

    Parameters
    ----------
    likelihood : str or Likelihood
    mu, sigma, y : array_like
        As for :func:`sigma_qp_gradient`.

    Returns
    -------
    ndarray of float64 with the broadcast shape.
    """
    return _gradient(likelihood, mu, sigma, y, third=True)[3]


def _closed_derivative(lik, mu, sigma, y, mask, values, d_mu, d_sigma, k3):
    """Derivatives of the closed forms known exactly, written into ``d_mu``, ``d_sigma``
    (canonical coordinates); returns where. sigma* = sigma (the tilt is the cavity to double
    precision: flat likelihood, Gaussian far from a step): (0, 1); the likelihood's own
    (:meth:`qpinfer.Likelihood._closed_form_slopes`) at the rest of ``mask``."""
    cavity = mask & (values == sigma)
    known = cavity.copy()
    d_mu[cavity], d_sigma[cavity], k3[cavity] = 0.0, 1.0, 0.0
    own = lik._closed_form_slopes(mu, sigma, y, mask & ~cavity)
    if own is not None:
        where, slope_mu, slope_sigma = own
        d_mu[where], d_sigma[where], k3[where] = slope_mu, slope_sigma, 0.0
        known |= where
    return known


def _gradient(likelihood, mu, sigma, y, third):
    lik, mu, sigma, y = _prepare(likelihood, mu, sigma, y)
    shape, mu0, sigma0, y0 = mu.shape, mu, sigma, y
    mu, y = lik.canonical(mu.ravel(), y.ravel())
    sigma = sigma.ravel()
    canonical = mu, sigma, y
    mirror = lik._canonical_slope(mu0.ravel(), y0.ravel())
    out = np.empty(mu.shape)
    d_mu, d_sigma, k3 = (np.full(mu.shape, np.nan) for _ in range(3))
    todo = np.ones(mu.shape, dtype=bool)
    numeric = np.zeros(mu.shape, dtype=bool)  # points whose derivatives are Richardson's
    with np.errstate(all="ignore"):
        closed = lik._sigma_closed_form(mu, sigma, y)
        if closed is not None:
            mask, values = closed
            out[mask] = values[mask]
            todo &= ~mask
            numeric |= mask & ~_closed_derivative(
                lik, mu, sigma, y, mask, values, d_mu, d_sigma, k3
            )
        scale = None
        jac = None
        rescaled = lik._rescale(mu, sigma, y)
        if rescaled is not None:
            mask, mu_r, sigma_r, scale_r = rescaled
            mask = mask & todo
            exact = lik._rescale_jacobian(mu, sigma, mu_r, sigma_r, scale_r)
            if exact is None:
                numeric |= mask
            else:
                numeric |= mask & ~exact[0]
                jac = (mask & exact[0], exact[1])
            mu, sigma = np.where(mask, mu_r, mu), np.where(mask, sigma_r, sigma)
            scale = np.where(mask, scale_r, 1.0)
        if mirror is None:
            numeric[:] = True
        breaks = lik._breakpoints(mu, sigma, y)
        idx_all = np.flatnonzero(todo)
        ep = np.full(mu.shape, np.inf) if scale is None and lik._ep_from_panels else None
        anchor_gap = lik._anchor(mu, sigma, y) - mu  # A - mu per (rescaled) canonical point
        _batches(lik, mu, sigma, y, anchor_gap, idx_all, breaks, out, d_mu, d_sigma, k3, ep)
        if scale is not None:
            r, r_mu, r_sigma = out[todo], d_mu[todo], d_sigma[todo]
            out[todo] *= scale[todo]
            d_mu[todo] *= scale[todo]
            d_sigma[todo] *= scale[todo]
            k3[todo] *= scale[todo] ** 3
            if jac is not None:
                sel, (a_mu, a_s, b_mu, b_s, c_mu, c_s) = jac
                sel_t = sel[todo]
                c = scale[todo]
                g_mu = c_mu[todo] * r + c * (r_mu * a_mu[todo] + r_sigma * b_mu[todo])
                g_s = c_s[todo] * r + c * (r_mu * a_s[todo] + r_sigma * b_s[todo])
                d_mu[np.flatnonzero(todo)[sel_t]] = g_mu[sel_t]
                d_sigma[np.flatnonzero(todo)[sel_t]] = g_s[sel_t]
        _clamp_to_ep(lik, mu0, sigma0, y0, out, ep, None if lik._clamp_closed_forms else todo)
        own = lik._sigma_qp_exact(*canonical)
        if own is not None:  # sigma_qp's own value (no panels); the derivatives stay the panels'
            out = own
    bad = ~((out > 0) & (out < np.inf))
    if bad.any():  # the kernel's own message
        sigma_qp(lik, mu0.ravel()[bad], sigma0.ravel()[bad], y0.ravel()[bad])
    if mirror is not None:
        d_mu *= mirror
        k3 *= np.where(mirror == 0, 1.0, mirror)
    idx = np.flatnonzero(numeric)
    if idx.size:
        m, s, yy = mu0.ravel()[idx], sigma0.ravel()[idx], y0.ravel()[idx]
        d_mu[idx], d_sigma[idx] = _richardson(lik, m, s, yy)
        if third:
            k3[idx] = _richardson_third(lik, m, s, yy)
    return out.reshape(shape), d_mu.reshape(shape), d_sigma.reshape(shape), k3.reshape(shape)


def central_difference(fun, x, h):
    """``fun'(x)`` by Richardson's extrapolation of central differences with steps ``h`` and
    ``h / 2`` (4 evaluations, truncation O(h^4); the five-point stencil of step ``h / 2``)."""
    d1 = (fun(x + h) - fun(x - h)) / (2.0 * h)
    d2 = (fun(x + 0.5 * h) - fun(x - 0.5 * h)) / h
    return (4.0 * d2 - d1) / 3.0


def _richardson(lik, mu, sigma, y):
    h = _RICHARDSON_STEP * sigma
    d_mu = central_difference(lambda m: sigma_qp(lik, m, sigma, y), mu, h)
    d_sigma = central_difference(lambda s: sigma_qp(lik, mu, s, y), sigma, h)
    return d_mu, d_sigma


def _richardson_third(lik, mu, sigma, y):
    h = _RICHARDSON_STEP * sigma
    return sigma**2 * central_difference(lambda m: lik.tilted_moments(m, sigma, y)[1] ** 2, mu, h)


def _batches(
    lik, mu, sigma, y, anchor_gap, idx_all, breaks, out, d_mu, d_sigma, k3, ep, batch_size=4096
):
    """:func:`qpinfer.sigma.exact._quadrature_batches` with the derivatives."""
    for ii, m, s, yy, lobes, extra, n_levels in lobe_batches(
        lik, mu, sigma, y, idx_all, breaks, batch_size
    ):
        got = _quadrature(lik, m, s, yy, anchor_gap[ii], lobes, extra, n_levels, ep is not None)
        out[ii], d_mu[ii], d_sigma[ii], k3[ii] = got[:4]
        if ep is not None:
            ep[ii] = got[4]


def _quadrature(lik, mu, sigma, y, anchor_gap, lobes, extra, n_levels, with_std):
    """``(sigma*, d/dmu, d/dsigma, kappa3[, std])`` on the panels of
    :func:`qpinfer.quadrature.panels.sigma_qp_quadrature` (sigma* by the same operations)."""
    p = panel_sums(lik, mu, sigma, y, lobes, extra, n_levels)
    edges, f, half, q, sums, mass = p.edges, p.f, p.half, p.q, p.sums, p.mass
    before, after, total, weights, panel_ops = p.before, p.after, p.total, p.weights, p.panel_ops
    n_pts, n_pan, n_nodes = f.shape
    left = before[..., None] + sums[..., 1 : n_nodes + 1]
    right = after[..., None] + sums[..., n_nodes + 1 :]
    u = np.minimum(left, right)
    from_left = left <= right
    u /= total[:, None, None]
    np.clip(u, 0.0, 0.5, out=u)
    z = ndtri(u)
    integrand = np.exp(-0.5 * z * z).reshape(-1, n_nodes) @ (weights / np.sqrt(2.0 * np.pi))
    result = (half * integrand.reshape(n_pts, n_pan)).sum(axis=1)
    # centred scores on the same nodes (module docstring)
    wq = q * (half[..., None] * weights)
    wsum = wq.sum(axis=(1, 2))
    m1 = (wq * f).sum(axis=(1, 2)) / wsum
    d = f - m1[:, None, None]
    var = (wq * d * d).sum(axis=(1, 2)) / wsum
    kappa3 = (wq * d * d * d).sum(axis=(1, 2)) / wsum
    big_d = (anchor_gap + m1)[:, None, None]
    s2 = (sigma * sigma)[:, None, None]
    scores = (d / s2, (d * d - var[:, None, None] + 2.0 * big_d * d) / (s2 * sigma[:, None, None]))
    grads, panel_g = [], []  # per score: the derivative, and each panel's integral of q g
    for g in scores:
        gs = ((q * g).reshape(-1, n_nodes) @ panel_ops).reshape(n_pts, n_pan, -1)
        gs *= half[..., None]
        gm = gs[..., 0]
        g_before = np.cumsum(gm, axis=1) - gm
        g_after = np.cumsum(gm[:, ::-1], axis=1)[:, ::-1] - gm
        du = np.where(
            from_left,
            g_before[..., None] + gs[..., 1 : n_nodes + 1],
            g_after[..., None] + gs[..., n_nodes + 1 :],
        )
        du /= total[:, None, None]
        term = np.where(u > 0.0, -z * du, 0.0)  # u = 0: q underflowed, no contribution
        grads.append((half * (term.reshape(-1, n_nodes) @ weights).reshape(n_pts, n_pan)).sum(1))
        panel_g.append(gm)
    # flat stretches of F between lobes: (gap length) * -Phi^-1(u) du, u constant there
    n_panels = [ed.shape[1] - 1 for ed in edges]
    start = 0
    for i in range(len(edges) - 1):
        start += n_panels[i]
        gap = np.maximum(edges[i + 1][:, 0] - edges[i][:, -1], 0.0)
        m_left, m_right = mass[:, :start].sum(axis=1), mass[:, start:].sum(axis=1)
        u_gap = np.minimum(m_left, m_right) / total
        z_gap = ndtri(u_gap)
        result += gap * np.exp(-0.5 * z_gap * z_gap) / np.sqrt(2.0 * np.pi)
        for j, gm in enumerate(panel_g):
            du = np.where(m_left <= m_right, gm[:, :start].sum(1), gm[:, start:].sum(1)) / total
            grads[j] = grads[j] + np.where(u_gap > 0, -gap * z_gap * du, 0.0)
    res = [result, grads[0], grads[1], kappa3]
    if with_std:
        res.append(panel_moments_of(q, f, half, weights)[2])
    return res
