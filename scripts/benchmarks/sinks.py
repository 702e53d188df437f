"""Rows/s of the exactly-once Delta and Kafka sinks against Spark's own Delta and Kafka sinks.

``SPARK_EXT_BENCH_SINKS=kafka`` (or ``delta``) runs one half only. The Kafka half measures the
two-phase sink (a transaction per task, records never pass the driver) and the idempotent one.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from benchmarks.common import BenchContext, Figure
from benchmarks.ingest import events_topic
from connectors import kafka
from connectors.sinks import Trigger, exactly_once_to_delta, exactly_once_to_kafka
from jobs.exactly_once_delta import parse_events
from jobs.exactly_once_kafka import forward

EVENTS = 1_000_000
#: Same micro-batches for every variant: 5 batches at full scale.
BATCH_FRACTION = 5
#: Events of the Kafka sinks' warm-up (one small batch through each sink, not timed).
WARM_EVENTS = 3000


def run(ctx: BenchContext) -> list[Figure]:
    n = ctx.n(EVENTS)
    topic = events_topic(ctx, n)
    spark = ctx.spark
    per_trigger = max(1000, n // BATCH_FRACTION)
    run_id = int(time.time())
    figures: list[Figure] = []

    def source(name: str = topic):
        return kafka.read_stream(spark, ctx.bootstrap, name, max_offsets_per_trigger=per_trigger)

    def timed(bench_metric: str, variant: str, start: Callable[[], object], baseline=False):
        began = time.perf_counter()
        query = start()
        query.awaitTermination()  # type: ignore[attr-defined]
        seconds = time.perf_counter() - began
        figures.append(
            Figure("sinks", variant, bench_metric, n / seconds, "rows/s", baseline=baseline,
                   note=f"{n:,} rows")
        )  # fmt: skip
        print(f"  {variant}: {seconds:.1f}s", flush=True)

    # -- Delta: parsed events -> a new table each time ----------------------------------
    def spark_delta():
        out = ctx.folder("spark-delta")
        return (
            parse_events(source())
            .writeStream.format("delta")
            .option("checkpointLocation", str(out / "chk"))
            .trigger(availableNow=True)
            .start(str(out / "table"))
        )

    def ours_delta(mode):
        def start():
            out = ctx.folder(f"eo-delta-{mode}")
            return exactly_once_to_delta(
                parse_events(source()), str(out / "table"), sink_id="bench",
                checkpoint=str(out / "chk"), mode=mode, trigger=Trigger(available_now=True),
            )  # fmt: skip

        return start

    halves = os.environ.get("SPARK_EXT_BENCH_SINKS", "all")
    # Warm-up (not timed): the first query of a session pays for JIT and class loading.
    warm = spark_delta()
    warm.awaitTermination()
    if halves in ("all", "delta"):
        timed("delta rows/s", "spark delta sink", spark_delta, baseline=True)
        timed("delta rows/s", "two-phase delta (delta-rs commit)", ours_delta("two_phase"))
        timed("delta rows/s", "idempotent delta (txnAppId)", ours_delta("idempotent"))
    if halves not in ("all", "kafka"):
        return figures

    # -- Kafka: forwarded records -> a new topic each time ------------------------------
    def spark_kafka(name: str = topic, tag: str = ""):
        out = ctx.folder(f"spark-kafka{tag}")
        target = f"bench-sink-spark{tag}-{run_id}"
        kafka.create_topic(ctx.bootstrap, target, 3)
        return (
            forward(source(name))
            .drop("record_id")  # Spark's sink gets the same key/value, nothing else
            .writeStream.format("kafka")
            .option("kafka.bootstrap.servers", ctx.bootstrap)
            .option("topic", target)
            .option("checkpointLocation", str(out / "chk"))
            .trigger(availableNow=True)
            .start()
        )

    def ours_kafka(mode, name: str = topic, tag: str = ""):
        def start():
            out = ctx.folder(f"eo-kafka-{mode}{tag}")
            target = f"bench-sink-{mode}{tag}-{run_id}"
            kafka.create_topic(ctx.bootstrap, target, 3)
            return exactly_once_to_kafka(
                forward(source(name)), target, bootstrap=ctx.bootstrap,
                sink_id=f"bench{tag}_{run_id}",
                checkpoint=str(out / "chk"), mode=mode, trigger=Trigger(available_now=True),
            )  # fmt: skip

        return start

    # Warm-up (not timed): the first Python-worker query pays seconds of start-up and imports,
    # once per long-running query, a cost Spark's own sink never has.
    warm = events_topic(ctx, WARM_EVENTS)
    for warm_up in (
        lambda: spark_kafka(warm, "_warm"),
        ours_kafka("two_phase", name=warm, tag="_warm"),
        ours_kafka("idempotent", name=warm, tag="_warm"),
    ):
        warm_up().awaitTermination()  # type: ignore[attr-defined]
    timed("kafka rows/s", "spark kafka sink", spark_kafka, baseline=True)
    timed("kafka rows/s", "two-phase kafka (1 txn/task)", ours_kafka("two_phase"))
    timed("kafka rows/s", "idempotent kafka (record ids)", ours_kafka("idempotent"))
    return figures
