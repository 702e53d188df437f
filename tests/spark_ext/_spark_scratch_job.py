"""A stand-in job for ``test_jobrun_kills_the_session.py``: it starts a SparkSession, writes
where Spark put its scratch folders to ``argv[1]`` (one per line) and waits to be killed."""

from __future__ import annotations

import os
import sys
import time

if __name__ == "__main__":
    from spark_ext.session import build_session

    spark = build_session("test")
    from pyspark import SparkFiles

    env = spark.sparkContext._jsc.sc().env()
    # blockmgr-* (shuffle and cached blocks) and spark-*/userFiles-* (files the job shipped)
    scratch = [str(d) for d in env.blockManager().diskBlockManager().localDirs()]
    scratch.append(SparkFiles.getRootDirectory())
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write("\n".join(scratch))
    os.replace(sys.argv[1] + ".tmp", sys.argv[1])
    time.sleep(600)
