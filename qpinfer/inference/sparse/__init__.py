"""Pseudo-point (sparse) GP inference, O(N M^2): the prior, the sweeps, and the dask sweep.

Holds: :mod:`~qpinfer.inference.sparse.pseudo_points` (the pseudo-point prior and low-rank
posterior), :mod:`~qpinfer.inference.sparse.sites` (Power EP / QP sweeps in process),
:mod:`~qpinfer.inference.sparse.dask_sweep` and
:mod:`~qpinfer.inference.sparse.dask_partitions` (the same sweeps as a map-reduce over data
partitions on a dask cluster; dask is imported only there, and only when used).

May import: the rest of :mod:`qpinfer.inference` and what it may import.
"""
