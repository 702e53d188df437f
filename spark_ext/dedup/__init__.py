"""Dedup: exactly once = at least once + deduplication, state bounded (docs/design.md, "Dedup").

:func:`deduplicate` + :class:`DedupSink`, or ``connectors.delta.dedup_sink.DeltaDedupSink``;
both use one :class:`DedupConfig` and catalog. The modules and what each holds: docs/design.md,
"Dedup". Every module's public names are public here; importing it declares its fault points.

>>> DedupConfig(catalog_path="var/catalog", capacity=1_000, buckets=2).capacity_per_bucket
500
"""

from __future__ import annotations

from spark_ext.dedup import (
    bucket,
    catalog,
    config,
    errors,
    filters,
    metrics,
    operator,
    sink,
    state,
    tags,
)
from spark_ext.dedup.bucket import *  # noqa: F403
from spark_ext.dedup.catalog import *  # noqa: F403
from spark_ext.dedup.config import *  # noqa: F403
from spark_ext.dedup.errors import *  # noqa: F403
from spark_ext.dedup.filters import *  # noqa: F403
from spark_ext.dedup.metrics import *  # noqa: F403
from spark_ext.dedup.operator import *  # noqa: F403
from spark_ext.dedup.sink import *  # noqa: F403
from spark_ext.dedup.state import *  # noqa: F403
from spark_ext.dedup.tags import *  # noqa: F403

_MODULES = (bucket, catalog, config, errors, filters, metrics, operator, sink, state, tags)
__all__ = [name for module in _MODULES for name in module.__all__]
