"""Cell-table boxes of the Student-t likelihood: one table per nu, any scale.

**Reduced coordinates.** ``f' = (f - y) / scale`` maps the tilted family onto itself
(:mod:`qpinfer.likelihoods.student_t`), and ``f' -> -f'`` mirrors it, so ``sigma* / scale`` depends
on ``d = |mu - y| / scale`` and ``s = sigma / scale`` only (for each nu). The table is built for
``scale = 1`` (likelihood ``student_t(nu=..., scale=1.0)``) and serves every scale through
:class:`qpinfer.tables.scaled.ScaledTable`. The fold ``d = |mu - y|`` is exact (the kernel's
own ``canonical``: ``sigma*`` at ``mu - y = +-a`` is bit for bit the same). The boxes store
``rho = sigma* / sigma_EP`` (in (0, 1], Theorem 2) at Chebyshev-Gauss nodes of equal cells, in

* ``z = d / sqrt(1 + s^2)`` (d where the cavity is narrow, ``d / s`` where it is wide) and
  ``log10 s``. For s >= ~3 the tilt is bimodal for z in about [4, 10]: the t factor's lobe
  near ``f = y`` (mass ~ e^(-z^2/2) / s) and the cavity's lobe (mass ~ (z s)^-(nu+1)) exchange
  the mass there, over about 1/z in z, and the exchange moves by ~(nu + 1) ln 10 / z in z per
  decade of s: the cells are finest there.

  - ``narrow``: ``log10 s`` in [-3.25, 0] (cells 0.5 in z x 0.25): below s = 8.7e-4 the
    kernel's Gaussian closed form (``r < 1e-3``) holds for every d;
  - ``mid``: ``log10 s`` in [0, 1] (cells 0.25 x 0.125);
  - ``wide``: z in [0, 12.5], ``log10 s`` in [1, 3] (cells 0.125 x 0.125): the bimodal
    transition (rho down to 0.06 at s = 1e3);
  - ``wide_out``: z in [12.5, 25], ``log10 s`` in [1, 3] (cells 0.25 x 0.125);

* ``far``: ``u = 25 / z`` in [0.01, 1] (8 cells) and ``log10 s`` in [-3.5, 10] (cells 0.5;
  the kernel supports s <= 1e10): for z >= 25 the t factor's lobe holds < e^-140 of the mass
  (s <= 1e10), the tilt is the cavity's lobe times the t factor's polynomial tail, and
  ``1 - rho ~ u^6`` is smooth in u. Beyond z = 2500 (u < 0.01) the kernel's Gaussian closed
  form holds for every s.

**The former gap**: ``z < 25`` with ``s`` in (1e3, 1e10] (the kernel refuses s >
1e10, and so does the table). For s >> 1 the tilt is the t factor's lobe at ``f = y`` (mass ~
phi(z) / s) plus the cavity's lobe near ``f = mu`` (mass ~ (z s)^-(nu+1)). As z grows at fixed s,
rho first falls from the t lobe's 0.967 as the far lobe's share of the variance, ``(z s)^2``
times its mass, takes over (z ~ 6 at s = 1e3, ~10 at 1e10; down to 3e-5), then recovers to 1 as
the cavity's lobe takes the mass (z ~ 8 at s = 1e3, ~14.3 at 1e10). Both exchanges are ~1 wide in
the log of their ratio, which moves by ``a ln 10`` per decade of s at fixed z; along

* ``c_spread = z^2/2 - (nu - 2) ln s`` (the log of the variance ratio up to ``(nu - 1) ln z``
  and a constant; the fall at c_spread in about [-4, 8]) and
* ``c_mass = z^2/2 - nu ln s`` (minus the log of the mass ratio up to ``(nu + 1) ln z``; the
  recovery, with a bump, at c_mass in about [3, 16]),

each sits still (their ``ln z`` terms drift by 0.4 per decade or less). The third feature is
``z = sqrt(4 (nu + 1)) = sqrt(20)``, the bimodal onset as s -> inf (within 4e-6 of it for s >=
1e3), where the kernel's EP std (not its sigma*) jumps by up to 1.5e-12 (at s ~ 4e7; >= 1e-13
for ``log10 s`` in [7.2, 8.2], < 1e-15 below 6.5): a box edge there keeps the jump out of every
cell. The boxes (for nu = 4: shears 4 and 2), in lookup order, each holding what the ones before
leave (its cells reaching into those parts are never served):

  - ``gap_mass``: ``c_mass`` in [-3, 30] (cells of 1) x ``log10 s`` in [3, 10] (cells of 0.7);
  - ``gap_mass_out``: ``c_mass`` in [30, 294] (cells of 8; z = 25 at s = 1e3 is 284.9) x
    ``log10 s`` cells of 1;
  - ``gap_core``: z in [0, sqrt(20)] (9 cells) x cells of 0.5: one lobe;
  - ``gap_spread``: ``c_spread`` in [-14, 44] (cells of 1) x cells of 0.5: what has ``c_mass <
    -3`` (``c_spread = c_mass + 2 ln s``: 44 covers s = 1e10);
  - ``gap_onset``: z in [sqrt(20), 8.1] (8 cells) x ``log10 s`` in [5, 10] (cells of 0.5): the
    rest, ``c_spread < -14`` (z < 8.01), before the fall.

  A cell 1 wide in c and 0.5 in ``log10 s`` spans 3.3 in ``z^2/2``: ``gap_spread``'s cells that
  serve cavities stay clear of the rise (c_mass > 0.3) and of the onset at ``log10 s >= 6.5``,
  ``gap_onset``'s of the fall (c_spread < -8). Nodes with ``c < -a ln s`` (z^2 < 0) hold the
  cavity at d = 0 (in cells of ``gap_spread`` that serve nothing).

  Measured (12^2 nodes per cell; ``OPENBLAS_NUM_THREADS=1 python benchmarks/probe_v2_boxes.py
  student_t --points 100000``, 2 min 44 s): 227,376 values (1.82 MB), max 7.5e-14 against the
  kernel on 1e5 random cavities of the former gap (99.9%: 3.4e-14; per box 3.2e-14, 6.2e-14,
  7.5e-14, 3.3e-14, 6.8e-14); on 2e5 more (another seed) 2.4e-13, next to the onset at s ~ 3e7,
  where the kernel's EP std has jumps of ~2e-13 of its own. Coarser cells lose the margin or
  fail: c cells of 1.25 or 1.5 in the exchanges 2.8e-13 / 3e-12 (spread), 1.8e-13 / 1e-12
  (mass); ``log10 s`` cells of 0.7 in ``gap_spread`` 2e-12 (the rise, sheared by 2 ln 10 per
  decade there), of 1 in ``gap_mass`` 7e-13 and in ``gap_core`` 1.5e-11 (0.7: 5.5e-13);
  ``gap_mass_out`` from c = 24 with cells of 6 or 12, 1.6e-12 / 6.6e-10 (its tail decays like
  e^-c); cells of 2 x 1 in c_spread across the onset, 1.6e-12.

**EP's moments** (log Z, mean, std) are stored on the same boxes, against the cavity itself
(``far``: against ``log t_nu(d)`` for log Z, :class:`StudentTFar`), with the nodes of
:data:`MOMENT_NODES`. Lookups reach them only where ``r = s sqrt((nu + 1) / (nu + d^2)) >=
0.05``: narrower cavities take the Gauss-Hermite rule
(:func:`qpinfer.likelihoods.student_t.canonical.hermite_moments`). Measured by the build (nu =
4, 2e4 random box points): <= 1.9e-13 in the mean (cavity stds), 2.3e-13 in the variance.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from scipy.special import gammaln

from qpinfer.likelihoods.layout import Box, CellAxis

__all__ = [
    "MOMENT_NODES",
    "S_MAX",
    "StudentTCore",
    "StudentTFar",
    "StudentTMass",
    "StudentTSheared",
    "StudentTSpread",
    "boxes",
    "gap_boxes",
    "student_t_boxes",
]

Z_FAR = 25.0  # z from which the t factor's lobe is negligible (for s <= 1e10)
S_MAX = 3.0  # log10 s: the wide boxes' upper end, the gap boxes' lower one
LOG10_S_MIN = -3.25  # below, the kernel's Gaussian closed form for every d
LOG10_S_TOP = 10.0  # the kernel's limit: s <= 1e10
U_MIN = Z_FAR / 2500.0  # z > 2236: the Gaussian closed form (r < 1e-3) for every s
_LN10 = float(np.log(10.0))
_C_ONSET = -14.0  # c_spread below which gap_onset holds the cavities (z past the onset)
_C_MASS_OUT = 30.0  # c_mass where gap_mass_out takes over from gap_mass


def z_onset(nu: float) -> float:
    """``sqrt(4 (nu + 1))``: the bimodal onset as s -> inf, gap_core's end and gap_onset's start."""
    return float(np.sqrt(4.0 * (nu + 1.0)))


Z_ONSET = z_onset(4.0)  # the shipped nu = 4's: sqrt(20)


def _z(mu, sigma):
    mu = np.asarray(mu, dtype=np.float64)
    with np.errstate(over="ignore"):
        return mu / np.hypot(1.0, sigma)


@dataclass(frozen=True)
class StudentTCore(Box):
    """``z = d / sqrt(1 + s^2)`` and ``log10 s`` (canonical ``d = |mu - y| >= 0``, scale 1)."""

    AXIS: ClassVar[str] = "z"

    def cavity(self, label, z, log10_sigma):
        s = 10.0 ** np.asarray(log10_sigma, dtype=np.float64)
        return np.asarray(z) * np.hypot(1.0, s), s

    def axis_coords(self, mu, sigma, y):
        return _z(mu, sigma), np.log10(sigma)


@dataclass(frozen=True)
class StudentTFar(Box):
    """``u = 25 / z`` in [0, 1] and ``log10 s``: the cavities beyond the bimodal region. Its
    EP moments' log Z is measured against the t density at the cavity's mean, ``log t_nu(d)``
    (:meth:`reference_moments`), whose ``-(nu + 1) log d`` is singular at ``u = 0``: the table's
    nu, stored with the box (a store written without it is nu = 4's)."""

    nu: float = 4.0

    def reference_moments(self, mu, sigma, y):
        """``(log t_nu(mu), mu, sigma)``: the t density at the (canonical) cavity's mean, then
        the cavity itself."""
        mu = np.asarray(mu, dtype=np.float64)
        nu = self.nu
        log_c = gammaln(0.5 * (nu + 1.0)) - gammaln(0.5 * nu) - 0.5 * np.log(nu * np.pi)
        with np.errstate(over="ignore"):
            log_t = log_c - 0.5 * (nu + 1.0) * np.log1p(mu * mu / nu)
        return log_t, mu, np.asarray(sigma, dtype=np.float64)

    def cavity(self, label, u, log10_sigma):
        s = 10.0 ** np.asarray(log10_sigma, dtype=np.float64)
        return Z_FAR / np.asarray(u) * np.hypot(1.0, s), s

    def axis_coords(self, mu, sigma, y):
        with np.errstate(divide="ignore"):
            return Z_FAR / _z(mu, sigma), np.log10(sigma)  # z = 0: u = inf, outside


@dataclass(frozen=True)
class StudentTSheared(Box):
    """``c = z^2/2 - a ln s`` (``a = shear``) and ``log10 s``: a line of constant c follows one
    of the lobes' exchanges as s grows (module docstring). Inverse: ``z = sqrt(2 (c + a ln s))``
    (``a ln s`` is ``a ln(10) log10 s`` both ways). The shear is the table's nu (``nu`` or
    ``nu - 2``), stored with the box; a store written without it is nu = 4's (the default)."""

    shear: float = 0.0
    AXIS: ClassVar[str] = "c"

    def cavity(self, label, c, log10_sigma):
        ls = np.asarray(log10_sigma, dtype=np.float64)
        s = 10.0**ls
        # c below -a ln s would be z^2 < 0: such nodes hold the cavity at d = 0 (never served)
        z = np.sqrt(np.maximum(2.0 * (np.asarray(c) + (self.shear * _LN10) * ls), 0.0))
        return z * np.hypot(1.0, s), s

    def axis_coords(self, mu, sigma, y):
        z = _z(mu, sigma)
        ls = np.log10(sigma)
        with np.errstate(over="ignore", invalid="ignore"):  # z = inf: c = inf, outside
            return 0.5 * z * z - (self.shear * _LN10) * ls, ls


@dataclass(frozen=True)
class StudentTMass(StudentTSheared):
    """``c = z^2/2 - nu ln s``: minus the log of the lobes' mass ratio, to O(ln z)."""

    shear: float = 4.0


@dataclass(frozen=True)
class StudentTSpread(StudentTSheared):
    """``c = z^2/2 - (nu - 2) ln s``: the log of the far lobe's share of the variance, to
    O(ln z)."""

    shear: float = 2.0


def student_t_boxes(nu: float = 4.0, nodes: int = 12) -> tuple[Box, ...]:
    """The default boxes of the Student-t table of ``nu`` (see the module docstring). The
    bimodal exchange moves by ~(nu + 1) ln 10 / z in z per decade of s: for nu > 4 the cells of
    ``mid`` and ``wide`` in ``log10 s`` are halved (measured for nu = 5 on 2e4 random points
    of ``wide``: 1.1e-12 with nu = 4's cells, 4.4e-14 halved)."""

    def z_axis(lo, hi, width):
        return CellAxis("z", lo, width, round((hi - lo) / width), nodes)

    def ls_axis(lo, hi, width):
        return CellAxis("log10_sigma", lo, width, round((hi - lo) / width), nodes)

    z_mid = 0.5 * Z_FAR
    w = 0.125 / _finer(nu)
    boxes = (
        StudentTCore("narrow", (z_axis(0.0, Z_FAR, 0.5), ls_axis(LOG10_S_MIN, 0.0, 0.25)), (0.0,)),
        StudentTCore("mid", (z_axis(0.0, Z_FAR, 0.25), ls_axis(0.0, 1.0, w)), (0.0,)),
        StudentTCore("wide", (z_axis(0.0, z_mid, 0.125), ls_axis(1.0, S_MAX, w)), (0.0,)),
        StudentTCore("wide_out", (z_axis(z_mid, Z_FAR, 0.25), ls_axis(1.0, S_MAX, 0.125)), (0.0,)),
        StudentTFar(
            "far",
            (
                CellAxis("u", U_MIN, (1.0 - U_MIN) / 8, 8, nodes),
                CellAxis("log10_sigma", -3.5, 0.5, 27, nodes),
            ),
            (0.0,),
            nu=nu,
        ),
        *gap_boxes(nu, nodes),
    )
    return tuple(dataclasses.replace(b, moment_nodes=MOMENT_NODES.get(b.name, 0)) for b in boxes)


#: Chebyshev nodes per cell and axis of EP's moments where rho's 12 leave the moments' largest
#: errors (2e4 random points of each box against the exact kernel, nu = 4) above 5e-13
MOMENT_NODES = {"narrow": 16, "mid": 14, "wide": 16, "far": 16, "gap_mass": 16}


def _finer(nu: float) -> int:
    """How many times finer than nu = 4's the cells that follow the exchange are."""
    return 2 if nu > 4.0 else 1


def gap_boxes(nu: float = 4.0, nodes: int = 12) -> tuple[Box, ...]:
    """The boxes of s in [1e3, 1e10] with z < 25 (module docstring), in lookup order, for the
    table of ``nu``. Where nu moves the boxes' ends (nu = 4's in brackets): ``gap_mass_out``
    reaches ``c_mass`` at z = 25, s = 1e3 (294), ``gap_core`` ends at :func:`z_onset` (sqrt(20)),
    and ``gap_onset`` holds ``c_spread < -14`` past the onset up to s = 1e10 (z to 8.1, from
    ``log10 s`` = 5); nu <= 2 has no such cavities and no ``gap_onset``. For nu > 4
    ``gap_mass_out``'s cells are 4 wide (8): measured for nu = 5, 5.8e-13 with 8, 5.9e-15 with 4
    (2e4 random points from c = 30)."""

    def box(kind, name, first, ls, **shear):
        (lo, hi, width), (ls_lo, ls_width) = first, ls
        axes = (
            CellAxis(kind.AXIS, lo, width, round((hi - lo) / width), nodes),
            CellAxis(
                "log10_sigma", ls_lo, ls_width, round((LOG10_S_TOP - ls_lo) / ls_width), nodes
            ),
        )
        return kind(name, axes, (0.0,), **shear)

    ln_top = LOG10_S_TOP * _LN10
    mass_top = _C_MASS_OUT + 8.0 * (np.ceil((0.5 * Z_FAR**2 - nu * S_MAX * _LN10 - 30.0) / 8) + 1)
    z_on = z_onset(nu)
    w_core = z_on / 9  # the core's stop is the onset's start, bit for bit
    boxes = [
        box(StudentTMass, "gap_mass", (-3.0, _C_MASS_OUT, 1.0), (S_MAX, 0.7), shear=nu),
        box(
            StudentTMass, "gap_mass_out", (30.0, mass_top, 8.0 / _finer(nu)), (S_MAX, 1.0), shear=nu
        ),
        box(StudentTCore, "gap_core", (0.0, 9 * w_core, w_core), (S_MAX, 0.5)),
        box(StudentTSpread, "gap_spread", (_C_ONSET, 44.0, 1.0), (S_MAX, 0.5), shear=nu - 2),
    ]
    c_top = _C_ONSET + (nu - 2.0) * ln_top  # z^2/2 of c_spread = -14 at s = 1e10
    if c_top > 0.5 * z_on**2:
        z_top = float(np.ceil(10.0 * np.sqrt(2.0 * c_top))) / 10.0
        # log10 s where c_spread = -14 meets the onset, down to a multiple of 0.5
        ls_lo = max(S_MAX, np.floor(2.0 * (0.5 * z_on**2 - _C_ONSET) / (nu - 2.0) / _LN10) / 2)
        n_z = max(1, round((z_top - z_on) / 0.45))
        first = (9 * w_core, z_top, (z_top - 9 * w_core) / n_z)
        boxes.append(box(StudentTCore, "gap_onset", first, (float(ls_lo), 0.5)))
    return tuple(boxes)


def boxes(likelihood) -> tuple[Box, ...]:
    """The boxes of ``likelihood``'s cell table (``Likelihood.table_boxes``)."""
    if likelihood.scale != 1.0:
        raise ValueError(
            f"a Student-t cell table is built for scale 1.0 and serves every scale; got "
            f"{likelihood.name!r} (build {likelihood.table_base().name!r})"
        )
    return student_t_boxes(likelihood.nu)
