"""
Sparse classification on the digits data
=========================================

:class:`~qpinfer.SparseGPClassifier` replaces the n sites of the dense classifier by M
pseudo-points (sparse power EP, Bui et al., 2017, with QP's projection available), so that a fit
costs O(n M^2) instead of O(n^3). On scikit-learn's handwritten digits (1797 images, 64 pixels;
here "is the digit at least 5?"), test accuracy against the number of pseudo-points M.
"""

import time

import matplotlib.pyplot as plt
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from qpinfer import SparseGPClassifier

X, digit = load_digits(return_X_y=True)
y = (digit >= 5).astype(int)
X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.3, random_state=0)
scaler = StandardScaler().fit(X_train)
X_train, X_test = scaler.transform(X_train), scaler.transform(X_test)

sizes = [5, 10, 20, 40]
accuracy, seconds = [], []
for m in sizes:
    start = time.perf_counter()
    clf = SparseGPClassifier(m, optimizer=None, length_scale=8.0, variance=4.0, random_state=0).fit(
        X_train, y_train
    )
    seconds.append(time.perf_counter() - start)
    accuracy.append(clf.score(X_test, y_test))
    print(f"M = {m:3d}: test accuracy {accuracy[-1]:.3f}")

fig, ax = plt.subplots(figsize=(6, 4))
ax.plot(sizes, accuracy, "o-")
ax.set_xscale("log", base=2)
ax.set_xlabel("pseudo-points M")
ax.set_ylabel("test accuracy")
ax.set_title(f"SparseGPClassifier on digits ({X_train.shape[0]} training rows)")
fig.tight_layout()
