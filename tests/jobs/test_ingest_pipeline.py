"""The first pipeline end to end: Kafka -> parse -> Delta, malformed rows quarantined."""

from __future__ import annotations

import pytest
from chispa import assert_df_equality
from deltalake import DeltaTable

from connectors.demo_events import produce_events, records
from jobs.ingest_events import IngestPaths, start_ingest
from spark_ext.quarantine import QUARANTINE_COLUMNS
from tests.conftest import await_done

pytestmark = pytest.mark.integration

N, BAD_EVERY = 300, 10


def test_every_record_lands_in_events_or_quarantine(spark, kafka_bootstrap, new_topic, tmp_path):
    topic = new_topic("ingest", partitions=3)
    produce_events(kafka_bootstrap, topic, N, malformed_every=BAD_EVERY)
    paths = IngestPaths(tmp_path)

    q = start_ingest(spark, kafka_bootstrap, topic, paths)
    await_done(q, 300)
    assert q.exception() is None

    events = spark.read.format("delta").load(str(paths.events))
    quarantine = spark.read.format("delta").load(str(paths.quarantine))
    assert events.count() == N - N // BAD_EVERY
    assert quarantine.count() == N // BAD_EVERY
    assert sorted(quarantine.columns) == sorted(QUARANTINE_COLUMNS)

    # Expected valid rows, computed from the generator without Spark's parser.
    good = [k for k, v in records(N, malformed_every=BAD_EVERY) if not k.startswith(b"bad")]
    assert events.select("event_id").distinct().count() == len(good)
    reasons = {r.reason for r in quarantine.select("reason").distinct().collect()}
    assert reasons == {"malformed_json", "type_mismatch:amount", "missing_field:event_id"}
    # Every quarantined row keeps its source coordinates.
    assert quarantine.where("topic is null or partition is null or offset is null").count() == 0

    # delta-rs reads the same tables.
    for df, path in ((events, paths.events), (quarantine, paths.quarantine)):
        from_rs = spark.createDataFrame(DeltaTable(str(path)).to_pandas(), schema=df.schema)
        assert_df_equality(df, from_rs, ignore_row_order=True, ignore_nullable=True)


def test_restart_from_checkpoint_reads_only_new_records(
    spark, kafka_bootstrap, new_topic, tmp_path
):
    topic = new_topic("ingest", partitions=3)
    paths = IngestPaths(tmp_path)
    produce_events(kafka_bootstrap, topic, 60, malformed_every=BAD_EVERY)
    await_done(start_ingest(spark, kafka_bootstrap, topic, paths), 300)
    produce_events(kafka_bootstrap, topic, 60, seed=8, malformed_every=BAD_EVERY)
    await_done(start_ingest(spark, kafka_bootstrap, topic, paths), 300)
    events = spark.read.format("delta").load(str(paths.events))
    quarantine = spark.read.format("delta").load(str(paths.quarantine))
    assert events.count() + quarantine.count() == 120
    assert events.select("topic", "partition", "offset").distinct().count() == events.count()
