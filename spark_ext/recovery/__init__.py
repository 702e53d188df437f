"""Recovery harness: what a fault did to a guarantee job's output, job by job and fault by fault.

A job runs clean (``O_e``), under one fault and restarted (``O_f + O'``); the difference is named
with the recovery classes of Hwang et al. (ICDE 2005), or a typed error with nothing written
(docs/design.md, "Fault points" and "Recovery classes").

=============================  ================================================================
``classification``             the classes and :func:`classify` (pure, no Spark, no I/O)
``faults``                     fault classes and what a job declares per class (pure)
``errors``                     the harness's typed errors, the typed error a failed run names
``case``                       :class:`RecoveryCase`: a job as the harness sees it, its rows
``runs``                       a fresh context, the clean run, the restart, the results
``broker_faults``              a broker of the harness's own, paused or killed mid-run
``store_faults``, ``_proxy``   the object store answering 503/500 through a fault proxy
``retention``                  an output expired between a kill and the restart
``disorder``                   input whose event times break the partitions' promise
``speculation``                a straggler task and Spark's speculative copy of it
``harness``                    :class:`RecoveryHarness`: the kill check, each cell to its module
``kills``                      a job killed at each declared step in turn, or at random moments
``profiles``                   derived profiles (speculation, own broker)
``report``                     the text table and the HTML report with one plot per output
``matrix``                     jobs x faults: :func:`run_plan` and its HTML picture
``campaign(_plan)``            the randomized campaign: drawn from a seed, run, checked
=============================  ================================================================

>>> spec = OutputSpec(columns=("id", "v"))
>>> classify([{"id": 1, "v": "a"}], [{"id": 1, "v": "a"}] * 2, spec).recovery_class
<RecoveryClass.ROLLBACK_REPEATING: 'rollback-repeating'>
"""

from spark_ext.recovery.case import (
    CrashPlan,
    ExpectedOutput,
    HarnessContext,
    RecoveryCase,
    RecoveryResult,
    RunSlot,
    read_delta_rows,
)
from spark_ext.recovery.classification import FinalStateView, OutputSpec, RecoveryClass, classify
from spark_ext.recovery.errors import (
    EmptyCleanOutput,
    FaultNotApplicable,
    FaultNotFired,
    JobRunFailed,
    RecoveryError,
    RetentionNotApplied,
    observed_error,
)
from spark_ext.recovery.faults import ExpectedError, FaultCell, FaultClass
from spark_ext.recovery.harness import RecoveryHarness, forget_last_commit
from spark_ext.recovery.report import format_table, write_report

__all__ = [
    "CrashPlan",
    "EmptyCleanOutput",
    "ExpectedError",
    "ExpectedOutput",
    "FaultCell",
    "FaultClass",
    "FaultNotApplicable",
    "FaultNotFired",
    "FinalStateView",
    "HarnessContext",
    "JobRunFailed",
    "OutputSpec",
    "RecoveryCase",
    "RecoveryClass",
    "RecoveryError",
    "RecoveryHarness",
    "RecoveryResult",
    "RetentionNotApplied",
    "RunSlot",
    "classify",
    "forget_last_commit",
    "format_table",
    "observed_error",
    "read_delta_rows",
    "write_report",
]
