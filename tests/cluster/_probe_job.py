"""Run by tests/cluster/test_isolated_hosts.py on the isolated cluster: the driver writes a file
locally, then tasks look for it and one reads it; prints one JSON line with what each saw."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from spark_ext.session import build_session


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--profile", required=True)
    parser.add_argument("--file", required=True, type=Path)
    args = parser.parse_args(argv)
    path = str(args.file)
    args.file.write_text("written by the driver")
    sc = build_session(args.profile).sparkContext
    seen = (
        sc.parallelize(range(8), 8)
        .map(lambda _: (os.environ.get("SPARK_LOCAL_IP"), os.path.exists(path)))
        .distinct()
        .collect()
    )
    try:
        read = sc.parallelize([0], 1).map(lambda _: Path(path).read_text()).collect()[0]
    except Exception as exc:  # the task's error, as Spark reports it on the driver
        read = f"failed: {'FileNotFoundError' if 'FileNotFoundError' in str(exc) else exc}"
    print(
        "PROBE " + json.dumps({"seen": sorted(seen), "read": read, "driver": args.file.read_text()})
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
