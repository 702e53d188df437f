"""The recovery harness's cases of the guarantee jobs, one module per job family.

:mod:`jobs.registry` puts them in one table by name. Each family module holds the
:class:`~spark_ext.recovery.RecoveryCase` subclass of its jobs (how the harness feeds them,
runs them and reads their outputs) and the declared cases themselves (``CASES``: the fault
point and expected outcome of every fault class each job declares):

- :mod:`jobs.cases.fault_cells`: what the families share: the typed-error outcomes
  (``OWNER_REFUSED``, ``UNPROVABLE``, ...), :func:`~jobs.cases.fault_cells.cells`,
  :func:`~jobs.cases.fault_cells.broker_cells` and what retention does to a Delta table.
- :mod:`jobs.cases.kafka_to_delta`: demo events from Kafka into Delta tables (at most once,
  at least once, the exactly-once Delta sinks).
- :mod:`jobs.cases.kafka_to_kafka`: demo events forwarded to an output topic (the
  exactly-once Kafka sinks and Spark's own Kafka writer).
- :mod:`jobs.cases.tracker`: windows closed by the tracker (one query, two queries).
- :mod:`jobs.cases.readings`: sensor readings through the ordering buffer, dedup and EWMA,
  and through the exact dedup sink.
- :mod:`jobs.cases.upsert`: running totals MERGEd at least once (rollback-convergent).
"""
