#!/usr/bin/env python3
"""Fetch the project's JVM jars from Maven Central into the shared cache, once.

One set per pom in scripts/jvm (Delta and Spark's Kafka connector, the Kafka broker, hadoop-aws,
S3Proxy); artifacts pyspark already ships are dropped from the Spark sets, so Spark never sees two
versions of one library. A set whose folder has the .complete marker is not fetched again.
Usage: python scripts/fetch_jars.py [--force]
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


def fetch(pom_name: str, target: Path, drop: set[str], force: bool) -> None:
    """The runtime dependencies of ``scripts/jvm/<pom_name>`` but ``drop`` into ``target``."""
    if (target / jvm.COMPLETE_MARKER).exists() and not force:
        print(f"fetch_jars: {target} is complete, nothing to do")
        return
    mvn = shutil.which("mvn")
    if mvn is None:
        sys.exit("mvn not found: install Maven (apt-get install -y maven) and run again")
    with tempfile.TemporaryDirectory() as tmp:
        staging = Path(tmp) / "jars"
        cmd = [mvn, "-q", "-B", "-f", str(ROOT / "scripts" / "jvm" / pom_name)]
        cmd += ["dependency:copy-dependencies", f"-DoutputDirectory={staging}"]
        cmd += ["-DincludeScope=runtime"]
        print("fetch_jars:", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
        shutil.rmtree(target, ignore_errors=True)
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
