"""One site-update loop for every EP-like method: sweeps, damping, stopping rule, best state.

Dense EP/QP/Power EP/relaxed EP (:func:`qpinfer.inference.ep.run_ep`) and pseudo-point Power EP/QP
(:func:`qpinfer.inference.sparse.sites.run_sparse_pep`) differ in two pieces, which
:func:`run_sites` takes:

* a *posterior representation* -- ``refresh(tau, nu)`` returns the posterior of the sites with
  their marginals ``.mean``, ``.var`` (dense Cholesky or indefinite Woodbury form,
  :class:`qpinfer.inference.dense_posterior.DenseSiteRepresentation`; low-rank pseudo-point form,
  :class:`qpinfer.inference.sparse.sites.LowRankSiteRepresentation`), and ``sequential(tau, nu)``
  starts a sequential sweep: ``marginal(i)`` (mean and variance of site ``i``'s variable) and
  ``apply(i, d_tau, d_nu)`` (the rank-one change of site ``i``; ``False`` if it would make the
  posterior improper);
* a *site update* -- ``propose(sites, mean, var, tau, nu)``: cavity, projection and the new site
  natural parameters (Zhang et al., 2020, eq. (6); Bui et al. (2017) eqs. (106)-(107)) for the sites ``sites`` (a
  slice) from their marginals, returning ``(tau_new, nu_new, ok, clipped)`` as
  :func:`qpinfer.inference.site_update.site_proposal`; and ``log_evidence(posterior, tau, nu)``
  (eq. (4) / eq. (110)).

Schedules: ``"sequential"`` -- sites one at a time, each followed by the rank-one change of the
posterior (R&W Algorithm 3.5); ``"parallel"`` -- every site from the same posterior, vectorised
(one projection call per sweep: QP makes one batched table lookup). Both damp in natural
parameters, ``site <- (1 - damping) site + damping site_new`` (Bui et al., 2017, eqs. (108)-(109) with
their ``alpha`` as the step: same fixed points). With ``adaptive_damping`` the parallel schedule
halves its damping (down to 1/64) whenever 20 sweeps pass without a new smallest RMS change (an
oscillation; damping does not move the fixed points).

Stopping rule (Zhang et al., 2020, Sec. 6): the root-mean-square change of ``(tau~, nu~)`` over one sweep
is below ``tol``. If that does not happen within ``max_iter`` sweeps a :class:`ConvergenceWarning`
is issued and the sites with the smallest change seen are returned (the prior if no sweep
succeeded). Site precisions that all end at zero or the floor (every update skipped or clipped:
no proper cavity, as with a kernel matrix that is not positive semi-definite) warn too: the
posterior covariance is then the prior's. A sweep that raises ``LinAlgError`` or produces
non-finite sites ends the loop. With
negative sites (no precision floor) a parallel step that would make the posterior improper is
halved until it is proper (:func:`qpinfer.inference.sweeps.proper_step`), so the best state is
always a proper one.

:class:`SweepControl` is that loop without the sweep itself (:meth:`SweepControl.run` takes one
sweep as a function of the state): :func:`run_sites` sweeps a posterior representation in
process, :mod:`qpinfer.inference.sparse.dask_sweep` sweeps data partitions on a dask cluster, and
both get the same damping, stopping rule, best state, warning and result.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from qpinfer.inference.anderson import AcceleratedSweep
from qpinfer.inference.dense_posterior import PosteriorMoments
from qpinfer.inference.site_update import (  # noqa: F401 (re-exported: here before site_update)
    MIN_SITE_PRECISION,
    clip_precision,
    resolve_floor,
    site_proposal,
)
from qpinfer.inference.sklearn_warnings import register, sklearn_compatible
from qpinfer.inference.sweeps import parallel_sweep, sequential_sweep

__all__ = [
    "SCHEDULES",
    "ConvergenceWarning",
    "convergence_category",
    "SiteResult",
    "SweepControl",
    "SweepSettings",
    "initial_sites",
    "run_sites",
]

SCHEDULES = ("parallel", "sequential")
#: adaptive damping: halve the damping (down to ``MIN_DAMPING``) after this many sweeps without a
#: new smallest RMS change (iris at damping 0.5 kept RMS ~2e-3 for 1000 sweeps)
STALL_SWEEPS = 20
MIN_DAMPING = 1.0 / 64.0


@register
class ConvergenceWarning(UserWarning):
    """A fit did not converge: the site updates did not reach the requested tolerance within
    ``max_iter`` sweeps, or (the subclasses
    :class:`~qpinfer.inference.search_result.OptimizerWarning` and
    :class:`~qpinfer.inference.search_result.BoundWarning`) the hyperparameter search failed or
    ended at a bound, naming the hyperparameter and the bound. qpinfer's counterpart of
    scikit-learn's ``sklearn.exceptions.ConvergenceWarning``: once scikit-learn is loaded, each
    is raised as its subclass that is also scikit-learn's (``convergence_category``;
    qpinfer never imports scikit-learn), so that
    ``warnings.filterwarnings("ignore", category=sklearn.exceptions.ConvergenceWarning)``
    silences them all, as does ``category=qpinfer.ConvergenceWarning``."""


def convergence_category(category: type[Warning] = ConvergenceWarning) -> type[Warning]:
    """``category`` (a :class:`ConvergenceWarning`), or, once scikit-learn is loaded, its
    subclass that is also scikit-learn's ``ConvergenceWarning``
    (:func:`qpinfer.inference.sklearn_warnings.sklearn_compatible`)."""
    return sklearn_compatible(category)


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
    #: wall-clock seconds of each recorded sweep (:meth:`SweepControl.run`)
    sweep_seconds: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class SweepSettings:
    """How :func:`run_sites` sweeps: schedule, damping (adaptive or not), stopping rule, floor."""

    schedule: str
    damping: float
    max_iter: int  # as given (the warning quotes it)
    tol: float
    floor: float | None
    adaptive_damping: bool
    #: Anderson acceleration of the parallel schedule (:mod:`qpinfer.inference.anderson`)
    acceleration: bool = False

    @classmethod
    def checked(
        cls,
        schedule: str,
        damping: float | None,
        max_iter: int,
        tol: float,
        floor: float | None,
        adaptive_damping: bool = False,
        acceleration: bool = False,
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
        return cls(
            schedule, damping, max_iter, tol, floor, bool(adaptive_damping), bool(acceleration)
        )


class SweepControl:
    """The site loop without its sweep (module docstring):
    :meth:`~qpinfer.inference.site_loop.SweepControl.run` repeats one sweep of a state -- the sites
    themselves in :func:`run_sites`; the partitions' site sums, with the sites held on the workers,
    in :mod:`qpinfer.inference.sparse.dask_sweep` -- counts the sweeps, keeps the RMS history and
    the state with the smallest RMS change, halves the damping after :data:`STALL_SWEEPS` sweeps
    without a new smallest change (``adaptive_damping``, parallel schedule), stops below ``tol`` and
    warns if that never happened; :meth:`~qpinfer.inference.site_loop.SweepControl.result` is the
    loop's result for the final sites.
    """

    def __init__(self, settings: SweepSettings) -> None:
        self.settings = settings
        self.damping = settings.damping
        self.best_rms = np.inf
        self.best: Any = None  # the state with the smallest RMS change so far
        self.history: list[float] = []
        self.sweep_seconds: list[float] = []
        self.converged = False
        self.n_iter = 0
        self.n_clipped = self.n_skipped = 0
        self._stalled = 0

    def run(
        self,
        sweep: Callable[[Any, float], tuple[Any, float, int, int] | None],
        state: Any,
        what: str,
        stacklevel: int = 1,
    ) -> Any:
        """Sweep from ``state`` until the RMS change is below ``tol`` or ``max_iter`` sweeps have
        run; the state with the smallest RMS change (``None`` if no sweep succeeded: the caller
        returns the prior).

        ``sweep(state, damping)`` is one sweep: ``(new state, RMS change of the sites,
        n_clipped, n_skipped)``, or ``None`` if the new sites are not all finite; it may read
        :attr:`best` (``is`` its ``state``: the state it sweeps from is the best so far). A
        ``LinAlgError`` (the state's posterior is improper) or ``None`` ends the loop with the
        best state. Unless converged, a :class:`ConvergenceWarning` names ``what``
        (``stacklevel`` counts from the caller of ``run``, as :func:`warnings.warn`'s).
        """
        s = self.settings
        self.best = state
        clock = time.perf_counter()
        for it in range(1, int(s.max_iter) + 1):
            self.n_iter = it
            try:
                swept = sweep(state, self.damping)
            except np.linalg.LinAlgError:
                break
            if swept is None:
                break
            state, rms, self.n_clipped, self.n_skipped = swept
            now = time.perf_counter()
            self.sweep_seconds.append(now - clock)
            clock = now
            if self._record(rms, state):
                break
        if not self.converged:
            warnings.warn(
                f"{what} did not converge within max_iter={s.max_iter} sweeps "
                f"(best RMS change of site parameters {self.best_rms:.3g}, tol={s.tol:.3g}); "
                "returning the sites with the smallest change",
                convergence_category(),
                stacklevel=stacklevel + 1,
            )
        return self.best if np.isfinite(self.best_rms) else None

    def _record(self, rms: float, state: Any) -> bool:
        """Record a sweep's RMS change and the state it produced; ``True``: stop (converged)."""
        s = self.settings
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

    def result(
        self,
        result_type: type[SiteResult],
        tau: np.ndarray,
        nu: np.ndarray,
        posterior: Any,
        evidence: tuple[float, np.ndarray, np.ndarray],
    ) -> SiteResult:
        """``result_type`` of the final sites ``(tau, nu)``, their ``posterior`` and ``evidence``
        ``(log Z, cavity_mean, cavity_var)`` (all nan if not computed), with this loop's sweep
        count, convergence, smallest RMS change, counts, history and timings."""
        log_z, cavity_mean, cavity_var = evidence
        return result_type(
            tau=tau,
            nu=nu,
            posterior=posterior,
            log_marginal_likelihood=float(log_z),
            cavity_mean=cavity_mean,
            cavity_var=cavity_var,
            n_iter=self.n_iter,
            converged=self.converged,
            rms_change=self.best_rms,
            n_clipped=self.n_clipped,
            n_skipped=self.n_skipped,
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
    (module docstring, :meth:`SweepControl.run`) and return ``result_type`` with the best sites,
    their posterior and (``compute_evidence``) their evidence; ``what`` names the method in the
    warning."""
    n = representation.n_sites
    sweep = parallel_sweep if settings.schedule == "parallel" else sequential_sweep

    def plain(tau, nu, damping):
        tau_new, nu_new, n_clipped, n_skipped = sweep(
            representation, update, tau, nu, damping, settings.floor
        )
        if not (np.all(np.isfinite(tau_new)) and np.all(np.isfinite(nu_new))):
            return None
        return tau_new, nu_new, n_clipped, n_skipped

    step = lambda tau, nu, damping: (tau, nu, plain(tau, nu, damping))  # noqa: E731
    if settings.acceleration and settings.schedule == "parallel":
        step = AcceleratedSweep(plain, n, settings.floor)

    def one_sweep(sites: tuple[np.ndarray, np.ndarray], damping: float):
        tau, nu, out = step(*sites, damping)  # (tau, nu): where the sweep started
        if out is None:
            return None
        tau_new, nu_new, n_clipped, n_skipped = out
        diff = np.concatenate((tau_new - tau, nu_new - nu))
        return (tau_new, nu_new), float(np.sqrt(np.mean(diff * diff))), n_clipped, n_skipped

    control = SweepControl(settings)
    best = control.run(one_sweep, initial_sites(init, n, settings.floor), what, stacklevel)
    tau, nu = (np.zeros(n), np.zeros(n)) if best is None else best  # None: the prior
    least = max(settings.floor or 0.0, MIN_SITE_PRECISION)
    if n and np.all(np.abs(tau) <= least):
        warnings.warn(
            f"{what}: every site precision stayed at zero (at most {least:.3g}), so the "
            "posterior covariance is the prior's, not a fit to the data; the likely cause: a "
            "prior (kernel) matrix that is not positive semi-definite, which makes every cavity "
            "improper",
            convergence_category(),
            stacklevel=stacklevel,
        )
    post = representation.refresh(tau, nu)
    evidence = (np.nan, np.full(n, np.nan), np.full(n, np.nan))
    if compute_evidence:
        evidence = update.log_evidence(post, tau, nu)
    return control.result(result_type, tau, nu, post, evidence)
