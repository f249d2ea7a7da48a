"""Which sigma* table ``table=None`` uses when several exist for a likelihood.

The candidates are the table shipped inside qpinfer (:mod:`qpinfer.tables.shipped`) and the
installed default ``tables_dir()/<likelihood>.zarr`` (:func:`qpinfer.tables.installed_table_path`):
a store a user put there, or the symlink ``qpinfer download`` points at the table it fetched.
Each is summarised from its root attributes alone (:func:`summarize`; no table data is read):

* **coverage** -- where lookups come from stored values. A v2 store claims every finite mu,
  sigma > 0 and label (``attrs["claimed_domain"]``; a cavity in none of its boxes is computed
  by the exact kernel). A v1 grid store covers its rectangle in ``(mu, sigma)`` and its labels
  ``y``; elsewhere it falls back to the exact kernel (slower, counted, warned).
* **verified lookup error** -- the largest relative error its verification measured *for
  lookups*. A v2 store's verification compares lookups at random cavities with the exact kernel
  (``kernel_max_rel_err``) and the kernel with mpmath (``mpmath_max_rel_err``): the larger of
  the two. A v1 store's verification checks stored values at grid nodes only, so its lookups
  between nodes (bilinear interpolation, about ``1e-8`` at the paper's step 0.001 and growing as
  the step squared) have no verified error (``None``).

The rule (:func:`choose_default`): a table *dominates* another if it covers everything the other
covers and its verified lookup error is at most the other's (a verified error beats an
unverified one). The installed table is used if it dominates the shipped one; the shipped one is
used, silently, if it dominates the installed one -- an installed or downloaded table never
replaces a better one. If neither dominates, the installed table (what the user chose) is used
and a :class:`TableChoiceWarning` names both tables and why, once per process. An installed
table that cannot be used (unreadable, for another likelihood, failing validation) is refused
with a :class:`TableChoiceWarning` and the shipped one used. An explicit ``table=`` is never
second-guessed (:func:`qpinfer.estimators.tables.resolve_table`). ``qpinfer list`` shows every
table with its coverage and verified error and marks each likelihood's default.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import warnings
from pathlib import Path
from typing import Any

from qpinfer.likelihoods.base import Likelihood
from qpinfer.tables.open import open_table
from qpinfer.tables.reader import SigmaTableReader
from qpinfer.tables.shipped import SHIPPED, shipped_path, shipped_table
from qpinfer.tables.store import TableError, installed_table_path, read_json

__all__ = [
    "DefaultChoice",
    "TableChoiceWarning",
    "TableSummary",
    "choose_default",
    "open_default",
    "summarize",
]


class TableChoiceWarning(RuntimeWarning):
    """``table=None`` found an installed table it could not use, or one that is neither better
    nor worse than the shipped one; the message names both tables and what to pass as
    ``table=`` to choose one explicitly."""


@dataclasses.dataclass(frozen=True)
class TableSummary:
    """What a table store says about itself: its coverage and verified lookup error.

    Attributes
    ----------
    path : Path
        The store (as found: an installed default may be a symlink).
    source : str
        ``"shipped"`` (inside qpinfer) or ``"installed"`` (in :func:`qpinfer.tables.tables_dir`).
    likelihood : str
        The likelihood name the store records.
    schema : int
        1 (grid store) or 2 (reduced coordinates, Chebyshev cells).
    mu, sigma : tuple of float
        The ``(lo, hi)`` ranges of cavity mean and standard deviation its stored values cover.
    labels : tuple of float or None
        The labels it covers; ``None``: every label the likelihood accepts.
    error : float or None
        The verified largest relative error of its lookups; ``None`` if not verified.
    node_error : float or None
        v1 stores: the verified largest relative error at grid nodes.
    checked : str
        How the error was verified (for messages).
    """

    path: Path
    source: str
    likelihood: str
    schema: int
    mu: tuple[float, float]
    sigma: tuple[float, float]
    labels: tuple[float, ...] | None
    error: float | None
    node_error: float | None
    checked: str

    def covers(self, other: TableSummary) -> bool:
        """Whether this table covers every cavity and label ``other`` covers."""
        inside = all(
            lo <= olo and ohi <= hi
            for (lo, hi), (olo, ohi) in ((self.mu, other.mu), (self.sigma, other.sigma))
        )
        if self.labels is None:
            return inside
        return inside and other.labels is not None and set(other.labels) <= set(self.labels)

    def dominates(self, other: TableSummary) -> bool:
        """Covers everything ``other`` covers, with a verified lookup error at most its own."""
        if not self.covers(other):
            return False
        if other.error is None:
            return True
        return self.error is not None and self.error <= other.error

    def coverage_text(self) -> str:
        """The coverage in one phrase: ``mu [lo, hi], sigma [lo, hi], y ...``."""
        if self.schema == 2:
            return (
                "mu (-inf, inf), sigma (0, inf), y every label (v2 cells; a cavity in no cell "
                "is computed exactly)"
            )
        ys = ", ".join(f"{v:g}" for v in self.labels or ())
        return (
            f"mu [{self.mu[0]:g}, {self.mu[1]:g}], sigma [{self.sigma[0]:.4g}, "
            f"{self.sigma[1]:.4g}], y {{{ys}}} (v1 grid; elsewhere computed exactly)"
        )

    def error_text(self) -> str:
        """The verified error in one phrase."""
        if self.error is not None:
            return f"verified max rel error {self.error:.2g} ({self.checked})"
        node = "?" if self.node_error is None else f"{self.node_error:.2g}"
        return f"verified max rel error {node} at grid nodes only ({self.checked})"

    def __str__(self) -> str:
        return f"the {self.source} table {str(self.path)!r}"


def _number(value: Any) -> float | None:
    """``value`` as a finite float >= 0, else ``None``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


def summarize(path: str | os.PathLike, source: str = "installed") -> TableSummary:
    """The :class:`TableSummary` of the store at ``path`` from its root ``zarr.json`` (no
    validation of its data: :func:`qpinfer.open_table` does that).

    Raises
    ------
    TableError
        The store's root metadata is missing, unreadable, or lacks its grid or verification.
    """
    root = Path(path)
    what = f"table {str(root)!r}"
    attrs = read_json(root / "zarr.json", what).get("attributes") or {}
    ver = attrs.get("verification")
    likelihood = attrs.get("likelihood")
    if not isinstance(ver, dict) or not isinstance(likelihood, str):
        raise TableError(f"{what}: no likelihood or verification report in its attributes")
    if attrs.get("qp_schema_version") == 2:
        kernel, exact = (
            _number(ver.get("kernel_max_rel_err")),
            _number(ver.get("mpmath_max_rel_err")),
        )
        error = None if kernel is None or exact is None else max(kernel, exact)
        checked = (
            f"{ver.get('kernel_points')} random lookups vs the exact kernel, the kernel vs "
            f"mpmath at {ver.get('mpmath_points')} points"
        )
        inf = math.inf
        return TableSummary(
            root, source, likelihood, 2, (-inf, inf), (0.0, inf), None, error, None, checked
        )
    grid = attrs.get("grid")
    try:
        mu = (float(grid["mu"][0]), float(grid["mu"][1]))
        ls = (float(grid["log10_sigma"][0]), float(grid["log10_sigma"][1]))
        labels = tuple(float(v) for v in grid["y"])
    except (KeyError, TypeError, ValueError, IndexError):
        raise TableError(f"{what}: malformed grid attribute {grid!r}") from None
    checked = (
        f"{ver.get('points')} grid nodes vs mpmath; lookups between nodes interpolate, "
        "their error is not verified"
    )
    node = _number(ver.get("max_rel_error"))
    sigma = (10.0 ** ls[0], 10.0 ** ls[1])
    return TableSummary(root, source, likelihood, 1, mu, sigma, labels, None, node, checked)


@functools.cache
def _shipped_summary(path: Path) -> TableSummary:
    return summarize(path, "shipped")


@dataclasses.dataclass(frozen=True)
class DefaultChoice:
    """The table ``table=None`` uses for a likelihood, and why (:func:`choose_default`).

    Attributes
    ----------
    likelihood : str
    table : TableSummary or None
        The table used; ``None``: none exists or none can be used (QP computes exactly).
    other : TableSummary or None
        The candidate not used, if there is one.
    reason : str
        Why, in one sentence (naming both tables when there are two).
    warning : str or None
        Set when the user should hear about the choice (a refused installed table, or two
        tables neither of which is better): the message of the :class:`TableChoiceWarning`.
    """

    likelihood: str
    table: TableSummary | None
    other: TableSummary | None
    reason: str
    warning: str | None = None


def _name(likelihood: str | Likelihood) -> str:
    return likelihood if isinstance(likelihood, str) else likelihood.name


def choose_default(likelihood: str | Likelihood) -> DefaultChoice:
    """Which table ``table=None`` uses for ``likelihood`` (a name or likelihood object): the
    rule of the module docstring, decided from the stores' attributes alone."""
    name = _name(likelihood)
    path = installed_table_path(name)
    where = shipped_path(likelihood)
    shipped = None if where is None else _shipped_summary(where)
    installed, problem = None, None
    if os.path.lexists(path):
        try:
            installed = summarize(path)
        except TableError as exc:
            problem = str(exc)
        if installed is not None and installed.likelihood != name:
            problem = f"it holds a table for {installed.likelihood!r}, not {name!r}"
            installed = None
    if problem is not None:
        fix = f"remove {str(path)!r}, or reinstall it (`qpinfer download NAME --force`)"
        if shipped is None:
            return DefaultChoice(
                name, None, None, f"the installed table {str(path)!r} is unusable ({problem})"
            )
        msg = (
            f"the installed table {str(path)!r} cannot be used ({problem}); using the shipped "
            f"table {str(shipped.path)!r} instead. To silence this, {fix}."
        )
        return DefaultChoice(name, shipped, None, msg, msg)
    if installed is None:
        if shipped is None:
            return DefaultChoice(
                name, None, None, f"no sigma* table for {name!r} at {path}{_kin(name)}"
            )
        return DefaultChoice(name, shipped, None, "the only table (shipped with qpinfer)")
    if shipped is None:
        return DefaultChoice(name, installed, None, "the only table (installed)")
    if installed.dominates(shipped):
        return DefaultChoice(name, installed, shipped, _why_better(installed, shipped))
    if shipped.dominates(installed):
        return DefaultChoice(name, shipped, installed, _why_better(shipped, installed))
    msg = (
        f"{installed} is used for {name!r}, but neither it nor {shipped} is better in both "
        f"coverage and verified lookup error: {_both(installed, shipped)}. Pass "
        f"table={str(installed.path)!r} or table={str(shipped.path)!r} to choose one and "
        "silence this warning."
    )
    return DefaultChoice(name, installed, shipped, msg, msg)


def _kin(name: str) -> str:
    """The tables that ship for ``name``'s likelihood family under other parameters (e.g. the
    Student-t nu that ship), as a clause, or ``""``."""
    family = name.split("(")[0]
    kin = [key for key in SHIPPED if key.split("(")[0] == family and key != name]
    return f" (tables ship for {', '.join(kin)})" if kin else ""


def _why_better(a: TableSummary, b: TableSummary) -> str:
    """Why ``a`` (which dominates ``b``) is used rather than ``b``: one clause about ``a``."""
    wider = "covers more cavities than" if not b.covers(a) else "covers as much as"
    if b.error is None:
        acc = (
            "lookups verified to "
            + ("?" if a.error is None else f"{a.error:.2g}")
            + f" (the {b.source} table's verification checks its grid nodes only)"
        )
    else:
        acc = f"lookups verified to {a.error:.2g} (the {b.source} table's: {b.error:.2g})"
    return f"it {wider} the {b.source} table {str(b.path)!r} and has {acc}"


def _both(a: TableSummary, b: TableSummary) -> str:
    return "; ".join(f"{t.source}: {t.coverage_text()}, {t.error_text()}" for t in (a, b))


_warned: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message + " Warned once per process.", TableChoiceWarning, stacklevel=4)


def open_default(likelihood: Likelihood) -> tuple[SigmaTableReader | None, DefaultChoice]:
    """Open the table ``table=None`` uses for ``likelihood`` (:func:`choose_default`),
    warning once per process (:class:`TableChoiceWarning`) when the choice says to. An installed
    table that fails validation when opened is refused the same way, for the shipped one.

    Returns
    -------
    (table, choice)
        ``table`` is ``None`` when no table can be used (QP then computes exactly: the
        caller warns, with ``choice.reason``).
    """
    choice = choose_default(likelihood)
    if choice.warning is not None:
        _warn_once(choice.warning)
    chosen = choice.table
    if chosen is None:
        return None, choice
    if chosen.source == "shipped":
        return shipped_table(likelihood), choice
    try:
        return open_table(chosen.path), choice
    except TableError as exc:
        where = shipped_path(likelihood)
        reason = f"the installed table is unusable ({exc})"
        if where is None:
            return None, dataclasses.replace(choice, table=None, reason=reason)
        msg = (
            f"{reason}; using the shipped table {str(where)!r} instead. To silence this, remove "
            f"{str(chosen.path)!r}, or reinstall it (`qpinfer download NAME --force`)."
        )
        _warn_once(msg)
        shipped = _shipped_summary(where)
        return shipped_table(likelihood), DefaultChoice(choice.likelihood, shipped, None, msg, msg)
