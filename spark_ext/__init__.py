"""spark_ext: delivery and completeness guarantees for Spark Structured Streaming (PySpark 4.2).

The layers, top to bottom (docs/design.md, "Layers"; imports point downward only):

=====================  =====================================================================
application            ``jobs`` (one job per guarantee, notebooks, the harness cases),
                       ``jobs.cli`` (``spark-ext``), ``scripts`` (setup, demo, benchmarks)
connectors             ``connectors``: Kafka and Delta I/O and the sinks built on it --
                       ``connectors.sinks`` (``exactly_once_to_delta`` / ``_to_kafka``),
                       ``connectors.delta`` (``two_phase``, ``idempotent``, ``dedup_sink``),
                       ``connectors.kafka`` (the reader, ``slices``, ``idempotent``,
                       ``local_broker``)
harness                :mod:`spark_ext.recovery` (fault matrix, campaign, classification),
                       :mod:`spark_ext.jobrun` (one job process, killed or not)
core                   :mod:`spark_ext.sinks` (commit protocol, typed errors, ``Trigger``),
                       :mod:`spark_ext.streaming` (tracked queries: tracker + operators in Spark),
                       :mod:`spark_ext.operators` (windows, joins, EWMA flushed by substream end),
                       :mod:`spark_ext.tracker` (substream end without watermarks),
                       :mod:`spark_ext.ordering` (deterministic ordering buffers, any fold),
                       :mod:`spark_ext.dedup` (Bloom filters in front of an exact catalog),
                       :mod:`spark_ext.quarantine` (bad rows with their reason),
                       :mod:`spark_ext.config` / :mod:`spark_ext.session` (typed profiles, the
                       session), :mod:`spark_ext.metrics` (progress listener),
                       :mod:`spark_ext.state_inspect` (state store sizes)
base                   :mod:`spark_ext.errors`, :mod:`spark_ext.crash` (fault points),
                       :mod:`spark_ext.hashing` (stable hashes), :mod:`spark_ext.jvm` (jars),
                       :mod:`spark_ext.kafka_clients` (every Kafka client)
=====================  =====================================================================

The names most pipelines need are importable from here; each is loaded on first use, so
``import spark_ext`` alone starts no Spark and imports no package it does not name:

>>> from spark_ext import DedupConfig, OrderingConfig
>>> DedupConfig(catalog_path="var/catalog").buckets
8

Everything else is imported from its package (``from spark_ext.tracker import ...``); every
public module lists its names in ``__all__``. The package ships ``py.typed``.
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
