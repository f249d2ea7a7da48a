"""Reading scalar parameters the user passes (``alpha``, ``c``, ``eps``, ...): one rule for what
counts as a number, so that every check names its argument the same way."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["number_or_nan"]


def number_or_nan(value: Any) -> float:
    """``float(value)`` for a real number (not a bool or a string), else NaN -- which fails every
    range test, so the caller's ``ValueError`` names the argument and the range."""
    if isinstance(value, bool | str):
        return np.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        return np.nan
