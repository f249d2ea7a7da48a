"""
Three classes: iris
===================

:class:`~qpinfer.GPClassifier` fits one binary QP classifier per class (one-vs-rest, as
scikit-learn's ``GaussianProcessClassifier``) and normalises their probabilities. Here on two
standardised features of the iris data, with fixed kernel hyperparameters (setosa is separable
from the rest, so the evidence of its binary problem grows without bound in the signal
variance: fixed values keep the picture readable); the colour is the most probable class, its intensity the probability.
"""

import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_iris
from sklearn.preprocessing import StandardScaler

from qpinfer import GPClassifier

iris = load_iris()
X = StandardScaler().fit_transform(iris.data[:, 2:4])  # petal length and width
y = iris.target

clf = GPClassifier("qp", optimizer=None, variance=10.0, length_scale=1.0).fit(X, y)
print(f"training accuracy: {clf.score(X, y):.3f}")

xx, yy = np.meshgrid(np.linspace(-2.2, 2.2, 120), np.linspace(-2.2, 2.2, 120))
proba = clf.predict_proba(np.c_[xx.ravel(), yy.ravel()])
colors = np.array([[0.85, 0.2, 0.2], [0.2, 0.6, 0.2], [0.2, 0.3, 0.85]])
image = proba @ colors + (1 - proba.max(axis=1, keepdims=True)) * 0.6

fig, ax = plt.subplots(figsize=(6, 5))
ax.imshow(image.reshape(*xx.shape, 3), origin="lower", extent=(-2.2, 2.2, -2.2, 2.2), alpha=0.7)
for k, name in enumerate(iris.target_names):
    ax.scatter(*X[y == k].T, color=colors[k], edgecolor="k", label=name)
ax.set_xlabel("petal length (standardised)")
ax.set_ylabel("petal width (standardised)")
ax.legend(loc="upper left")
ax.set_title("GPClassifier(method='qp'), one-vs-rest")
fig.tight_layout()
