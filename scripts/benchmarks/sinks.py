"""Rows/s of the exactly-once Delta and Kafka sinks against Spark's own Delta and Kafka sinks.

``SPARK_EXT_BENCH_SINKS=kafka`` (or ``delta``) runs one half only. The Kafka half measures the
two-phase sink (a transaction per task, records never pass the driver) and the idempotent one.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from benchmarks.common import BenchContext, Figure, timed, until_done
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
    per_trigger = max(1000, n // BATCH_FRACTION)
    run_id = int(time.time())
    once = Trigger(available_now=True)
    figures: list[Figure] = []

    def source(name: str = topic) -> Any:
        return kafka.read_stream(
            ctx.spark, ctx.bootstrap, name, max_offsets_per_trigger=per_trigger
        )

    def measure(
        metric: str, variant: str, start: Callable[[], Any], baseline: bool = False
    ) -> None:
        seconds = timed(start)
        figures.append(
            Figure("sinks", variant, metric, n / seconds, "rows/s", baseline, f"{n:,} rows")
        )
        print(f"  {variant}: {seconds:.1f}s", flush=True)

    # -- Delta: parsed events -> a new table each time ----------------------------------
    def spark_delta() -> Any:
        return until_done(parse_events(source()), ctx.folder("spark-delta"))

    def ours_delta(mode: Any) -> Callable[[], Any]:
        def start() -> Any:
            out = ctx.folder(f"eo-delta-{mode}")
            return exactly_once_to_delta(
                parse_events(source()), str(out / "table"), sink_id="bench",
                checkpoint=str(out / "chk"), mode=mode, trigger=once,
            )  # fmt: skip

        return start

    halves = os.environ.get("SPARK_EXT_BENCH_SINKS", "all")
    timed(spark_delta)  # warm-up (not timed): the first query of a session pays JIT and classes
    if halves in ("all", "delta"):
        measure("delta rows/s", "spark delta sink", spark_delta, baseline=True)
        measure("delta rows/s", "two-phase delta (delta-rs commit)", ours_delta("two_phase"))
        measure("delta rows/s", "idempotent delta (txnAppId)", ours_delta("idempotent"))
    if halves not in ("all", "kafka"):
        return figures

    # -- Kafka: forwarded records -> a new topic each time ------------------------------
    def target(mode: str, tag: str) -> str:
        name = f"bench-sink-{mode}{tag}-{run_id}"
        kafka.create_topic(ctx.bootstrap, name, 3)
        return name

    def spark_kafka(name: str = topic, tag: str = "") -> Any:
        out = ctx.folder(f"spark-kafka{tag}")
        records = forward(source(name)).drop("record_id")  # the same key/value, nothing else
        options = {**kafka.spark_options(ctx.bootstrap), "topic": target("spark", tag)}
        return until_done(records, out, "kafka", **options)

    def ours_kafka(mode: Any, name: str = topic, tag: str = "") -> Callable[[], Any]:
        def start() -> Any:
            out = ctx.folder(f"eo-kafka-{mode}{tag}")
            return exactly_once_to_kafka(
                forward(source(name)), target(mode, tag), bootstrap=ctx.bootstrap,
                sink_id=f"bench{tag}_{run_id}", checkpoint=str(out / "chk"), mode=mode,
                trigger=once,
            )  # fmt: skip

        return start

    # Warm-up (not timed): the first Python-worker query pays seconds of start-up and imports,
    # once per long-running query, a cost Spark's own sink never has.
    warm = events_topic(ctx, WARM_EVENTS)
    timed(lambda: spark_kafka(warm, "_warm"))
    timed(ours_kafka("two_phase", name=warm, tag="_warm"))
    timed(ours_kafka("idempotent", name=warm, tag="_warm"))
    measure("kafka rows/s", "spark kafka sink", spark_kafka, baseline=True)
    measure("kafka rows/s", "two-phase kafka (1 txn/task)", ours_kafka("two_phase"))
    measure("kafka rows/s", "idempotent kafka (record ids)", ours_kafka("idempotent"))
    return figures
