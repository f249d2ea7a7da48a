"""The exact kernel of the three user likelihoods against the mpmath reference at random
cavities: sigma*, log Z, EP's mean and std.

    PYTHONPATH=examples python experiments/user_likelihood_kernel.py [--points 40]

Per likelihood, ``--points`` cavities (seeded): a label of the likelihood's, sigma from 0.1 to
20 label widths (log-uniform; where panel edges and the likelihood's own feature meet), the
standardised mean in [-6, 6]; the reference at 30 digits. Prints the largest error (relative;
the mean in cavity stds; log Z relative where above 1) and every cavity above 1e-12.
"""

from __future__ import annotations

import argparse

import numpy as np
from user_likelihoods import BernoulliCloglog, NegativeBinomial, RightCensoredGaussian

import qpinfer
from qptables.reference import reference_point

CASES = [
    (BernoulliCloglog(), [-1.0, 1.0]),
    (RightCensoredGaussian(c=2.75, s=0.24), [0.0, 2.75]),
    (NegativeBinomial(r=2.3), [0.0, 1.0, 4.0, 12.0, 20.0]),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=40)
    args = parser.parse_args()
    rng = np.random.default_rng(11)
    for lik, labels in CASES:
        worst = 0.0
        for _ in range(args.points):
            y = float(rng.choice(labels))
            f = lik.features(lik.reduce_y(np.array([y]))[1][0])
            s = f.width * 10 ** rng.uniform(-1.0, 1.3)
            mu = f.centre + rng.uniform(-6, 6) * np.hypot(s, f.width)
            m, sd, yy = np.array([mu]), np.array([s]), np.array([y])
            k = qpinfer.sigma_qp(lik, m, sd, yy)[0]
            log_z, mean, std = lik.ep_moments(m, sd, yy)
            r = reference_point(lik.name, mu, s, y, dps=30)
            err = max(
                abs(k / float(r.sigma_qp) - 1),
                abs(std[0] / float(r.std) - 1),
                abs(mean[0] - float(r.mean)) / s,
                abs(log_z[0] - float(r.log_z)) / max(1.0, abs(float(r.log_z))),
            )
            worst = max(worst, err)
            if err > 1e-12:
                print(f"  {lik.name} mu={mu!r} sigma={s!r} y={y!r}: {err:.2e}")
        print(f"{lik.name}: largest error at {args.points} cavities {worst:.2e}")


if __name__ == "__main__":
    main()
