#!/usr/bin/env python3
"""Make the driver JVM's class-data archive once, verified before it is used (docs/design.md,
"JVM start-up"); failing is not fatal: sessions then start from the jars.

Usage: python scripts/class_archive.py [--force]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from spark_ext import jvm  # noqa: E402

WARM_UP = """
import sys, tempfile
from pyspark.sql import functions as F
from spark_ext.config import load_profile
from spark_ext.session import build_session

options = f"{load_profile('test').spark.java_options} {sys.argv[1]}"
spark = build_session("test", spark={"class_archive": False, "java_options": options})
print(spark.sparkContext._jvm.ProcessHandle.current().pid(), flush=True)
with tempfile.TemporaryDirectory() as tmp:
    df = spark.range(500).select((F.col("id") % 7).alias("k"), F.col("id").alias("v"))
    df.groupBy("k").agg(F.sum("v"), F.max("v")).collect()
    df.write.format("delta").save(f"{tmp}/t")
    spark.read.format("delta").load(f"{tmp}/t").toPandas()
    df.select(F.udf(lambda v: v + 1, "long")("v")).collect()
    query = (
        spark.readStream.format("rate").option("rowsPerSecond", 100).load()
        .groupBy(F.window("timestamp", "1 second")).count()
        .writeStream.outputMode("update")
        .foreachBatch(lambda batch, batch_id: batch.collect())
        .option("checkpointLocation", f"{tmp}/checkpoint")
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    query.awaitTermination(4)
    query.stop()
spark.stop()
"""


def _session(option: str, timeout_s: float) -> int | None:
    """Run the warm-up with the driver JVM option; the JVM's pid, or None if it failed."""
    run = subprocess.run(
        [sys.executable, "-c", WARM_UP, option],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    if run.returncode != 0:
        print(f"class_archive: warm-up with {option} failed:\n{run.stderr[-2000:]}")
        return None
    return int(run.stdout.split()[0])


def _wait_exit(pid: int, timeout_s: float) -> None:
    """Wait for the JVM to finish writing the archive at its exit."""
    deadline = time.monotonic() + timeout_s
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="make it again")
    target = jvm.class_archive()
    if target.is_file() and not parser.parse_args().force:
        print(f"class_archive: {target} is made, nothing to do")
        return 0
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    start = time.monotonic()
    try:
        pid = _session(f"-XX:ArchiveClassesAtExit={tmp}", 600)
        if pid is not None:
            _wait_exit(pid, 120)
        if (
            pid is None
            or not tmp.is_file()
            or _session(f"-XX:SharedArchiveFile={tmp} -Xshare:on", 600) is None
        ):
            print("class_archive: no archive made; Spark sessions start from the jars")
            return 0
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    size = target.stat().st_size >> 20
    print(f"class_archive: {target} ({size} MiB) in {time.monotonic() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
