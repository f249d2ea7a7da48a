"""Print a small grid of the QP standard deviation sigma* (paper 000 eq. (7)) beside EP's.

    python -m qpinfer.demo_grid

For a 5 x 5 grid of cavity means ``mu`` and cavity standard deviations ``sigma``, each cell
shows ``sigma_QP / sigma_EP``, where ``sigma_EP`` is the tilted standard deviation (EP's
projection) and ``sigma_QP <= sigma_EP`` by Theorem 2; for the probit likelihood with label
``y = +1`` and for Poisson counts with the square link at ``y = 3``. Only ``qpinfer`` is used.
"""

from __future__ import annotations

import numpy as np

import qpinfer

MUS = np.array([-10.0, -2.0, 0.0, 2.0, 10.0])
SIGMAS = np.array([0.1, 0.3, 1.0, 3.0, 10.0])
CASES = (("probit", 1), ("poisson_square", 3))


def grid(likelihood: str, y: int) -> tuple[np.ndarray, np.ndarray]:
    """``(sigma_qp, sigma_ep)`` on the ``MUS x SIGMAS`` grid, each of shape (5, 5)."""
    mu, sigma = MUS[:, None], SIGMAS[None, :]
    sigma_qp = qpinfer.sigma_qp(likelihood, mu, sigma, y)
    _, sigma_ep = qpinfer.tilted_moments(likelihood, mu, sigma, y)
    return sigma_qp, sigma_ep


def format_grid(likelihood: str, y: int) -> str:
    sigma_qp, sigma_ep = grid(likelihood, y)
    cell = 21
    lines = [
        f"{likelihood}, y = {y}: cells are sigma_QP / sigma_EP",
        "mu \\ sigma".rjust(10) + " " + "".join(f"{s:>{cell}g}" for s in SIGMAS),
    ]
    for i, m in enumerate(MUS):
        row = "".join(
            f"{f'{sigma_qp[i, j]:.6g} / {sigma_ep[i, j]:.6g}':>{cell}}" for j in range(SIGMAS.size)
        )
        lines.append(f"{m:>10g} {row}")
    return "\n".join(lines)


def main() -> int:
    print("\n\n".join(format_grid(name, y) for name, y in CASES))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
