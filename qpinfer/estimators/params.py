"""The estimators' shared constructor parameters, each defined once: default, check and text.

scikit-learn's convention -- hyperparameters are constructor arguments with defaults, stored
verbatim and validated at ``fit`` -- holds for all five estimators. The parameters several of
them take are fields of the dataclasses below, which the estimators inherit:

* :class:`SharedParams` (all five): ``kernel``, ``variance``, ``length_scale``, ``ard``,
  ``optimizer``, ``n_restarts_optimizer``, ``optimizer_maxiter``, ``random_state``,
  ``blas_threads``;
* :class:`SiteLoopParams` (the dense estimators and :class:`qpinfer.SparseGPClassifier`):
  ``schedule``, ``max_iter``, ``tol``, ``damping``;
* :class:`PseudoPointParams` (the sparse estimators): ``n_inducing`` (positional, first),
  ``inducing_points``, ``optimize_inducing``, ``jitter``.

They are keyword-only: as in scikit-learn, an estimator takes at most its first parameter by
position (the dense ones ``method``, the sparse ones ``n_inducing``), every other by keyword. :func:`estimator` makes
an estimator class a dataclass (``__init__`` generated from the fields, no generated ``__eq__``
or ``__repr__``: :class:`~qpinfer.estimators.protocol.ParamsMixin` has the protocol) and writes
the shared parameters' text of :data:`PARAMETER_DOCS` into its docstring, where a line
``%(name)s`` stands (a name of :data:`PARAMETER_GROUPS`: its entries in turn). What the
``table`` parameter means: :func:`qpinfer.estimators.tables.resolve_table`.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import numpy as np

from qpinfer.checks import check_positive_int
from qpinfer.estimators.blas import check_blas_threads
from qpinfer.estimators.protocol import ParamsMixin
from qpinfer.inference.restarts import check_n_restarts, check_optimizer, check_random_state
from qpinfer.kernels import ARDSquaredExponential, as_kernel

__all__ = [
    "PARAMETER_DOCS",
    "PARAMETER_GROUPS",
    "PseudoPointParams",
    "SharedParams",
    "SiteLoopParams",
    "estimator",
    "initial_kernel",
]

#: what QP's hyperparameter search may maximise (``qp_objective``)
QP_OBJECTIVES = ("evidence", "loo", "ep")
#: the default cap on L-BFGS-B iterations (Zhang et al., 2020, Sec. 6)
OPTIMIZER_MAXITER = 1000


#: the shared parameters' entries of an estimator's "Parameters" section
PARAMETER_DOCS = {
    "kernel": """\
kernel : kernel object or None
    Any scikit-learn kernel (``sklearn.gaussian_process.kernels``: RBF, Matern,
    RationalQuadratic, ExpSineSquared, DotProduct, ConstantKernel, WhiteKernel, sums, products,
    exponentiation), fitted in its ``theta`` within its ``bounds`` (``"fixed"`` ones stay put)
    with the evidence gradient from ``eval_gradient=True``; or a covariance function
    implementing :class:`qpinfer.kernels.protocol.Kernel`. The sparse estimators take
    :class:`~qpinfer.kernels.se.ARDSquaredExponential` and the scikit-learn kernels whose
    derivatives in the inducing inputs :mod:`qpinfer.kernels.cross` has (no ``WhiteKernel``).
    It is not modified: the fitted one is ``kernel_``, for a scikit-learn kernel a
    :class:`~qpinfer.kernels.sklearn_kernel.SklearnKernel` that behaves like the fitted
    scikit-learn kernel (``repr``, ``get_params``, ``theta``, ``kernel_.k1``; the object
    itself is ``kernel_.wrapped``). Nested parameters such as ``kernel__length_scale`` work in
    ``set_params`` and grid searches. ``None``: the SE kernel built from ``variance``,
    ``length_scale`` and ``ard`` (those three are ignored when ``kernel`` is given); with
    scikit-learn installed its fitted ``kernel_`` is scikit-learn's equivalent
    ``ConstantKernel(variance) * RBF(length_scale)`` (same ``theta``, bounds ``(1e-5, 1e5)``)
    while the arithmetic stays qpinfer's SE kernel
    (:class:`~qpinfer.kernels.sklearn_se.SklearnFacedSE`; searching with scikit-learn's kernel
    itself was 2.2x slower on Ionosphere with ARD, its derivatives an ``N x N x P`` array). A
    kernel whose ``requires_vector_input`` is false (a scikit-learn kernel on strings,
    graphs, ...) makes the dense estimators take ``X`` as any sequence of samples, as
    scikit-learn's GPC does (no ``n_features_in_`` then); the sparse estimators refuse it with
    a ``ValueError``: their inducing points are points of the input space. The dense
    estimators check its matrix on X at the start and at every hyperparameter value tried: one
    that is not symmetric positive semi-definite beyond round-off (a ``ConstantKernel`` with a
    negative value; scikit-learn's ``ExpSineSquared`` on more than one feature, whose Euclidean
    distance makes it indefinite) raises a ``ValueError`` naming ``kernel``.""",
    "variance": """\
variance, length_scale : float, float or array (n_features,)
    Initial (or, with ``optimizer=None``, fixed) SE kernel hyperparameters: signal variance
    and length scale(s); an array gives one length scale per feature (ARD) whatever ``ard``.
ard : bool, default False
    Whether a scalar ``length_scale`` becomes one per feature (automatic relevance
    determination, the paper's Sec. 3.1 kernel). The default, one length scale for all
    features (isotropic), is scikit-learn's ``RBF()``: ARD fits D + 1 hyperparameters, is
    slower and on small data sets over-fits (breast cancer, 398 training rows, 30
    standardised features, EP: with ARD 12 of the 30 length scales end at their bound and
    the test NTLL is 0.088, isotropic 0.078; 36 s against 2.9 s). On a panel of 12 real
    data sets (``docs/development/defaults.md``) ARD's held-out NTLL was worse on 9 of them
    for the dense classifier, at up to 29x the time, and no better on average for the sparse
    and minibatch ones.""",
    "optimizer_callable": """\
``"fmin_l_bfgs_b"`` is scikit-learn's name for ``"lbfgs"``. A callable is used as in
scikit-learn's Gaussian process estimators: ``optimizer(obj_func, initial_theta, bounds) ->
(theta_opt, func_min)``, where ``obj_func(theta, eval_gradient=True)`` returns minus the
evidence and minus its gradient (minus the evidence alone with ``eval_gradient=False``) at the
log hyperparameters ``theta`` (each call runs the inner loop, warm-started from the previous
one) and ``bounds`` is their ``(n, 2)`` array of log bounds; the model is fitted at
``theta_opt``. A ``theta_opt`` outside ``bounds`` by more than round-off (1e-9 in log units;
closer, it is put on the bound) raises a ``ValueError`` naming ``optimizer`` and the
hyperparameter, rather than being clipped or used as scikit-learn does: the model is never
fitted at hyperparameters the bounds exclude, nor at a point the optimizer did not choose.
``optimizer_maxiter`` applies to ``"lbfgs"`` only.""",
    "n_restarts_optimizer": """\
n_restarts_optimizer : int, default 0
    After the search from the initial hyperparameters, this many more from starts drawn
    log-uniformly within the bounds (the kernel's, and the noise's where the estimator fits
    one; inducing inputs start where the first search did), as scikit-learn's; the highest
    evidence wins (``restart_evidence_`` has each start's). The drawn bounds must be finite
    (``ValueError`` otherwise). Ignored with ``optimizer=None``.
random_state : int, numpy Generator or RandomState, or None, default None
    Seeds the restarts' draws (and the sparse estimators' k-means of the inducing inputs): an
    integer makes the fit reproducible; ``None`` draws fresh entropy.""",
    "optimizer_maxiter": """\
optimizer_maxiter : int, default 1000
    At most this many L-BFGS-B iterations for the hyperparameters (paper Sec. 6: 1000, relative
    function tolerance 1e-9).""",
    "blas_threads": """\
blas_threads : int or None, default None
    BLAS threads inside ``fit`` and the predictions (threadpoolctl). ``None``: one thread for
    problems of at most :data:`~qpinfer.estimators.blas.AUTO_MAX_ROWS` rows, where BLAS's own
    threads were measured to be slower, unless you set the threads yourself (an environment
    variable such as ``OPENBLAS_NUM_THREADS``, or ``threadpoolctl.threadpool_limits``), which
    is then left alone (:mod:`qpinfer.estimators.blas`). An int: that many threads.""",
    "verbose": """\
verbose : bool, default False
    Show the hyperparameter search's progress on standard error (a tqdm bar: the evaluations,
    each an inner loop run to convergence, and the best evidence so far; one bar per search
    stage and restart round). ``False``: silent. A fit with ``optimizer=None`` has no search
    and shows nothing.""",
    "schedule": """\
schedule : {"parallel", "sequential"}
    Site-update schedule (see :func:`qpinfer.inference.ep.run_ep`).""",
    "max_iter": """\
max_iter, tol, damping :
    Site updates stop when the RMS change of the site parameters is below ``tol`` (paper
    Sec. 6: 1e-6) or after ``max_iter`` sweeps (:class:`~qpinfer.ConvergenceWarning`).
    ``damping=None``: 1.0 for the sequential, 0.5 for the parallel schedule. ``max_iter`` also
    bounds the dense estimators' Newton iterations (Laplace, at least 100) and VB's
    fixed-point steps.""",
    "qp_objective": """\
qp_objective : {"evidence", "loo", "ep"}, default "evidence"
    What QP's hyperparameters maximise (``method="qp"`` only): ``"evidence"``,
    eq. (4) at QP's sites, and ``"loo"``, QP's leave-one-out predictive
    ``sum_i log p(y_i | cavity_i)``, each in one search with its total gradient
    (:mod:`qpinfer.inference.total_gradient`; the site loop warm-started by chord steps,
    :mod:`qpinfer.inference.site_chord`); ``"ep"``, EP's evidence first and then eq. (4) at
    QP's sites polished with the sites held fixed (the paper's and 0.2's fit). The default
    is the data's choice: held-out NTLL equal to ``"ep"``'s on the paper's four sets, whole
    fit 0.78-1.10x EP's against 1.31-1.56x (``docs/guide/qp_hyperparameters.md``).""",
    "n_inducing": """\
n_inducing : int or None, default None
    Number of pseudo-points M, in [1, n_samples]; ``None`` means ``min(50, n_samples)``,
    resolved at fit time (the stored parameter stays ``None``), so the default fits any data
    set. An explicit value above n_samples is refused with a ``ValueError``. Ignored when
    ``inducing_points`` is given; the M used is ``inducing_points_.shape[0]``.""",
    "inducing_points": """\
inducing_points : array (M, n_features) or None
    Initial inducing inputs; ``None``: k-means centroids of X
    (:func:`~qpinfer.inference.sparse.pseudo_points.kmeans_inducing_points`).
optimize_inducing : bool
    Whether L-BFGS-B also moves the inducing inputs.""",
    "jitter": """\
jitter : float
    Added to ``Kuu``'s diagonal, relative to the kernel variance.""",
}

#: placeholders that stand for several entries of :data:`PARAMETER_DOCS`, in this order: the
#: search's settings after ``optimizer`` (all five estimators) and the site loop's
PARAMETER_GROUPS = {
    "search_settings": ("n_restarts_optimizer", "optimizer_maxiter", "blas_threads", "verbose"),
    "site_loop": ("schedule", "max_iter"),
}
PARAMETER_DOCS.update(
    {
        group: "\n".join(PARAMETER_DOCS[name] for name in names)
        for group, names in PARAMETER_GROUPS.items()
    }
)

_PLACEHOLDER = re.compile(r"^( *)%\((\w+)\)s$", re.MULTILINE)


def _fill_docs(doc: str | None) -> str | None:
    """``doc`` with every line ``%(name)s`` replaced by ``PARAMETER_DOCS[name]``, indented as
    the line."""
    if doc is None:
        return None

    def entry(match: re.Match) -> str:
        indent, name = match.groups()
        return "\n".join(
            indent + line if line else line for line in PARAMETER_DOCS[name].split("\n")
        )

    return _PLACEHOLDER.sub(entry, doc)


def estimator(cls: type) -> type:
    """Make ``cls`` a dataclass of its parameters (the ``__init__`` that stores them verbatim;
    no ``__eq__``, ``__repr__`` or ``__match_args__``) and fill its docstring's shared
    parameters (:data:`PARAMETER_DOCS`)."""
    cls = dataclasses.dataclass(eq=False, repr=False, match_args=False)(cls)
    cls.__doc__ = _fill_docs(cls.__doc__)
    return cls


_params = dataclasses.dataclass(eq=False, repr=False, match_args=False, kw_only=True)


@_params
class SharedParams(ParamsMixin):
    """The kernel and the hyperparameter search: the parameters of all five estimators."""

    kernel: Any = None
    variance: float = 1.0
    length_scale: float | np.ndarray = 1.0
    ard: bool = False
    optimizer: Any = "lbfgs"
    n_restarts_optimizer: int = 0
    optimizer_maxiter: int = OPTIMIZER_MAXITER
    random_state: Any = None
    blas_threads: int | None = None
    verbose: bool = False

    def _check_search_params(self) -> None:
        """Validate ``optimizer``, ``n_restarts_optimizer``, ``optimizer_maxiter``,
        ``random_state``, ``ard`` and ``blas_threads``."""
        check_optimizer(self.optimizer)
        check_n_restarts(self.n_restarts_optimizer)
        check_random_state(self.random_state)
        check_positive_int(self.optimizer_maxiter, "optimizer_maxiter")
        if not isinstance(self.ard, bool | np.bool_):
            raise ValueError(f"ard must be True or False, got {self.ard!r}")
        check_blas_threads(self.blas_threads)
        if not isinstance(self.verbose, bool | np.bool_ | int):
            raise ValueError(f"verbose must be True or False, got {self.verbose!r}")

    def _search_options(self, n_drawn: int | None = None) -> dict[str, Any]:
        """The keyword arguments of :func:`qpinfer.inference.optimize.search_evidence` these
        parameters set (``n_drawn``: the leading coordinates a restart draws)."""
        return {
            "optimizer": self.optimizer,
            "n_restarts": int(self.n_restarts_optimizer),
            "random_state": self.random_state,
            "n_drawn": n_drawn,
            "progress": bool(self.verbose),
        }

    def latent_mean_and_variance(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        """scikit-learn's (>= 1.7) name for the estimator's ``predict_latent``: the latent f's
        mean and variance at ``X``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Input points.

        Returns
        -------
        mean, var : ndarray of shape (n_samples,)
            The latent function's predictive mean and variance.
        """
        return self.predict_latent(X)

    def _checked_theta(self, theta: Any, clone_kernel: Any, extra: tuple[str, ...] = ()):
        """``theta`` of ``log_marginal_likelihood`` as a float array, checked with scikit-learn's
        ``clone_kernel`` (``True`` or ``False``): a finite vector of the fitted kernel's log
        hyperparameters followed by one entry per name in ``extra`` (e.g. ``log scale``)."""
        if not isinstance(clone_kernel, bool | np.bool_):
            raise ValueError(f"clone_kernel must be True or False, got {clone_kernel!r}")
        nk = np.asarray(self.kernel_.theta).size
        theta = np.asarray(theta, dtype=np.float64)
        if theta.shape != (nk + len(extra),) or not np.all(np.isfinite(theta)):
            what = " and ".join([f"{nk} kernel log hyperparameters", *extra])
            raise ValueError(f"theta must be a finite vector of {what}, got {theta!r}")
        return theta

    def _check_kernel(self, kernel: Any) -> None:
        """``ValueError`` unless ``kernel`` (the parameter as passed) is a scikit-learn kernel or
        implements the :class:`qpinfer.kernels.protocol.Kernel` protocol
        (:func:`~qpinfer.kernels.sklearn_kernel.as_kernel`); subclasses narrow it (the sparse
        estimators: the kernels whose inducing-input derivatives they have)."""
        as_kernel(kernel)

    def _initial_kernel(self, n_features: int) -> Any:
        """:func:`initial_kernel` with :meth:`_check_kernel` (so that an estimator's own message
        lists the kernels it takes); the ``kernel`` parameter itself is kept."""
        return initial_kernel(self, n_features, self._check_kernel)


def initial_kernel(est: Any, n_features: int, check: Any) -> Any:
    """The initial kernel of an estimator with the parameters ``kernel``, ``variance``,
    ``length_scale`` and ``ard``: a copy of ``kernel`` (a scikit-learn kernel wrapped in
    :class:`~qpinfer.kernels.sklearn_kernel.SklearnKernel`) after ``check(kernel)``, else the SE
    kernel of ``variance`` and ``length_scale`` (a scalar becomes one per feature when ``ard``;
    an array is one per feature)."""
    if est.kernel is not None:
        check(est.kernel)
        kernel = as_kernel(est.kernel)
        return kernel.with_theta(kernel.theta)
    ls = np.asarray(est.length_scale, dtype=np.float64)
    if ls.ndim == 0 and est.ard:
        ls = np.full(n_features, float(ls))
    elif ls.ndim == 1 and ls.size not in (1, n_features):
        raise ValueError(f"length_scale has {ls.size} entries but X has {n_features} features")
    return ARDSquaredExponential(est.variance, ls)


@_params
class SiteLoopParams(SharedParams):
    """The site loop's settings (:class:`qpinfer.inference.site_loop.SweepSettings`)."""

    schedule: str = "parallel"
    max_iter: int = 1000
    tol: float = 1e-6
    damping: float | None = None
    qp_objective: str = "evidence"

    def _check_site_loop(self) -> None:
        """Validate ``schedule``, ``max_iter``, ``tol``, ``damping`` and ``qp_objective``."""
        if self.qp_objective not in QP_OBJECTIVES:
            names = ", ".join(repr(o) for o in QP_OBJECTIVES)
            raise ValueError(f"qp_objective must be one of {names}; got {self.qp_objective!r}")
        if self.schedule not in ("parallel", "sequential"):
            raise ValueError(f"schedule must be 'parallel' or 'sequential', got {self.schedule!r}")
        check_positive_int(self.max_iter, "max_iter")
        if not (isinstance(self.tol, int | float) and self.tol > 0):
            raise ValueError(f"tol must be a positive number, got {self.tol!r}")
        if self.damping is not None and not (0 < self.damping <= 1):
            raise ValueError(f"damping must be None or in (0, 1], got {self.damping!r}")

    def _site_loop_options(self) -> dict[str, Any]:
        """The keyword arguments of :func:`qpinfer.inference.ep.run_ep` /
        :func:`qpinfer.inference.sparse.sites.run_sparse_pep` they set."""
        return {
            "schedule": self.schedule,
            "damping": self.damping,
            "max_iter": int(self.max_iter),
            "tol": float(self.tol),
        }


@_params
class PseudoPointParams(SharedParams):
    """The pseudo-points of the sparse estimators (``n_inducing`` positional)."""

    n_inducing: int | None = dataclasses.field(default=None, kw_only=False)
    inducing_points: Any = None
    optimize_inducing: bool = True
    jitter: float = 1e-6

    def _check_pseudo_point_params(self) -> None:
        """Validate the search's parameters and ``jitter``."""
        self._check_search_params()
        if not (isinstance(self.jitter, int | float) and self.jitter >= 0):
            raise ValueError(f"jitter must be a non-negative number, got {self.jitter!r}")
