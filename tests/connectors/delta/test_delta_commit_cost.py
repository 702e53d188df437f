"""What a two-phase Delta commit reads does not grow with the table (issue #24, suspicion (c)).

Measured (``/tmp`` script, no Spark, one file per commit): at 100 -> 2,000 commits a batch's
steps 2-4 took 43 -> 103 ms and ``referenced_files`` 12 -> 207 ms, because every commit opened
the table afresh three times (each open reads the newest checkpoint, every file of the table)
and every clean-up parsed every commit file of the log. Counted here instead of timed: the
committer reads the log incrementally, and the referenced-files walk parses a log file once.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

import connectors.delta.log as delta_log
from connectors.delta.staging import stage_batches
from connectors.delta.table import ensure_table
from connectors.delta.two_phase import DeltaCommitter
from spark_ext.sinks.owner import SinkOwner
from spark_ext.sinks.protocol import commit_batch

SCHEMA = StructType([StructField("id", StringType()), StructField("n", LongType())])
OWNER = SinkOwner("c0575e1d-0000-4000-8000-00000000000c")


def staged(table: str, batch_id: int):
    rb = pa.record_batch(
        [pa.array(["a", "b"], pa.string()), pa.array([1, 2], pa.int64())], names=["id", "n"]
    )
    return [stage_batches([rb], table, "s", SCHEMA, batch_id, 0, 0, OWNER.code)]


@pytest.fixture
def table(tmp_path) -> str:
    path = str(tmp_path / "t")
    ensure_table(path, SCHEMA)
    return path


def test_commits_open_the_table_once_and_read_only_new_log_entries(table, monkeypatch):
    import deltalake

    committer = DeltaCommitter(table, "s", owner=OWNER)
    committer.recover(fence=True)
    opened = []
    real = deltalake.DeltaTable.__init__

    def counting(self, *args, **kwargs):
        opened.append(args[0] if args else kwargs.get("table_uri"))
        real(self, *args, **kwargs)

    monkeypatch.setattr(deltalake.DeltaTable, "__init__", counting)
    for batch_id in range(20):
        commit_batch(committer, batch_id, staged(table, batch_id))
    assert len(opened) <= 1, f"{len(opened)} opens of the table for 20 commits"


def test_referenced_files_parses_each_commit_file_once(table, monkeypatch):
    committer = DeltaCommitter(table, "s", owner=OWNER)
    for batch_id in range(20):
        commit_batch(committer, batch_id, staged(table, batch_id))
    parsed: list[str] = []
    real = delta_log._paths_of_json

    def counting(fs, path, out):
        parsed.append(path.rsplit("/", 1)[-1])
        real(fs, path, out)

    monkeypatch.setattr(delta_log, "_paths_of_json", counting)
    first = delta_log.referenced_files(table)
    commit_batch(committer, 20, staged(table, 20))
    second = delta_log.referenced_files(table)
    from deltalake import DeltaTable

    assert len(second) == len(first) + 1
    assert parsed.count(f"{DeltaTable(table).version():020d}.json") == 1  # the new commit
    assert all(parsed.count(n) == 1 for n in set(parsed)), "a commit file parsed twice"
