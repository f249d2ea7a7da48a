"""Approximate inference for GP models with factorised likelihoods, given a likelihood object and
(for QP) a sigma* table.

Holds: the one site-update loop (:mod:`~qpinfer.inference.site_loop`) and the site update it
applies (:mod:`~qpinfer.inference.site_update`), the projections EP, QP, Power EP and relaxed EP
differ in (:mod:`~qpinfer.inference.projections`, :mod:`~qpinfer.inference.power_ep`,
:mod:`~qpinfer.inference.relaxed_ep`),
:mod:`~qpinfer.inference.ep`, the dense posterior and evidence, the Laplace and VB baselines,
the one L-BFGS-B helper for evidence searches (:mod:`~qpinfer.inference.optimize`, over the
packed vectors of :mod:`~qpinfer.inference.search_space`, returning
:mod:`~qpinfer.inference.search_result`'s result and checks), and
:mod:`~qpinfer.inference.sparse` (pseudo-point inference, in process or on a dask cluster).

May import: :mod:`qpinfer.tables`, :mod:`qpinfer.sigma`, :mod:`qpinfer.likelihoods`,
:mod:`qpinfer.quadrature` and the top-level helpers (``checks``, ``kernels``,
``dask_connect``, ``malloc``); never :mod:`qpinfer.estimators`.
"""
