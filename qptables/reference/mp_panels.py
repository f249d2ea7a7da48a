"""Multiprecision building blocks of the mpmath reference (:mod:`qptables.reference.tilted`): the
Chebyshev-Lobatto panel rule with its cumulative (partial-integral) weights, and
``phi(Phi^{-1}(u))`` to an absolute accuracy of the working precision. Both work at mpmath's
process-global precision ``mp.prec`` (the reference serialises its evaluations).
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

import mpmath
from mpmath import mp, mpf
from scipy.special import ndtri

__all__ = ["Rule", "phi_of_ndtri", "rule", "to_fixed"]


# ----------------------------------------------------------------------------- quadrature rule


class Rule(NamedTuple):
    nodes: list  # Chebyshev-Lobatto points on [-1, 1], ascending
    cumulative: list  # cumulative[i][j]: int_{-1}^{t_i} l_j(t) dt  (l_j Lagrange basis)
    weights: list  # Clenshaw-Curtis weights = cumulative[-1]
    tails: list  # rows giving the Chebyshev coefficients c_{N-2}, c_{N-1}, c_N
    fixed_bits: int  # cumulative_fixed[i][j] = round(cumulative[i][j] * 2^fixed_bits)
    cumulative_fixed: list


def to_fixed(x: mpf, bits: int) -> int:
    """``round_toward_zero(x * 2^bits)`` as a Python int (fast fixed-point conversion)."""
    sign, man, exp, _ = x._mpf_
    if not man:
        return 0
    shift = exp + bits
    v = man << shift if shift >= 0 else man >> -shift
    return -v if sign else v


@lru_cache(maxsize=16)
def rule(n: int, prec: int) -> Rule:
    with mp.workprec(prec + 32):
        theta = [mp.pi - mp.pi * j / n for j in range(n + 1)]  # t_j = cos(theta_j) ascending
        t = [mpmath.cos(th) for th in theta]
        t[0], t[n] = mpf(-1), mpf(1)
        h = [mpf(1) / 2 if k in (0, n) else mpf(1) for k in range(n + 1)]
        # T_k at the nodes: cos(k theta_j); T_m for m up to n + 1 needed for the antiderivative
        tk = [[mpmath.cos(k * th) for th in theta] for k in range(n + 2)]

        def anti(k: int, i: int) -> mpf:  # int_{-1}^{t_i} T_k
            if k == 0:
                return t[i] + 1
            if k == 1:
                return (t[i] ** 2 - 1) / 2
            val = tk[k + 1][i] / (k + 1) - tk[k - 1][i] / (k - 1)
            at_minus_one = (-1) ** (k + 1) / mpf(k + 1) - (-1) ** (k - 1) / mpf(k - 1)
            return (val - at_minus_one) / 2

        antis = [[anti(k, i) for i in range(n + 1)] for k in range(n + 1)]
        cumulative = []
        for i in range(n + 1):
            row = []
            for j in range(n + 1):
                s = mpmath.fsum(h[k] * tk[k][j] * antis[k][i] for k in range(n + 1))
                row.append(2 * h[j] * s / n)
            cumulative.append(row)
        tails = [[2 * h[j] * tk[k][j] / n for j in range(n + 1)] for k in (n - 2, n - 1, n)]
    bits = prec + 24
    fixed = [[to_fixed(v, bits) for v in row] for row in cumulative]
    with mp.workprec(prec):
        return Rule(
            [+v for v in t],
            [[+v for v in row] for row in cumulative],
            [+v for v in cumulative[n]],
            [[+v for v in row] for row in tails],
            bits,
            fixed,
        )


# ----------------------------------------------------------------------------- phi(Phi^-1(u))


@lru_cache(maxsize=64)
def _constants(prec: int) -> tuple[mpf, mpf]:
    """``1/sqrt(2)`` and ``1/sqrt(2 pi)`` at ``prec`` bits."""
    with mp.workprec(prec):
        return 1 / mpmath.sqrt(2), 1 / mpmath.sqrt(2 * mp.pi)


def phi_of_ndtri(u: mpf, floor: mpf) -> mpf:
    """``phi(Phi^{-1}(u))`` for ``0 <= u <= 1/2`` to an *absolute* accuracy of ~``2^-prec``.

    Halley's iteration for ``Phi(x) = u`` (cubic convergence) from double precision ``ndtri``,
    each step carried out only at the precision its result can have (a step roughly triples the
    number of correct bits), and the final step at ``prec + log2(u)`` bits: ``phi(Phi^{-1}(u))``
    is about ``u sqrt(2 ln(1/u))``, so that many significant bits give ``prec`` bits absolute.
    The last correction ``d`` is applied to ``phi`` analytically,
    ``phi(x - d) = phi(x) exp(x d - d^2/2)``.
    """
    if u <= floor:
        return mpf(0)  # phi(Phi^-1(u)) < u * sqrt(2 ln(1/u)): negligible
    prec = mp.prec
    need = max(80, prec + mpmath.mag(u) + 24)
    uf = float(u)
    if uf > 1e-300:
        x, bits = mpf(float(ndtri(uf))), 45
    else:  # asymptotic start Phi(x) ~ phi(x)/|x|; a few plain steps first
        lg = -mpmath.log(u)
        x, bits = -mpmath.sqrt(2 * lg - mpmath.log(4 * mp.pi * lg)), 1
    try:
        for _ in range(40):
            final = 3 * bits >= need
            mp.prec = need + 16 if final else min(need, 3 * bits) + 16
            rsqrt2, rsqrt2pi = _constants(mp.prec)
            pdf = mpmath.exp(-x * x / 2) * rsqrt2pi
            r = (mpmath.erfc(-x * rsqrt2) / 2 - u) / pdf
            d = r / (1 + x * r / 2)
            if final:
                return pdf * mpmath.exp(x * d - d * d / 2)  # = phi(x - d)
            x -= d
            bits = max(1, min(3 * bits - 6, need)) if bits > 8 else bits + 2
        raise RuntimeError(f"Phi^-1 iteration did not converge for u={u}")
    finally:
        mp.prec = prec
