"""spark_ext: delivery and completeness guarantees for Spark Structured Streaming (PySpark 4.2).

The layers, top to bottom (docs/design.md, "Layers"; imports point downward only):

===========  ==========================================================================
application  ``jobs`` (a job per guarantee, notebooks, harness cases, ``jobs.cli``), ``scripts``
connectors   ``connectors.sinks``, ``connectors.delta``, ``connectors.kafka`` (I/O, the sinks),
             ``connectors.s3`` (the local S3 store), ``connectors.processes`` (local servers'
             processes), ``connectors.demo_events``
harness      :mod:`spark_ext.recovery` (matrix, campaign, classes), :mod:`spark_ext.jobrun`
core         :mod:`spark_ext.sinks` (commit protocol), :mod:`spark_ext.streaming` (tracked
             queries), :mod:`spark_ext.operators`, :mod:`spark_ext.tracker`,
             :mod:`spark_ext.ordering`, :mod:`spark_ext.dedup`, :mod:`spark_ext.quarantine`,
             :mod:`spark_ext.config`, :mod:`spark_ext.session`, :mod:`spark_ext.metrics`,
             :mod:`spark_ext.state_inspect`, :mod:`spark_ext.preflight` (start-up checks)
base         :mod:`spark_ext.errors`, :mod:`spark_ext.crash` (fault points),
             :mod:`spark_ext.hashing`, :mod:`spark_ext.jvm`, :mod:`spark_ext.kafka_clients`,
             :mod:`spark_ext.storage` (a location on any store),
             :mod:`spark_ext.local_files` (file lock and fsync: local folders only)
===========  ==========================================================================

The names most pipelines need are importable from here, each loaded on first use (``import
spark_ext`` starts no Spark); everything else from its package, whose ``__all__`` lists it.

>>> from spark_ext import DedupConfig
>>> DedupConfig(catalog_path="var/catalog").buckets
8
"""

from __future__ import annotations

import importlib
from typing import Any

#: Public name -> the module that defines it (loaded lazily by :func:`__getattr__`).
_EXPORTS: dict[str, str] = {
    # session and configuration
    "build_session": "spark_ext.session",
    "load_profile": "spark_ext.config",
    "Profile": "spark_ext.config",
    # errors
    "SparkExtError": "spark_ext.errors",
    "ConfigError": "spark_ext.errors",
    # sinks (protocol level; the sinks themselves are in connectors.sinks)
    "Trigger": "spark_ext.sinks",
    "SinkError": "spark_ext.sinks",
    "BatchRegressionError": "spark_ext.sinks",
    # dedup
    "DedupConfig": "spark_ext.dedup",
    "DedupMetrics": "spark_ext.dedup",
    "DedupSink": "spark_ext.dedup",
    "deduplicate": "spark_ext.dedup",
    "BloomFilter": "spark_ext.dedup",
    "RotatingBloom": "spark_ext.dedup",
    # ordering
    "OrderingConfig": "spark_ext.ordering",
    "KeyedFold": "spark_ext.ordering",
    "order_and_fold": "spark_ext.ordering",
    "end_control_rows": "spark_ext.ordering",
    # quarantine
    "JsonContract": "spark_ext.quarantine",
    "parse_json": "spark_ext.quarantine",
    # metrics and state
    "ProgressListener": "spark_ext.metrics",
    "StateInspector": "spark_ext.state_inspect",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'spark_ext' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
