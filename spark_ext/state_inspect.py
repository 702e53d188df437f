"""A streaming query's state read from its checkpoint (only read, so safe beside a live query):
operators (``format("state-metadata")``), rows (``format("statestore")``) and the bytes every
retained version keeps on storage, per partition. Usage: README, "State store"; from a shell,
``python -m spark_ext.state_inspect CHECKPOINT --show 5``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from spark_ext import storage
from spark_ext.errors import ConfigError, SparkExtError

__all__ = [
    "CheckpointNotFound",
    "PartitionState",
    "StateInspector",
    "StateOperator",
    "StateOperatorNotFound",
    "StateReport",
]

log = logging.getLogger(__name__)

#: Operator names (``state-metadata``) whose state lives in named state variables.
TRANSFORM_WITH_STATE = (
    "transformWithStateExec",
    "transformWithStateInPandasExec",
    "transformWithStateInPySparkExec",
)


class CheckpointNotFound(SparkExtError, FileNotFoundError):
    """The folder is not a streaming checkpoint with a committed batch."""


class StateOperatorNotFound(SparkExtError, LookupError):
    """The checkpoint holds no stateful operator, or not the one asked for."""


@dataclass(frozen=True)
class StateOperator:
    """One state store instance of a stateful operator, as ``state-metadata`` lists it."""

    operator_id: int
    operator_name: str
    store_name: str
    num_partitions: int
    min_batch_id: int
    max_batch_id: int
    #: ``operatorProperties`` (JSON), empty when there are none.
    properties: dict[str, Any] = field(default_factory=dict)

    @property
    def state_variables(self) -> tuple[str, ...]:
        """Names of the state variables of a transformWithState operator, else ``()``."""
        names = [v.get("stateName") for v in self.properties.get("stateVariables", [])]
        return tuple(n for n in names if isinstance(n, str))


@dataclass(frozen=True)
class PartitionState:
    """What one partition of one operator's store holds."""

    operator_id: int
    store_name: str
    partition_id: int
    rows: int  # after the batch (transformWithState: over its variables, one per element)
    bytes_on_disk: int  # every retained version, all files


@dataclass(frozen=True)
class StateReport:
    """The state of a checkpoint after one committed batch."""

    checkpoint: str
    batch_id: int
    operators: tuple[StateOperator, ...]
    partitions: tuple[PartitionState, ...]

    def rows(self, operator_id: int | None = None) -> int:
        """Rows in the state, of one operator or of all."""
        return sum(p.rows for p in self._select(operator_id))

    def bytes_on_disk(self, operator_id: int | None = None) -> int:
        """Bytes of state in the checkpoint, of one operator or of all."""
        return sum(p.bytes_on_disk for p in self._select(operator_id))

    def _select(self, operator_id: int | None) -> list[PartitionState]:
        return [p for p in self.partitions if operator_id in (None, p.operator_id)]

    def to_dict(self) -> dict[str, Any]:
        return {
            "checkpoint": self.checkpoint,
            "batch_id": self.batch_id,
            "rows": self.rows(),
            "bytes_on_disk": self.bytes_on_disk(),
            "operators": [asdict(o) for o in self.operators],
            "partitions": [asdict(p) for p in self.partitions],
        }

    def table(self) -> str:
        """A fixed-width text table: one block per operator store, one line per partition."""
        lines = [f"checkpoint {self.checkpoint}  batch {self.batch_id}"]
        for op in self.operators:
            parts = [
                p
                for p in self.partitions
                if p.operator_id == op.operator_id and p.store_name == op.store_name
            ]
            lines.append(
                f"operator {op.operator_id} {op.operator_name} store {op.store_name}: "
                f"{op.num_partitions} partitions, batches {op.min_batch_id}..{op.max_batch_id}"
            )
            lines.append(f"  {'partition':>9} {'rows':>12} {'bytes_on_disk':>15}")
            for p in parts:
                lines.append(f"  {p.partition_id:>9} {p.rows:>12,} {p.bytes_on_disk:>15,}")
            rows, size = sum(p.rows for p in parts), sum(p.bytes_on_disk for p in parts)
            lines.append(f"  {'total':>9} {rows:>12,} {size:>15,}")
        return "\n".join(lines)


class StateInspector:
    """Read the state of the checkpoint (a :mod:`spark_ext.storage` location, on S3 with the
    session's ``fs.s3a`` settings, or another Hadoop URI) with Spark's state data sources, from
    any session (the store settings come from the checkpoint's offset log)."""

    def __init__(self, spark: SparkSession, checkpoint: str | Path) -> None:
        self.spark = spark
        try:
            self._location: storage.Location | None = storage.Location.parse(checkpoint)
        except ConfigError:  # read through Hadoop (hdfs://, abfss://, ...)
            self._location = None
        self.checkpoint = storage.spark_uri(self._location) if self._location else str(checkpoint)
        _ = spark.streams.active  # creates the StateStoreCoordinator the reader reports to

    def last_committed_batch(self) -> int:
        """The newest batch id in the commit log (:class:`CheckpointNotFound` if none)."""
        names = self._files("commits")
        ids = [int(n) for n in names if n.isdigit()]
        if not ids:
            raise CheckpointNotFound(f"{self.checkpoint} has no committed batch")
        return max(ids)

    def operators(self, batch_id: int | None = None) -> list[StateOperator]:
        """The stateful operators of the checkpoint (``format("state-metadata")``)."""
        self.last_committed_batch()  # a clear error before Spark's own
        reader = self.spark.read.format("state-metadata")
        if batch_id is not None:
            reader = reader.option("batchId", batch_id)
        rows = reader.load(self.checkpoint).collect()
        found = [
            StateOperator(
                operator_id=int(r["operatorId"]),
                operator_name=str(r["operatorName"]),
                store_name=str(r["stateStoreName"]),
                num_partitions=int(r["numPartitions"]),
                min_batch_id=int(r["minBatchId"]),
                max_batch_id=int(r["maxBatchId"]),
                properties=json.loads(r["operatorProperties"]) if r["operatorProperties"] else {},
            )
            for r in rows
        ]
        return sorted(found, key=lambda o: (o.operator_id, o.store_name))

    def read(
        self,
        operator_id: int = 0,
        batch_id: int | None = None,
        store_name: str | None = None,
        state_variable: str | None = None,
    ) -> DataFrame:
        """The state rows (``key``, ``value``, ``partition_id``) of one operator after a batch
        (default: the newest); ``store_name`` for a join's stores, ``state_variable`` for a
        transformWithState operator (required there)."""
        reader = self.spark.read.format("statestore").option("operatorId", operator_id)
        if batch_id is not None:
            reader = reader.option("batchId", batch_id)
        if store_name is not None and store_name != "default":
            reader = reader.option("storeName", store_name)
        if state_variable is not None:
            reader = reader.option("stateVarName", state_variable)
        return reader.load(self.checkpoint)

    def report(self, batch_id: int | None = None) -> StateReport:
        """Rows and bytes of every operator store, per partition, after ``batch_id``
        (:class:`CheckpointNotFound`, :class:`StateOperatorNotFound` if there are none)."""
        batch = self.last_committed_batch() if batch_id is None else batch_id
        operators = self.operators(batch)
        if not operators:
            raise StateOperatorNotFound(f"{self.checkpoint} holds no stateful operator")
        partitions: list[PartitionState] = []
        files = self._files("state")  # one listing for every operator and partition
        for op in operators:
            rows = self._rows_per_partition(op, batch)
            for pid in range(op.num_partitions):
                folder = f"{op.operator_id}/{pid}/"
                if op.store_name != "default":
                    folder += f"{op.store_name}/"
                partitions.append(
                    PartitionState(
                        operator_id=op.operator_id,
                        store_name=op.store_name,
                        partition_id=pid,
                        rows=rows.get(pid, 0),
                        bytes_on_disk=sum(n for f, n in files.items() if f.startswith(folder)),
                    )
                )
        report = StateReport(self.checkpoint, batch, tuple(operators), tuple(partitions))
        log.info(
            "state of %s at batch %s: %s rows, %s bytes",
            self.checkpoint,
            batch,
            report.rows(),
            report.bytes_on_disk(),
        )
        return report

    def _files(self, folder: str) -> dict[str, int]:
        """Size of every file under the checkpoint's ``folder``, by path relative to it."""
        if self._location is not None:
            settings = storage.session_settings(self.spark)
            return storage.file_sizes(self._location.join(folder), settings)
        jvm = self.spark.sparkContext._jvm
        assert jvm is not None
        path = jvm.org.apache.hadoop.fs.Path(f"{self.checkpoint.rstrip('/')}/{folder}")
        fs = path.getFileSystem(self.spark.sparkContext._jsc.hadoopConfiguration())
        found: dict[str, int] = {}
        if fs.exists(path):
            files = fs.listFiles(path, True)
            base = len(str(fs.makeQualified(path).toUri().getPath()).rstrip("/")) + 1
            while files.hasNext():
                status = files.next()
                found[str(status.getPath().toUri().getPath())[base:]] = int(status.getLen())
        return found

    def _rows_per_partition(self, op: StateOperator, batch_id: int) -> dict[int, int]:
        variables: Sequence[str | None] = op.state_variables or (None,)
        if op.operator_name in TRANSFORM_WITH_STATE and not op.state_variables:
            return {}  # a processor without state variables keeps no rows
        counts: dict[int, int] = {}
        for variable in variables:
            df = self.read(op.operator_id, batch_id, op.store_name, variable)
            for r in df.groupBy("partition_id").count().collect():
                pid = int(r["partition_id"])
                counts[pid] = counts.get(pid, 0) + int(r["count"])
        return counts


def main(argv: list[str] | None = None) -> int:
    """CLI: print the state report of a checkpoint (and a few state rows with ``--show``)."""
    parser = argparse.ArgumentParser(
        prog="python -m spark_ext.state_inspect",
        description="Show a streaming query's state from its checkpoint.",
    )
    parser.add_argument("checkpoint", help="the query's checkpointLocation")
    parser.add_argument("--batch-id", type=int, default=None, help="default: newest committed")
    parser.add_argument("--show", type=int, default=0, metavar="N", help="print N state rows")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--profile", default="local", help="configuration profile (conf/)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    from spark_ext.session import build_session

    spark = build_session(args.profile)
    inspector = StateInspector(spark, args.checkpoint)
    try:
        report = inspector.report(args.batch_id)
    except (CheckpointNotFound, StateOperatorNotFound) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(report.to_dict(), indent=2) if args.json else report.table())
    if args.show:
        for op in report.operators:
            for variable in op.state_variables or (None,):
                label = f" state variable {variable}" if variable else ""
                print(f"operator {op.operator_id} store {op.store_name}{label}:")
                df = inspector.read(op.operator_id, report.batch_id, op.store_name, variable)
                df.show(args.show, truncate=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
