"""Numerics below every likelihood: panel quadrature on level sets, normal-ratio special functions.

Holds: :mod:`~qpinfer.quadrature.normal_ratios` (phi/Phi without overflow),
:mod:`~qpinfer.quadrature.level_sets` (panel edges on a lobe's log-density level sets),
:mod:`~qpinfer.quadrature.panels` (the panel quadrature of Zhang et al. (2020) eq. (7) over given lobes),
:mod:`~qpinfer.quadrature.tilted` (EP's tilted moments on the same panels).

May import: numpy, scipy and :mod:`qpinfer.checks`; nothing else of qpinfer (a lobe is passed in
as a callable, never as a likelihood object).
"""
