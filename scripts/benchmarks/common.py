"""What every benchmark shares: the session, the broker, a scratch folder, timing, the figure table."""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Figure:
    """One measured figure. Figures of one ``bench`` and ``metric`` are compared with the
    ``baseline`` among them (ratio = value / baseline value)."""

    bench: str
    variant: str
    metric: str
    value: float
    unit: str = ""
    baseline: bool = False
    note: str = ""


@dataclass(frozen=True)
class Summary(Figure):
    """A figure over repeated runs: ``value`` is the median of ``runs``, ``low``-``high`` their range."""

    low: float = 0.0
    high: float = 0.0
    runs: int = 1


@dataclass
class BenchContext:
    """What a benchmark runs with: the input scale, a scratch folder, the session and broker."""

    scale: float = 1.0
    storage: str = "local"  # where tables go: "local", or "s3" (the s3 profile's store)
    s3_proxy: str = ""  # the S3 sinks' request-counting proxy, once started (and they warmed up)
    scratch: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="spark_ext_bench_")))

    def n(self, rows: int) -> int:
        """``rows`` times the scale, at least 1000."""
        return max(1000, int(rows * self.scale))

    @cached_property
    def spark(self) -> Any:
        from spark_ext.session import build_session

        return build_session("local")

    @cached_property
    def bootstrap(self) -> str:
        from connectors.kafka.local_broker import LocalKafkaBroker

        return LocalKafkaBroker().ensure_running()

    def folder(self, name: str) -> Path:
        path = self.scratch / name
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
        return path


def folder_bytes(path: Path) -> int:
    """Bytes of every file under ``path`` (0 if there is none)."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def start_query(
    df: Any,
    folder: Path,
    sink: str | Callable[[Any, int], None] = "delta",
    *,
    table: str | None = None,
    live: bool = False,
    **options: str,
) -> Any:
    """Start ``df`` (checkpoint ``folder/chk``; trigger ``availableNow``, or ``processingTime=0``
    if ``live``) into the format ``sink`` with ``options`` (Delta writes ``table`` or
    ``folder/table``; ``memory`` a table named as the query) or through ``foreachBatch(sink)``."""
    writer = df.writeStream.options(checkpointLocation=str(folder / "chk"), **options)
    writer = (
        writer.trigger(processingTime="0 seconds") if live else writer.trigger(availableNow=True)
    )
    if callable(sink):
        return writer.foreachBatch(sink).start()
    if sink == "memory":
        writer = writer.queryName(f"bench_{uuid.uuid4().hex[:8]}")
    return writer.format(sink).start(table or str(folder / "table") if sink == "delta" else None)


def timed(start: Callable[[], Any]) -> float:
    """Seconds from ``start()`` (it starts a query that ends by itself) to the query's end."""
    began = time.perf_counter()
    start().awaitTermination()  # raises the query's error
    return time.perf_counter() - began


def drained(query: Any) -> float:
    """Seconds until ``query`` (a live one) has processed all its input; then it is stopped."""
    began = time.perf_counter()
    query.processAllAvailable()
    seconds = time.perf_counter() - began
    query.stop()
    return seconds


def batch_ms(query: Any, phase: str = "triggerExecution") -> list[float]:
    """``durationMs[phase]`` of each recent batch of ``query`` that read rows."""
    return [p["durationMs"][phase] for p in query.recentProgress if p["numInputRows"]]


def percentile(values: Iterable[float], q: float) -> float:
    """The ``q`` quantile (0..1) by linear interpolation."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    pos = (len(ordered) - 1) * q
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def summarize(runs: Sequence[Sequence[Figure]]) -> list[Summary]:
    """Median, min and max per (bench, variant, metric, note) over ``runs`` (each a full run of
    every variant, so the variants are interleaved), in the order of the first run."""
    values: dict[tuple[str, str, str, str], list[float]] = {}
    first: dict[tuple[str, str, str, str], Figure] = {}
    for f in (f for run in runs for f in run):
        key = (f.bench, f.variant, f.metric, f.note)
        values.setdefault(key, []).append(f.value)
        first.setdefault(key, f)
    return [
        Summary(**{**vars(f), "value": statistics.median(v)}, low=min(v), high=max(v), runs=len(v))
        for key, f in first.items()
        for v in [values[key]]
    ]


def format_table(figures: Sequence[Figure]) -> str:
    """A fixed-width table; ``ratio`` is the value over the baseline's of the same bench and
    metric. Summaries show their median with min-max and their number of runs."""
    base = {(f.bench, f.metric): f.value for f in figures if f.baseline}
    many = any(isinstance(f, Summary) for f in figures)

    def line(f: Figure | None) -> str:
        if f is None:
            cells = ["bench", "variant", "metric", "median" if many else "value", "min-max"]
            cells += ["unit", "runs", "ratio", "note"]
        else:
            b = base.get((f.bench, f.metric))
            s = f if isinstance(f, Summary) else Summary(**vars(f), low=f.value, high=f.value)
            cells = [f.bench, f.variant, f.metric, f"{f.value:,.1f}", f"{s.low:,.1f}-{s.high:,.1f}"]
            cells += [f.unit, str(s.runs), f"{f.value / b:.2f}" if b else "", f.note]
        spread, runs = (f" {cells[4]:>25}", f" {cells[6]:>4}") if many else ("", "")
        return (
            f"{cells[0]:18} {cells[1]:34} {cells[2]:22} {cells[3]:>14}{spread} {cells[5]:8}{runs}"
            f" {cells[7]:>7}  {cells[8]}"
        )

    header = line(None)
    return "\n".join([header, "-" * len(header), *map(line, figures)])


class LoadMonitor:
    """Samples the 1-minute load average while benchmarks run: "idle" means the load before the
    run stays below ``idle_share`` of the CPU count. Quote figures from an idle machine only."""

    def __init__(self, interval_s: float = 2.0, idle_share: float = 0.25) -> None:
        self.cpus = os.cpu_count() or 1
        self.before = os.getloadavg()[0]
        self.idle = self.before < idle_share * self.cpus
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, args=(interval_s,), daemon=True)

    def _sample(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            self.samples.append(os.getloadavg()[0])

    def __enter__(self) -> LoadMonitor:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def verdict(self) -> str:
        """Idle or not, with the load before the run and (once sampled) during it."""
        state = "idle" if self.idle else "NOT idle (figures are indicative only)"
        during = (
            f", {statistics.mean(self.samples):.2f} on average during it" if self.samples else ""
        )
        return f"machine {state}: 1-min load {self.before:.2f} before the run{during}, {self.cpus} CPUs"
