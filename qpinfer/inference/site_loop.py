# Over 400 lines: the one loop, its two schedules and its bookkeeping (SweepControl) belong together.
"""One site-update loop for every EP-like method: sweeps, damping, stopping rule, best state.

Dense EP/QP/Power EP/relaxed EP (:func:`qpinfer.inference.ep.run_ep`) and pseudo-point Power EP/QP
(:func:`qpinfer.inference.sparse.sites.run_sparse_pep`) differ in two pieces, which :func:`run_sites` takes:

* a *posterior representation* -- ``refresh(tau, nu)`` returns the posterior of the sites with
  their marginals ``.mean``, ``.var`` (dense Cholesky or indefinite Woodbury form,
  :class:`qpinfer.inference.dense_posterior.DenseSiteRepresentation`; low-rank pseudo-point form,
  :class:`qpinfer.inference.sparse.sites.LowRankSiteRepresentation`), and ``sequential(tau, nu)`` starts a
  sequential sweep: ``marginal(i)`` (mean and variance of site ``i``'s variable) and
  ``apply(i, d_tau, d_nu)`` (the rank-one change of site ``i``; ``False`` if it would make the
  posterior improper);
* a *site update* -- ``propose(sites, mean, var, tau, nu)``: cavity, projection and the new site
  natural parameters (paper 000 eq. (6); paper 004 eqs. (106)-(107)) for the sites ``sites`` (a
  slice) from their marginals, returning ``(tau_new, nu_new, ok, clipped)`` as
  :func:`site_proposal`; and ``log_evidence(posterior, tau, nu)`` (eq. (4) / eq. (110)).

Schedules: ``"sequential"`` -- sites one at a time, each followed by the rank-one change of the
posterior (R&W Algorithm 3.5); ``"parallel"`` -- every site from the same posterior, vectorised
(one projection call per sweep: QP makes one batched table lookup). Both damp in natural
parameters, ``site <- (1 - damping) site + damping site_new`` (paper 004 eqs. (108)-(109) with
their ``alpha`` as the step: same fixed points). With ``adaptive_damping`` the parallel schedule
halves its damping (down to 1/64) whenever 20 sweeps pass without a new smallest RMS change (an
oscillation; damping does not move the fixed points).

Stopping rule (paper 000 Sec. 6): the root-mean-square change of ``(tau~, nu~)`` over one sweep
is below ``tol``. If that does not happen within ``max_iter`` sweeps a :class:`ConvergenceWarning`
is issued and the sites with the smallest change seen are returned (the prior if no sweep
succeeded). A sweep that raises ``LinAlgError`` or produces non-finite sites ends the loop. With
negative sites (no precision floor) a parallel step that would make the posterior improper is
halved until it is proper (:func:`_proper_step`), so the best state is always a proper one.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from qpinfer.inference.dense_posterior import PosteriorMoments

__all__ = [
    "MIN_SITE_PRECISION",
    "SCHEDULES",
    "ConvergenceWarning",
    "SiteResult",
    "SweepControl",
    "SweepSettings",
    "initial_sites",
    "resolve_floor",
    "run_sites",
    "site_proposal",
]

#: Smallest site precision the loop keeps (GPy uses the same floor).
MIN_SITE_PRECISION: float = float(np.finfo(np.float64).eps)

SCHEDULES = ("parallel", "sequential")
#: adaptive damping: halve the damping (down to ``MIN_DAMPING``) after this many sweeps without a
#: new smallest RMS change (iris at damping 0.5 kept RMS ~2e-3 for 1000 sweeps)
STALL_SWEEPS = 20
MIN_DAMPING = 1.0 / 64.0
#: parallel schedule with negative sites: how often a step that makes the posterior improper is
#: halved before the loop gives up (:func:`_proper_step`)
MAX_STEP_HALVINGS = 30


class ConvergenceWarning(UserWarning):
    """The site updates did not reach the requested tolerance within ``max_iter`` sweeps."""


class SequentialPosterior(Protocol):
    def marginal(self, i: int) -> tuple[np.ndarray, np.ndarray]: ...

    def apply(self, i: int, d_tau: float, d_nu: float) -> bool: ...


class PosteriorRepresentation(Protocol):
    n_sites: int

    def refresh(self, tau: np.ndarray, nu: np.ndarray) -> Any: ...

    def sequential(self, tau: np.ndarray, nu: np.ndarray) -> SequentialPosterior: ...


class SiteUpdate(Protocol):
    def propose(
        self, sites: slice, mean: np.ndarray, var: np.ndarray, tau: np.ndarray, nu: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]: ...

    def log_evidence(
        self, posterior: Any, tau: np.ndarray, nu: np.ndarray
    ) -> tuple[float, np.ndarray, np.ndarray]: ...


@dataclass
class SiteResult(PosteriorMoments):
    """Converged (or best) sites and the posterior they imply."""

    tau: np.ndarray
    nu: np.ndarray
    posterior: Any
    log_marginal_likelihood: float
    cavity_mean: np.ndarray
    cavity_var: np.ndarray
    n_iter: int
    converged: bool
    rms_change: float
    n_clipped: int = 0
    n_skipped: int = 0
    history: list[float] = field(default_factory=list)
    #: wall-clock seconds of each recorded sweep (:meth:`SweepControl.record`)
    sweep_seconds: list[float] = field(default_factory=list)


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
        return None if getattr(lik, "log_concave", True) is False else MIN_SITE_PRECISION
    if min_site_precision is None:
        return None
    v = float(min_site_precision)
    if not (np.isfinite(v) and v >= 0):
        raise ValueError(
            f"min_site_precision must be 'auto', None or a number >= 0, got {min_site_precision!r}"
        )
    return v


@dataclass(frozen=True)
class SweepSettings:
    """How :func:`run_sites` sweeps: schedule, damping (adaptive or not), stopping rule, floor."""

    schedule: str
    damping: float
    max_iter: int  # as given (the warning quotes it)
    tol: float
    floor: float | None
    adaptive_damping: bool

    @classmethod
    def checked(
        cls,
        schedule: str,
        damping: float | None,
        max_iter: int,
        tol: float,
        floor: float | None,
        adaptive_damping: bool = False,
    ) -> SweepSettings:
        """Validated settings; ``damping=None`` is 1.0 for the sequential, 0.5 for the parallel
        schedule."""
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
        if damping is None:
            damping = 1.0 if schedule == "sequential" else 0.5
        if not (0.0 < damping <= 1.0):
            raise ValueError(f"damping must be in (0, 1], got {damping!r}")
        if int(max_iter) < 1:
            raise ValueError(f"max_iter must be >= 1, got {max_iter!r}")
        if not (tol > 0):
            raise ValueError(f"tol must be positive, got {tol!r}")
        return cls(schedule, damping, max_iter, tol, floor, bool(adaptive_damping))


class SweepControl:
    """What :func:`run_sites` does between sweeps, for any loop that sweeps the sites (also the
    map-reduce sweep of :mod:`qpinfer.inference.sparse.dask_sweep`): count the sweeps (``sweeps()``), keep the
    RMS history and the state with the smallest RMS change, halve the damping after
    :data:`STALL_SWEEPS` sweeps without a new smallest change (``adaptive_damping``, parallel
    schedule), stop below ``tol``, and warn if that never happened (``finish``).
    """

    def __init__(self, settings: SweepSettings, initial_state: Any) -> None:
        self.settings = settings
        self.damping = settings.damping
        self.best_rms = np.inf
        self.best = initial_state
        self.history: list[float] = []
        self.sweep_seconds: list[float] = []
        self._clock = time.perf_counter()
        self.converged = False
        self.n_iter = 0
        self._stalled = 0

    def sweeps(self):
        """Sweep numbers ``1 .. max_iter`` (``n_iter`` follows them)."""
        for it in range(1, int(self.settings.max_iter) + 1):
            self.n_iter = it
            yield it

    def record(self, rms: float, state: Any) -> bool:
        """Record a sweep's RMS change and the state it produced (and the wall-clock time since
        the previous record, or since the control was made); ``True``: stop (converged)."""
        s = self.settings
        now = time.perf_counter()
        self.sweep_seconds.append(now - self._clock)
        self._clock = now
        self.history.append(rms)
        if rms < self.best_rms:
            self.best_rms, self.best, self._stalled = rms, state, 0
        else:
            self._stalled += 1
        if rms < s.tol:
            self.converged = True
            return True
        if (
            s.adaptive_damping
            and s.schedule == "parallel"
            and self._stalled >= STALL_SWEEPS
            and self.damping > MIN_DAMPING
        ):  # oscillation: damping keeps the fixed points
            self.damping, self._stalled = self.damping / 2.0, 0
        return False

    def finish(self, what: str, stacklevel: int) -> tuple[float, Any]:
        """``(best RMS change, best state)``, with a :class:`ConvergenceWarning` unless converged
        (best RMS ``inf``: no sweep succeeded, the caller returns the prior)."""
        if not self.converged:
            s = self.settings
            warnings.warn(
                f"{what} did not converge within max_iter={s.max_iter} sweeps "
                f"(best RMS change of site parameters {self.best_rms:.3g}, tol={s.tol:.3g}); "
                "returning the sites with the smallest change",
                ConvergenceWarning,
                stacklevel=stacklevel + 1,
            )
        return self.best_rms, self.best

    def result(self, result_type: type, rms: float, n_clipped: int, n_skipped: int, **state):
        """The loop's result ``result_type(**state, ...)``: the final ``state`` (sites,
        posterior, evidence, cavities) with this control's sweep count, convergence and history."""
        return result_type(
            **state,
            n_iter=self.n_iter,
            converged=self.converged,
            rms_change=rms,
            n_clipped=n_clipped,
            n_skipped=n_skipped,
            history=self.history,
            sweep_seconds=self.sweep_seconds,
        )


def initial_sites(init: Any, n: int, floor: float | None) -> tuple[np.ndarray, np.ndarray]:
    """Starting sites: ``init`` (a warm start; precisions raised to 0 unless negative sites are
    allowed, ``floor is None``; all zero if not finite) or all zero (posterior = prior)."""
    if init is None:
        return np.zeros(n), np.zeros(n)
    tau = np.asarray(init[0], dtype=np.float64).copy()
    if floor is not None:
        tau = np.maximum(tau, 0.0)
    nu = np.asarray(init[1], dtype=np.float64).copy()
    if tau.shape != (n,) or nu.shape != (n,):
        raise ValueError(f"init sites must have shape ({n},)")
    if not (np.all(np.isfinite(tau)) and np.all(np.isfinite(nu))):
        return np.zeros(n), np.zeros(n)
    return tau, nu


def _damped(old: np.ndarray, new: np.ndarray, damping: float) -> np.ndarray:
    return (1.0 - damping) * old + damping * new


def _parallel_sweep(rep, update, tau, nu, damping, floor):
    post = rep.refresh(tau, nu)
    tau_p, nu_p, ok, clipped = update.propose(slice(None), post.mean, post.var, tau, nu)
    tau_new = np.where(ok, _damped(tau, tau_p, damping), tau)
    nu_new = np.where(ok, _damped(nu, nu_p, damping), nu)
    if floor is not None:
        tau_new = np.maximum(tau_new, floor)
    elif np.any(tau_new < 0):
        tau_new, nu_new = _proper_step(rep, tau, nu, tau_new, nu_new)
    return tau_new, nu_new, int(np.count_nonzero(clipped)), int(np.count_nonzero(~ok))


def _proper_step(rep, tau, nu, tau_new, nu_new):
    """Negative sites (no floor): halve the step from ``(tau, nu)`` towards ``(tau_new, nu_new)``
    until the posterior it implies is proper (at most :data:`MAX_STEP_HALVINGS` times, then
    ``LinAlgError``, which ends the loop with the best proper state). Every site moving at once
    can make ``K^-1 + S~`` indefinite where each site alone would not (starsCYG: 46 of 47 sites
    negative after the first sweep from the prior)."""
    for _ in range(MAX_STEP_HALVINGS):
        try:
            rep.refresh(tau_new, nu_new)
            return tau_new, nu_new
        except np.linalg.LinAlgError:
            tau_new = 0.5 * (tau + tau_new)
            nu_new = 0.5 * (nu + nu_new)
    rep.refresh(tau_new, nu_new)  # LinAlgError if still improper
    return tau_new, nu_new


def _sequential_sweep(rep, update, tau, nu, damping, floor):
    tau = tau.copy()
    nu = nu.copy()
    state = rep.sequential(tau, nu)
    n_clipped = n_skipped = 0
    for i in range(rep.n_sites):
        mean_i, var_i = state.marginal(i)
        site = slice(i, i + 1)
        tau_p, nu_p, ok, clipped = update.propose(site, mean_i, var_i, tau[site], nu[site])
        if not ok[0]:
            n_skipped += 1
            continue
        tau_i = _damped(tau[i], tau_p[0], damping)
        if floor is not None:
            tau_i = max(tau_i, floor)
        nu_i = _damped(nu[i], nu_p[0], damping)
        if not state.apply(i, tau_i - tau[i], nu_i - nu[i]):
            n_skipped += 1
            continue
        n_clipped += int(clipped[0])
        tau[i] = tau_i
        nu[i] = nu_i
    return tau, nu, n_clipped, n_skipped


def run_sites(
    representation: PosteriorRepresentation,
    update: SiteUpdate,
    init: Any,
    settings: SweepSettings,
    compute_evidence: bool = True,
    result_type: type[SiteResult] = SiteResult,
    what: str = "site updates",
    stacklevel: int = 3,
) -> SiteResult:
    """Sweep the sites from ``init`` (:func:`initial_sites`) to convergence as ``settings`` say
    (module docstring) and return ``result_type`` with the best sites, their posterior and
    (``compute_evidence``) their evidence; ``what`` names the method in the warning."""
    n = representation.n_sites
    tau, nu = initial_sites(init, n, settings.floor)
    sweep = _parallel_sweep if settings.schedule == "parallel" else _sequential_sweep
    control = SweepControl(settings, (tau, nu))
    n_clipped = n_skipped = 0
    for _ in control.sweeps():
        try:
            tau_new, nu_new, nc, ns = sweep(
                representation, update, tau, nu, control.damping, settings.floor
            )
        except np.linalg.LinAlgError:
            break
        if not (np.all(np.isfinite(tau_new)) and np.all(np.isfinite(nu_new))):
            break
        n_clipped, n_skipped = nc, ns
        diff = np.concatenate((tau_new - tau, nu_new - nu))
        tau, nu = tau_new, nu_new
        if control.record(float(np.sqrt(np.mean(diff * diff))), (tau, nu)):
            break
    rms, (tau, nu) = control.finish(what, stacklevel)
    if not np.isfinite(rms):  # not even one sweep succeeded: the prior
        tau, nu = np.zeros(n), np.zeros(n)
    post = representation.refresh(tau, nu)
    log_z = np.nan
    cav_mean = cav_var = np.full(n, np.nan)
    if compute_evidence:
        log_z, cav_mean, cav_var = update.log_evidence(post, tau, nu)
    return control.result(
        result_type,
        rms,
        n_clipped,
        n_skipped,
        tau=tau,
        nu=nu,
        posterior=post,
        log_marginal_likelihood=log_z,
        cavity_mean=cav_mean,
        cavity_var=cav_var,
    )
