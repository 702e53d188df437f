"""What every benchmark shares: the session, the broker, a scratch folder, the figure table."""

from __future__ import annotations

import shutil
import tempfile
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
            from connectors.local_kafka import LocalKafkaBroker

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
