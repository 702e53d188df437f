"""The driver path of a tracked query: one collect, :func:`~spark_ext.streaming.batch.run_batch`
on the driver, its state per batch id (docs/design.md, "Tracked queries": the two paths)."""

from __future__ import annotations

from dataclasses import dataclass, field

from pyspark.sql import DataFrame
from pyspark.sql.types import StructType

from spark_ext import storage
from spark_ext.crash import declare
from spark_ext.errors import ConfigError
from spark_ext.storage import Location
from spark_ext.streaming.batch import BatchState, run_batch
from spark_ext.streaming.envelope import LATE_SCHEMA, StageConfig
from spark_ext.streaming.handler import BatchHandler
from spark_ext.tracker.errors import TrackerError

__all__ = ["STATE_SAVED", "DriverHandler", "DriverStateTooLarge", "StateLog"]

STATE_SAVED = declare(
    "tracked.driver.state_saved", "driver", "batch state written, results not yet"
)
#: The driver path's state files, one per batch id, inside the checkpoint.
STATE_DIR = "tracked_driver"


class DriverStateTooLarge(TrackerError):
    """The driver path holds more open (window, key) groups than its limit allows."""


class StateLog:
    """The driver path's state per batch id: ``<checkpoint>/tracked_driver/<batch id>.json``,
    through :mod:`spark_ext.storage` (local or S3); the two newest are kept."""

    def __init__(self, checkpoint: str) -> None:
        self.folder = Location.parse(checkpoint).join(STATE_DIR)

    def _batches(self) -> list[int]:
        names = storage.list_prefix(self.folder)
        return sorted(int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit())

    def _path(self, batch_id: int) -> Location:
        return self.folder.join(f"{batch_id:020d}.json")

    def before(self, batch_id: int) -> BatchState:
        """The state after the newest batch below ``batch_id`` (empty before the first)."""
        older = [b for b in self._batches() if b < batch_id]
        if not older:
            return BatchState()
        return BatchState.from_json(storage.read_bytes(self._path(older[-1])))

    def save(self, batch_id: int, state: BatchState) -> None:
        """Write ``batch_id``'s state (atomically), then drop those below ``batch_id - 1``."""
        storage.write_bytes(self._path(batch_id), state.to_json())
        for b in self._batches():
            if b < batch_id - 1:
                storage.delete(self._path(b))


@dataclass(kw_only=True)
class DriverHandler(BatchHandler):
    """:class:`BatchHandler` of the driver path: step 1 is one collect and the pure batch."""

    cfg: StageConfig
    checkpoint: str
    result_schema: StructType
    #: Open (window, key) groups the driver may hold (docs/design.md, "Tracked queries").
    max_open_keys: int = 1_000_000
    #: Open (window, key) groups after the last batch (the state-size metric).
    open_keys: int = 0
    _log: StateLog | None = field(default=None, repr=False)

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        states = self._log = self._log or StateLog(self.checkpoint)
        src = df.toPandas()  # 1: the batch's one job
        state = states.before(batch_id)
        out = run_batch(self.cfg, state, src, [])
        self.open_keys = state.open_keys(self.cfg.operator)
        if self.open_keys > self.max_open_keys:
            raise DriverStateTooLarge(
                f"[{self.query}] batch {batch_id}: {self.open_keys} open (window, key) groups "
                f"exceed max_open_keys={self.max_open_keys}: raise it, or restart on a new "
                "checkpoint with path='distributed'"
            )
        states.save(batch_id, state)
        STATE_SAVED.reached(batch_id)
        spark = df.sparkSession
        results = spark.createDataFrame(out.results, self.result_schema)
        late = spark.createDataFrame(out.late, LATE_SCHEMA)
        counts = out.late["reason"].value_counts().to_dict() if len(out.late) else {}
        counts = {str(k): int(v) for k, v in counts.items()}
        self.deliver(batch_id, results, late, counts, out.reports)


def check_path(path: str) -> str:
    """``path`` if it names a path of a tracked query, else a typed error."""
    if path not in ("driver", "distributed"):
        raise ConfigError("TrackedQuery.start(path)", f"'driver' or 'distributed', got {path!r}")
    return path
