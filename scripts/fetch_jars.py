#!/usr/bin/env python3
"""Fetch the project's JVM jars from Maven Central into the shared cache, once.

Two sets, each from a pom in scripts/jvm:
- spark-jars: Delta Lake for Spark 4.2 and Spark's Kafka connector. Artifacts that pyspark
  already ships in pyspark/jars are dropped, so Spark never sees two versions of one library.
- kafka-broker: the Apache Kafka broker (KRaft) and its runtime classpath.
- hadoop-aws (Spark on s3a://, pyspark's artifacts dropped) and s3proxy (the local S3 store).

Maven's own local repository (~/.m2) caches the downloads; a set whose folder carries the
.complete marker is not fetched again. Usage: python scripts/fetch_jars.py [--force]
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from connectors.s3 import local_store  # noqa: E402
from spark_ext import jvm, storage  # noqa: E402

JAR_VERSION = re.compile(r"^(?P<artifact>.+?)-\d[\w.\-]*\.jar$")


def artifact_name(jar: Path) -> str:
    match = JAR_VERSION.match(jar.name)
    return match.group("artifact") if match else jar.stem


def mvn_copy_dependencies(pom: Path, out: Path) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        sys.exit("mvn not found: install Maven (apt-get install -y maven) and run again")
    cmd = [mvn, "-q", "-B", "-f", str(pom), "dependency:copy-dependencies"]
    cmd += [f"-DoutputDirectory={out}", "-DincludeScope=runtime"]
    print("fetch_jars:", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def fetch(pom_name: str, target: Path, drop: set[str], force: bool) -> None:
    if (target / jvm.COMPLETE_MARKER).exists() and not force:
        print(f"fetch_jars: {target} is complete, nothing to do")
        return
    with tempfile.TemporaryDirectory() as tmp:
        staging = Path(tmp) / "jars"
        mvn_copy_dependencies(ROOT / "scripts" / "jvm" / pom_name, staging)
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        kept = [j for j in sorted(staging.glob("*.jar")) if artifact_name(j) not in drop]
        for jar in kept:
            shutil.copy2(jar, target / jar.name)
    (target / jvm.COMPLETE_MARKER).write_text("ok\n")
    print(f"fetch_jars: {len(kept)} jars in {target}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="fetch again even if complete")
    args = parser.parse_args()
    import pyspark

    pyspark_jars = Path(pyspark.__file__).parent / "jars"
    shipped = {artifact_name(j) for j in pyspark_jars.glob("*.jar")}
    if not shipped:
        sys.exit(f"no jars found in {pyspark_jars}: is pyspark installed in this interpreter?")
    fetch("spark-jars.pom.xml", jvm.spark_jars_dir(), shipped, args.force)
    fetch("kafka-broker.pom.xml", jvm.kafka_broker_libs_dir(), set(), args.force)
    fetch("hadoop-aws.pom.xml", storage.s3_jars_dir(), shipped, args.force)
    fetch("s3proxy.pom.xml", local_store.libs_dir(), set(), args.force)


if __name__ == "__main__":
    main()
