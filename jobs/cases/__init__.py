"""The recovery harness's cases of the guarantee jobs, one module per job family.

Each family module holds its :class:`~spark_ext.recovery.RecoveryCase` subclass and ``CASES``
(the cells each job declares); :mod:`jobs.cases.fault_cells` holds what the families share;
:mod:`jobs.registry` lists them by name.
"""
