"""Bloom-fronted dedup vs Spark's dropDuplicates / dropDuplicatesWithinWatermark: rows/s, state bytes.

Each variant writes a Delta table from the same Parquet input (a file per micro-batch):
``dropDuplicates`` and ``dropDuplicatesWithinWatermark`` (baselines, Spark's Delta sink),
``DeltaDedupSink`` and ``bloom operator+DedupSink``. Environment: ``DEDUP_BENCH_IDS``
(``1000000,10000000``), ``DEDUP_BENCH_VARIANTS``, ``DEDUP_BENCH_FILES`` (micro-batches,
default 10: ~1M rows a batch at 10M ids).
"""

from __future__ import annotations

import os
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.common import BenchContext, Figure, folder_bytes, start_query

#: Ids per run at scale 1 (the issue asks for 1M and 10M); 1 % of rows are duplicates.
SIZES = (1_000_000, 10_000_000)
DUP_SHARE = 0.01
#: Micro-batches (input files) per run.
FILES = int(os.environ.get("DEDUP_BENCH_FILES") or 10)
FP_RATE = 0.01
EPOCH_MS = 1_767_225_600_000  # 2026-01-01
#: Rows per Parquet row group: Spark splits a file (one micro-batch) at row groups, so every
#: variant reads a batch with both cores, as it would from a Kafka topic with partitions.
ROW_GROUP = 128_000
#: The two Bloom-fronted variants: the driver-side sink and the stateful operator + its sink.
SINK = "DeltaDedupSink"
OPERATOR = "bloom operator+DedupSink"


def make_input(folder: Path, ids: int, seed: int = 5) -> int:
    """``ids`` distinct ids plus 1 % re-deliveries (each repeating an id up to two files earlier), in
    ``FILES`` parquet files; returns rows. Event times span ten minutes: one filter generation,
    inside ``dropDuplicatesWithinWatermark``'s delay.
    """
    rng = np.random.default_rng(seed)
    n_dup = int(ids * DUP_SHARE)
    rows = ids + n_dup
    per_file = rows // FILES
    is_dup = np.zeros(rows, dtype=bool)
    is_dup[rng.choice(np.arange(1, rows), size=n_dup, replace=False)] = True
    seq = np.zeros(rows, dtype=np.int64)
    seq[~is_dup] = np.arange(ids, dtype=np.int64)
    back = rng.integers(1, 2 * per_file, size=n_dup)
    for pos, b in zip(np.flatnonzero(is_dup), back, strict=True):
        seq[pos] = seq[max(0, pos - b)]
    record_id = np.char.add("r", np.char.zfill(seq.astype(str), 10))
    table_rows = np.arange(rows, dtype=np.int64)
    event_ms = EPOCH_MS + table_rows * 600_000 // rows
    folder.mkdir(parents=True, exist_ok=True)
    for f in range(FILES):
        lo, hi = f * per_file, rows if f == FILES - 1 else (f + 1) * per_file
        pq.write_table(
            pa.table(
                {
                    "record_id": pa.array(record_id[lo:hi], pa.string()),
                    "event_time": pa.array(event_ms[lo:hi], pa.timestamp("ms", tz="UTC")),
                    "partition": pa.array(np.full(hi - lo, f, dtype=np.int32)),
                    "offset": pa.array(table_rows[lo:hi]),
                }
            ),
            folder / f"part-{f:03d}.parquet",
            row_group_size=ROW_GROUP,
        )
    return rows


def state_bytes(progress: dict[str, Any]) -> int:
    """State bytes of the last batch: the larger of the store's memory and its SST files."""
    ops = progress.get("stateOperators") or []
    mem = sum(int(op.get("memoryUsedBytes") or 0) for op in ops)
    sst = sum(int((op.get("customMetrics") or {}).get("rocksdbSstFileSize") or 0) for op in ops)
    return max(mem, sst)


def run_variant(ctx: BenchContext, name: str, source: Path, schema: Any, build) -> dict[str, Any]:
    """Run one variant over ``source`` (a file per micro-batch); what it measured."""
    spark = ctx.spark
    out = ctx.folder(f"dedup-{name}")
    df = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(source))
    start = time.perf_counter()
    query, sink = build(df, out)
    query.awaitTermination()  # raises the query's error
    seconds = time.perf_counter() - start
    state, checkpoint_state = state_bytes(query.lastProgress or {}), out / "chk" / "state"
    if (out / "_dedup_state" / "filters").exists():  # DeltaDedupSink: filters outside Spark state
        state, checkpoint_state = sink.batches[-1].state_bytes, out / "_dedup_state" / "filters"
    return {
        "seconds": seconds,
        "state_bytes": state,
        "checkpoint_state_bytes": folder_bytes(checkpoint_state),
        "written": spark.read.format("delta").load(str(out / "table")).count(),
        "sink": sink,
    }


def config(ids: int, out: Path) -> Any:
    """The same filters for both Bloom variants: ``ids`` per generation at ``FP_RATE``."""
    from spark_ext.dedup import DedupConfig

    return DedupConfig(
        catalog_path=str(out / "catalog"), capacity=ids, fp_rate=FP_RATE, rotation_ms=3_600_000,
        generations=2, buckets=8, coordinate_columns=("partition", "offset"),
    )  # fmt: skip


def variants(ids: int) -> dict[str, Any]:
    """Name -> ``build(df, out)``: the started query and the Bloom-fronted sink (or ``None``)."""
    from connectors.delta.dedup_sink import DeltaDedupSink
    from spark_ext.dedup import DedupSink, deduplicate

    def spark(dedup: Any) -> Any:
        return lambda df, out: (start_query(dedup(df), out), None)

    def delta_sink(df: Any, out: Path) -> Any:  # each bucket decided in its task, no state store
        sink = DeltaDedupSink(
            config(ids, out), str(out / "table"), "bench.dedup", str(out / "_dedup_state")
        )
        return start_query(df, out, sink), sink

    def operator(df: Any, out: Path) -> Any:
        sink = DedupSink(config(ids, out), str(out / "table"), sink_id="bench.dedup_operator")
        return start_query(deduplicate(df, sink.config), out, sink), sink

    def within_watermark(df: Any) -> Any:
        return df.withWatermark("event_time", "1 hour").dropDuplicatesWithinWatermark(["record_id"])

    return {
        "dropDuplicates": spark(lambda df: df.dropDuplicates(["record_id"])),
        "dropDuplicatesWithinWatermark": spark(within_watermark),
        SINK: delta_sink,
        OPERATOR: operator,
    }


def expected_fp_rates(sink: Any) -> tuple[float, float]:
    """Mean over buckets of the expected false-positive rate of the filters saved before and
    after the last batch (a key is "maybe" if any kept generation says so)."""
    store = sink.state
    last = max(v for b in store.buckets() for v in store.bucket(b).versions())

    def rate(before: int) -> float:
        rates = []
        for b in store.buckets():
            _, data = store.load_before(b, before)
            if data is None:
                continue
            bloom = sink.config.new_bloom()
            bloom.load_bytes(data)
            miss = np.prod([1 - f.expected_fp_rate() for f in bloom.filters.values()])
            rates.append(1 - float(miss))
        return float(np.mean(rates))

    return rate(last), rate(last + 1)


def run(ctx: BenchContext) -> list[Figure]:
    sizes = [int(s) for s in os.environ.get("DEDUP_BENCH_IDS", "").split(",") if s] or [
        ctx.n(s) for s in SIZES
    ]
    chosen = os.environ.get("DEDUP_BENCH_VARIANTS")  # e.g. "dropDuplicates,DeltaDedupSink"
    figures: list[Figure] = []
    warmed = False
    for ids in sizes:
        source = ctx.folder(f"dedup-input-{ids}")
        rows = make_input(source, ids)
        schema = ctx.spark.read.parquet(str(source)).schema
        bench = f"dedup {ids / 1e6:g}M" + ("" if FILES == 10 else f" {FILES} batches")
        figure = partial(Figure, bench)
        print(f"  {bench}: {rows:,} rows ({rows - ids:,} duplicates)", flush=True)
        builds = variants(ids)
        if not warmed:  # JIT, Python workers, Delta classes: not charged to the first variant
            warm = ctx.folder("dedup-warmup-input")
            (warm / "part-000.parquet").symlink_to(source / "part-000.parquet")
            for name in ("dropDuplicates", SINK):
                run_variant(ctx, f"warmup-{name}", warm, schema, builds[name])
            warmed = True
        for name, build in builds.items():
            if chosen and name not in chosen.split(","):
                continue
            r = run_variant(ctx, name, source, schema, build)
            base = name == "dropDuplicates"
            note = "" if r["written"] == ids else f"wrote {r['written']:,} != {ids:,}"
            figures += [
                figure(name, "rows/s", rows / r["seconds"], "rows/s", base, note),
                figure(name, "state bytes", r["state_bytes"], "B", base),
                figure(name, "checkpoint state", r["checkpoint_state_bytes"], "B", base),
            ]
            sink = r["sink"]
            if sink is None:
                continue
            if name == SINK:
                # What theory says for the last batch: (1 - e^(-kn/m))^k of the filters it met
                # (the version before it) and of those it left (its own version).
                lo, hi = (100 * r for r in expected_fp_rates(sink))
                figures += [
                    figure(name, "expected FP rate", lo, "%", note="filters before last"),
                    figure(name, "expected FP rate", hi, "%", note="filters after last"),
                ]
            m, last = sink.metrics, sink.batches[-1]
            catalog = folder_bytes(ctx.scratch / f"dedup-{name}" / "catalog")
            full = "last batch (filter nearly full)"
            figures += [
                figure(name, "lookups avoided", 100 * m.lookups_avoided, "%"),
                figure(name, "observed FP rate", 100 * m.observed_fp_rate, "%"),
                figure(name, "observed FP rate", 100 * last.observed_fp_rate, "%", note=full),
                figure(name, "configured FP rate", 100 * FP_RATE, "%"),
                figure(
                    name, "catalog bytes", catalog, "B", note="exact catalog, outside Spark state"
                ),
            ]
    return figures
