"""What every benchmark shares: the session, the broker, a scratch folder, the figure table."""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


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


@dataclass
class BenchContext:
    scale: float
    scratch: Path
    _spark: Any = field(default=None, repr=False)
    _bootstrap: str | None = None

    @classmethod
    def create(cls, scale: float = 1.0) -> BenchContext:
        scratch = Path(tempfile.mkdtemp(prefix="spark_ext_bench_"))
        return cls(scale=scale, scratch=scratch)

    def n(self, rows: int) -> int:
        """``rows`` times the scale, at least 1000."""
        return max(1000, int(rows * self.scale))

    @property
    def spark(self) -> Any:
        if self._spark is None:
            from spark_ext.session import build_session

            self._spark = build_session("local")
        return self._spark

    @property
    def bootstrap(self) -> str:
        if self._bootstrap is None:
            from connectors.kafka.local_broker import LocalKafkaBroker

            self._bootstrap = LocalKafkaBroker().ensure_running()
        return self._bootstrap

    def folder(self, name: str) -> Path:
        path = self.scratch / name
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
        return path


def format_table(figures: list[Figure]) -> str:
    """A fixed-width table; ``ratio`` is against the baseline of the same bench and metric."""
    base = {(f.bench, f.metric): f.value for f in figures if f.baseline}
    header = (
        f"{'bench':18} {'variant':34} {'metric':22} {'value':>14} {'unit':8} {'ratio':>7}  note"
    )
    lines = [header, "-" * len(header)]
    for f in figures:
        b = base.get((f.bench, f.metric))
        ratio = f"{f.value / b:.2f}" if b else ""
        lines.append(
            f"{f.bench:18} {f.variant:34} {f.metric:22} {f.value:14,.1f} {f.unit:8} {ratio:>7}  {f.note}"
        )
    return "\n".join(lines)


# -- repeated runs ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Summary:
    """One variant's figure over repeated runs: the median, with the range it came from."""

    bench: str
    variant: str
    metric: str
    median: float
    low: float
    high: float
    runs: int
    unit: str = ""
    baseline: bool = False
    note: str = ""


def summarize(runs: Sequence[Sequence[Figure]]) -> list[Summary]:
    """Median, min and max per (bench, variant, metric, note) over ``runs`` (each a full run of
    every variant, so the variants are interleaved), in the order of the first run."""
    values: dict[tuple[str, str, str, str], list[float]] = {}
    first: dict[tuple[str, str, str, str], Figure] = {}
    for run in runs:
        for f in run:
            key = (f.bench, f.variant, f.metric, f.note)
            values.setdefault(key, []).append(f.value)
            first.setdefault(key, f)
    return [
        Summary(
            f.bench,
            f.variant,
            f.metric,
            statistics.median(values[key]),
            min(values[key]),
            max(values[key]),
            len(values[key]),
            f.unit,
            f.baseline,
            f.note,
        )
        for key, f in first.items()
    ]


def format_summary(summaries: Sequence[Summary]) -> str:
    """A fixed-width table of medians with min-max; ``ratio`` is median over baseline median."""
    base = {(s.bench, s.metric): s.median for s in summaries if s.baseline}
    header = (
        f"{'bench':18} {'variant':34} {'metric':22} {'median':>14} {'min-max':>25} "
        f"{'unit':8} {'runs':>4} {'ratio':>7}  note"
    )
    lines = [header, "-" * len(header)]
    for s in summaries:
        b = base.get((s.bench, s.metric))
        ratio = f"{s.median / b:.2f}" if b else ""
        spread = f"{s.low:,.1f}-{s.high:,.1f}"
        lines.append(
            f"{s.bench:18} {s.variant:34} {s.metric:22} {s.median:14,.1f} {spread:>25} "
            f"{s.unit:8} {s.runs:>4} {ratio:>7}  {s.note}"
        )
    return "\n".join(lines)


class LoadMonitor:
    """Samples the 1-minute load average while benchmarks run: "idle" means the load before the
    run stays below ``idle_share`` of the CPU count. Quote figures from an idle machine only.
    """

    def __init__(self, interval_s: float = 2.0, idle_share: float = 0.25) -> None:
        self.cpus = os.cpu_count() or 1
        self.idle_share = idle_share
        self.before = os.getloadavg()[0]
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

    @property
    def idle(self) -> bool:
        return self.before < self.idle_share * self.cpus

    def verdict(self) -> str:
        """Idle or not, with the load before the run and (once sampled) during it."""
        state = "idle" if self.idle else "NOT idle (figures are indicative only)"
        during = (
            f", {statistics.mean(self.samples):.2f} on average during it" if self.samples else ""
        )
        return f"machine {state}: 1-min load {self.before:.2f} before the run{during}, {self.cpus} CPUs"
