"""Class predictions of the binary GP classifiers from their latent predictive, in one place.

Every classifier (:class:`qpinfer.GPClassifier`, :class:`qpinfer.SparseGPClassifier`) supplies
``predict_latent(X) -> (mean*, var*)`` (R&W eqs. (3.60)-(3.61) for the full GP, Bui et al. (2017)
eq. (18) with pseudo-points) and ``classes_``; :class:`ProbitPredictionsMixin` turns them into
scikit-learn's ``predict_proba``/``decision_function``/``predict``/``score``. The predictive
probability of ``y* = +1`` is the likelihood averaged over ``N(f* | mean*, var*)``:

* probit (default, and for an estimator without ``likelihood_``): ``Phi(mean / sqrt(1 + var))``
  (R&W eq. (3.82)); decision function ``mean / sqrt(1 + var)``;
* label-noise step (:class:`qpinfer.likelihoods.step_noise.StepNoise`, Qi and Guo (2012) eq. (8)):
  ``eps + (1 - 2 eps) Phi(mean / sqrt(var))``; decision function ``mean / sqrt(var)``;
* logit (:class:`qpinfer.likelihoods.logit.Logit`): ``E[sigma(f*)]``, the logit tilt's normaliser
  (exact quadrature, ``Logit.log_z``); decision function ``log P(+1) - log P(-1)``.

The predicted class is ``classes_[1]`` where the latent mean is positive (both likelihoods are
symmetric, so that is where its probability exceeds 1/2).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from qpinfer.likelihoods.probit import Probit

__all__ = ["ProbitPredictionsMixin"]

_PROBIT = Probit()


class ProbitPredictionsMixin:
    """Predictions of a binary GP classifier from ``predict_latent``, ``classes_`` and (if it
    has one) ``likelihood_`` (shared by :class:`qpinfer.GPClassifier` and
    :class:`qpinfer.SparseGPClassifier`; probit unless ``likelihood_`` says otherwise)."""

    def __sklearn_tags__(self):  # called by scikit-learn only, so its import is fine here
        from sklearn.utils import ClassifierTags, InputTags, Tags, TargetTags

        return Tags(
            estimator_type="classifier",
            target_tags=TargetTags(required=True),
            classifier_tags=ClassifierTags(multi_class=False),
            input_tags=InputTags(),
        )

    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities (columns follow ``classes_``). Probit: ``Phi(mean / sqrt(1 +
        var))`` (R&W eq. 3.82); step_noise: ``eps + (1 - 2 eps) Phi(mean / sqrt(var))``."""
        mean, var = self.predict_latent(X)
        return self._binary_likelihood().class_probabilities(mean, var)

    def decision_function(self, X: Any) -> np.ndarray:
        """Positive for ``classes_[1]``: ``mean / sqrt(1 + var)`` (probit; ``Phi`` of it is the
        probability), ``mean / sqrt(var)`` (step_noise)."""
        mean, var = self.predict_latent(X)
        return self._binary_likelihood().decision_values(mean, var)

    def _binary_likelihood(self) -> Any:
        """The fitted likelihood (probit for an estimator without ``likelihood_``)."""
        return getattr(self, "likelihood_", None) or _PROBIT

    def predict(self, X: Any) -> np.ndarray:
        """The more probable class (``classes_[1]`` where the latent mean is positive)."""
        mean, _ = self.predict_latent(X)
        return self.classes_[(mean > 0).astype(np.intp)]

    def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
        """Mean accuracy of :meth:`predict` on ``(X, y)``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Test inputs.
        y : array-like of shape (n_samples,)
            True labels.
        sample_weight : array-like of shape (n_samples,) or None, default None
            Weights of the rows in the mean.

        Returns
        -------
        float
        """
        pred = self.predict(X)
        y = np.asarray(y)
        if y.ndim == 2 and y.shape[1] == 1:
            y = y.ravel()
        if y.shape != pred.shape:
            raise ValueError(f"y has shape {y.shape}, expected {pred.shape}")
        correct = (pred == y).astype(np.float64)
        if sample_weight is None:
            return float(correct.mean())
        w = np.asarray(sample_weight, dtype=np.float64)
        return float(np.sum(w * correct) / np.sum(w))
