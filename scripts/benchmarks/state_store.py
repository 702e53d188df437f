"""State store sweep: batch duration, checkpoint bytes and SIGKILL recovery time per store and live keys.

The query is Spark's own count and sum per key (update mode, ``noop`` sink; a JVM aggregation
keeps Python out of a store comparison) on ``rate-micro-batch``: a fill batch of ``keys``
rows, then ``rows_per_batch`` rows a batch, rolling over the keys. Per store profile and key
count: run the fill and ``STEADY_BATCHES`` batches, SIGKILL at ``state_store.batch_committed``,
measure the checkpoint, restart on a backlog of ``BACKLOG_BATCHES`` and time the first commit
and the catch-up; the job then checks its state rows with
:class:`spark_ext.state_inspect.StateInspector`.

Run: ``.venv/bin/python scripts/bench.py state_store`` (10k, 100k, 1M keys; ``--scale 0.1``),
or one job: ``python -m scripts.benchmarks.state_store --store hdfs --checkpoint-root /tmp/c
--keys 1000 --rows-per-batch 100 --until-batch 5``. Environment: ``SPARK_EXT_STATE_KEYS``
(comma list, not scaled), ``SPARK_EXT_STATE_STORES``, ``SPARK_EXT_STATE_DRIVER_MEMORY``
(default 4g), ``SPARK_EXT_STATE_MAINTENANCE`` (default 5s), ``SPARK_EXT_BENCH_OUT`` (the PNG,
default ``var/bench``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery, StreamingQueryListener

from spark_ext.crash import declare
from spark_ext.metrics import figures_from_progress

from .common import ROOT, Figure, percentile

log = logging.getLogger(__name__)

JOB_MODULE = "scripts.benchmarks.state_store"
#: Fault point reached when every query of the job has committed batch ``N`` (``...@N``).
CRASH_POINT = "state_store.batch_committed"
BATCH_COMMITTED = declare(CRASH_POINT, "driver", "every query of the job committed batch N")

KEYS = (10_000, 100_000, 1_000_000)
STEADY_BATCHES = 20
BACKLOG_BATCHES = 5
#: The benchmark runs only ~20 batches: a short maintenance interval (all stores alike) lets
#: the HDFS store and the changelog write the snapshots a long-running job would have.
MAINTENANCE_INTERVAL = os.environ.get("SPARK_EXT_STATE_MAINTENANCE", "5s")
ROWS_PER_BATCH_FRACTION = 0.01  # steady batches update 1% of the keys ...
MIN_ROWS_PER_BATCH = 1_000  # ... but at least this many


# -- the stateful query ----------------------------------------------------------------------


def start_count_query(
    spark: SparkSession,
    store: str,
    checkpoint: Path,
    keys: int,
    rows: int,
    conf: Mapping[str, str] | None,
    **trigger: Any,
) -> StreamingQuery:
    """Start the count and sum of values per key over ``rate-micro-batch`` (``rows`` a batch not
    yet in the offset log: a replayed batch reads the same rows) with the state store profile
    ``store`` and ``conf`` over it, on ``checkpoint`` (an existing checkpoint keeps the provider
    it was created with)."""
    from spark_ext.config import STATE_STORES

    for key, value in {**STATE_STORES[store], **(conf or {})}.items():
        spark.conf.set(key, value)
    source = spark.readStream.format("rate-micro-batch")
    source = source.options(rowsPerBatch=rows, numPartitions=2, startTimestamp=0).load()
    counts = (
        source.select((F.col("value") % keys).alias("key"), "value")
        .groupBy("key")
        .agg(F.count("*").alias("n"), F.sum("value").alias("total"))
    )
    writer = counts.writeStream.format("noop").queryName(f"state_{store}").outputMode("update")
    writer = writer.option("checkpointLocation", str(checkpoint))
    return (writer.trigger(**trigger) if trigger else writer).start()


# -- the job -----------------------------------------------------------------------------------


class BatchRecorder(StreamingQueryListener):
    """Writes one JSON line per committed batch and fires the crash point.

    A line holds the wall time, batch duration, state rows and the checkpoint bytes added since
    the previous batch. ``state_store.batch_committed@N`` fires once every query committed ``N``.
    """

    def __init__(self, events: Path | None, checkpoints: dict[str, Path]) -> None:
        self._events = events.open("a", buffering=1) if events else None  # a line a write
        self._checkpoints = checkpoints  # query name -> checkpoint folder
        self._files = {name: checkpoint_files(path) for name, path in checkpoints.items()}
        self._committed: dict[str, int] = {}
        self.changed = threading.Condition()

    def all_committed(self, batch: int) -> bool:
        """Whether every query has committed ``batch`` (call holding :attr:`changed`)."""
        return all(self._committed.get(n, -1) >= batch for n in self._checkpoints)

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        now = time.time()
        figures = figures_from_progress(json.loads(event.progress.json))
        name, batch = figures.query_name or "", figures.batch_id
        written = 0
        if name in self._checkpoints:
            files = checkpoint_files(self._checkpoints[name])
            before = self._files.get(name, {})
            written = sum(max(0, size - before.get(path, 0)) for path, size in files.items())
            self._files[name] = files
        record = {
            "event": "batch",
            "query": name,
            "batch": batch,
            "t": now,
            "duration_ms": figures.duration_ms,
            "input_rows": figures.input_rows,
            "state_rows": figures.state_rows,
            "bytes_written": written,
        }
        if self._events is not None:
            self._events.write(json.dumps(record) + "\n")
        with self.changed:
            self._committed[name] = max(batch, self._committed.get(name, -1))
            lowest = min(self._committed.get(n, -1) for n in self._checkpoints)
            self.changed.notify_all()
        BATCH_COMMITTED.reached(lowest)

    def onQueryTerminated(self, event: Any) -> None:
        if event.exception:
            log.error("query %s failed: %s", event.id, event.exception)
        with self.changed:
            self.changed.notify_all()


def checkpoint_files(folder: Path) -> dict[str, int]:
    """Every file under ``folder`` with its size (files removed meanwhile are skipped)."""
    files: dict[str, int] = {}
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            try:
                files[path] = os.stat(path).st_size
            except FileNotFoundError:
                continue
    return files


def run_queries(
    spark: SparkSession, stores: Sequence[str], checkpoint_root: Path, keys: int,
    rows_per_batch: int, until_batch: int, *, events: Path | None = None,
    timeout_s: float = 1800.0, conf: Mapping[str, str] | None = None, interval: str | None = None,
) -> None:  # fmt: skip
    """Run the count query once per store until every one has committed ``until_batch``.

    A new checkpoint first gets a fill batch of ``keys`` rows; then all run side by side, as fast
    as they can or one batch per ``interval`` (e.g. ``"1 second"``).
    """
    checkpoints = {f"state_{s}": checkpoint_root / s for s in stores}
    recorder = BatchRecorder(events, checkpoints)
    spark.streams.addListener(recorder)
    try:
        fills = [
            start_count_query(spark, s, checkpoints[f"state_{s}"], keys, keys, conf, once=True)
            for s in stores
            if not (checkpoints[f"state_{s}"] / "commits" / "0").exists()
        ]
        for fill in fills:  # side by side: one batch each
            if not fill.awaitTermination(int(timeout_s)):  # raises if the query failed
                raise TimeoutError(f"fill batch of {fill.name} not done in {timeout_s}s")
        trigger = {"processingTime": interval} if interval else {}
        queries = [
            start_count_query(
                spark, s, checkpoints[f"state_{s}"], keys, rows_per_batch, conf, **trigger
            )
            for s in stores
        ]
        deadline = time.monotonic() + timeout_s
        with recorder.changed:
            while not recorder.all_committed(until_batch):
                failed = [q for q in queries if not q.isActive]
                if failed:
                    failed[0].awaitTermination()  # raises the query's error
                    raise RuntimeError(f"query {failed[0].name} stopped before {until_batch}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"batch {until_batch} not committed in {timeout_s}s")
                recorder.changed.wait(1.0)
        for q in queries:
            q.stop()
    finally:
        spark.streams.removeListener(recorder)


def main(argv: list[str] | None = None) -> int:
    """The job: run the count query per store until a batch, recording every batch."""
    parser = argparse.ArgumentParser(description="Count per key with a chosen state store.")
    parser.add_argument("--store", action="append", required=True, help="repeatable")
    parser.add_argument("--checkpoint-root", type=Path, required=True)
    parser.add_argument("--keys", type=int, required=True)
    parser.add_argument("--rows-per-batch", type=int, required=True)
    parser.add_argument("--until-batch", type=int, required=True)
    parser.add_argument("--events", type=Path, default=None, help="JSON lines, one per batch")
    parser.add_argument("--profile", default="local")
    parser.add_argument("--report", type=Path, default=None, help="state report JSON at the end")
    parser.add_argument("--driver-memory", default=None)
    parser.add_argument("--interval", default=None, help='one batch per interval, e.g. "1 second"')
    parser.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="over the store profile"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")

    from spark_ext.session import build_session

    memory = {"driver_memory": args.driver_memory} if args.driver_memory else {}
    spark = build_session(args.profile, spark=memory)
    conf = dict(item.split("=", 1) for item in args.conf)
    run_queries(
        spark, args.store, args.checkpoint_root, args.keys, args.rows_per_batch, args.until_batch,
        events=args.events, conf=conf, interval=args.interval,
    )  # fmt: skip
    if args.report:
        from spark_ext.state_inspect import StateInspector

        reports = {
            store: StateInspector(spark, args.checkpoint_root / store).report().to_dict()
            for store in args.store
        }
        args.report.write_text(json.dumps(reports, indent=1))
    return 0


# -- the benchmark ----------------------------------------------------------------------------


@dataclass(frozen=True)
class SweepResult:
    """What one (store, live keys) run measured."""

    store: str
    keys: int
    rows_per_batch: int
    batch_ms: list[int]
    bytes_per_batch: list[int]
    checkpoint_bytes: int
    state_bytes: int
    first_commit_s: float
    first_batch_ms: int
    catch_up_s: float


def read_events(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:  # the last line of a job killed mid-write
            continue
    return records


def measure(ctx: Any, store: str, keys: int, driver_memory: str) -> SweepResult:
    """Steady batches, then SIGKILL, then restart with a backlog, for one store and size."""
    from spark_ext.jobrun import run_job

    root = ctx.folder(f"state-{store}-{keys}")
    rows = max(MIN_ROWS_PER_BATCH, int(keys * ROWS_PER_BATCH_FRACTION))
    crash_batch = STEADY_BATCHES  # batch 0 fills, batches 1..STEADY_BATCHES are measured
    common = [
        "--store", store,
        "--checkpoint-root", str(root),
        "--keys", str(keys),
        "--rows-per-batch", str(rows),
        "--driver-memory", driver_memory,
        "--conf", f"spark.sql.streaming.stateStore.maintenanceInterval={MAINTENANCE_INTERVAL}",
    ]  # fmt: skip
    steady_events = root / "steady.jsonl"
    run = run_job(
        JOB_MODULE,
        [*common, "--until-batch", str(crash_batch + 1000), "--events", str(steady_events)],
        fault=f"{CRASH_POINT}@{crash_batch}",
        timeout_s=3600,
    )
    if not run.killed:
        raise RuntimeError(f"{store} {keys}: the job was not killed:\n{run.output_tail}")
    steady = [e for e in read_events(steady_events) if 1 <= e["batch"] <= crash_batch]

    checkpoint = root / store
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    checkpoint_bytes = sum(checkpoint_files(checkpoint).values())

    restart_events = root / "restart.jsonl"
    until = last + BACKLOG_BATCHES
    report_file = root / "state_report.json"
    started = time.time()
    run = run_job(
        JOB_MODULE,
        [*common, "--until-batch", str(until), "--events", str(restart_events),
         "--report", str(report_file)],
        timeout_s=3600,
    )  # fmt: skip
    if not run.ok:
        raise RuntimeError(f"{store} {keys}: restart failed:\n{run.output_tail}")
    # The job inspected its state after the catch-up (in its own JVM: an HDFS-store state
    # of millions of keys does not fit the benchmark driver's heap).
    report = json.loads(report_file.read_text())[store]
    if report["rows"] != keys:
        raise RuntimeError(f"{store}: state holds {report['rows']} rows, expected {keys}")
    after = read_events(restart_events)
    first = min(after, key=lambda e: e["t"])
    done = next(e for e in after if e["batch"] == until)
    return SweepResult(
        store=store,
        keys=keys,
        rows_per_batch=rows,
        batch_ms=[e["duration_ms"] for e in steady],
        bytes_per_batch=[e["bytes_written"] for e in steady],
        checkpoint_bytes=checkpoint_bytes,
        state_bytes=report["bytes_on_disk"],
        first_commit_s=first["t"] - started,
        first_batch_ms=first["duration_ms"],
        catch_up_s=done["t"] - started,
    )


def figures_of(results: Sequence[SweepResult]) -> list[Figure]:
    """Figures per store and size; ratios are against the HDFS-backed store of the same size."""
    return [
        Figure("state_store", r.store, f"{metric} @{_short(r.keys)}", value, unit,
               r.store == "hdfs", f"{r.rows_per_batch:,} rows/batch")
        for r in results
        for metric, value, unit in (
            ("batch_ms_p50", statistics.median(r.batch_ms), "ms"),
            ("batch_ms_p95", percentile(r.batch_ms, 0.95), "ms"),
            ("ckpt_bytes/batch", statistics.mean(r.bytes_per_batch), "B"),
            ("ckpt_folder", r.checkpoint_bytes, "B"),
            ("recover_first_s", r.first_commit_s, "s"),
            ("first_batch_ms", r.first_batch_ms, "ms"),
            ("recover_catchup_s", r.catch_up_s, "s"),
        )
    ]  # fmt: skip


def _short(keys: int) -> str:
    for unit, div in (("M", 1_000_000), ("k", 1_000)):
        if keys >= div and keys % div == 0:
            return f"{keys // div}{unit}"
    return str(keys)


def plot(results: Sequence[SweepResult], path: Path) -> Path:
    """Batch duration, checkpoint bytes per batch and recovery time against live keys, as the
    PNG ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_d, ax_b, ax_r) = plt.subplots(1, 3, figsize=(16, 4.4))
    for i, store in enumerate(dict.fromkeys(r.store for r in results)):
        mine = sorted((r for r in results if r.store == store), key=lambda r: r.keys)
        xs = [r.keys for r in mine]
        for ax, ys, style, label in (
            (ax_d, [statistics.median(r.batch_ms) for r in mine], "o-", "p50"),
            (ax_d, [percentile(r.batch_ms, 0.95) for r in mine], "--", "p95"),
            (ax_b, [statistics.mean(r.bytes_per_batch) for r in mine], "o-", ""),
            (ax_r, [r.catch_up_s for r in mine], "o-", "catch-up"),
            (ax_r, [r.first_commit_s for r in mine], "--", "first commit"),
        ):
            ax.plot(xs, ys, style, color=f"C{i}", label=f"{store} {label}".strip())
    ax_d.set(yscale="log", ylabel="batch duration (ms)", title="steady-state batch duration")
    ax_b.set(yscale="log", ylabel="bytes per batch (mean)",
             title="bytes written to the checkpoint per batch")  # fmt: skip
    ax_r.set(ylabel="seconds after restart",
             title=f"recovery after SIGKILL ({BACKLOG_BATCHES}-batch backlog)")  # fmt: skip
    for ax in (ax_d, ax_b, ax_r):
        ax.set(xscale="log", xlabel="live keys")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def run(ctx: Any) -> list[Any]:
    from spark_ext.config import STATE_STORES

    env_keys = os.environ.get("SPARK_EXT_STATE_KEYS")
    sizes = [int(k) for k in env_keys.split(",")] if env_keys else [ctx.n(k) for k in KEYS]
    stores = os.environ.get("SPARK_EXT_STATE_STORES", ",".join(STATE_STORES)).split(",")
    memory = os.environ.get("SPARK_EXT_STATE_DRIVER_MEMORY", "4g")
    results: list[SweepResult] = []
    for keys in sizes:
        for store in stores:
            began = time.perf_counter()
            results.append(measure(ctx, store, keys, memory))
            print(f"  {store:18} {keys:>10,} keys: done in {time.perf_counter() - began:.0f}s",
                  flush=True)  # fmt: skip
    out = Path(os.environ.get("SPARK_EXT_BENCH_OUT", ROOT / "var" / "bench"))
    png = plot(results, out / "state_store.png")
    (out / "state_store.json").write_text(json.dumps([r.__dict__ for r in results], indent=1))
    print(f"  plot: {png}\n  raw:  {out / 'state_store.json'}", flush=True)
    return figures_of(results)


if __name__ == "__main__":
    sys.exit(main())
