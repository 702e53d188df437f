"""A stand-in job for ``test_jobrun_kills_the_session.py``: it starts a child in a process group
of its own, as PySpark's worker daemon does, writes the child's PID to ``argv[1]`` and waits."""

from __future__ import annotations

import subprocess
import sys
import time

if __name__ == "__main__":
    child = subprocess.Popen(
        [sys.executable, "-c", "import os, time; os.setpgid(0, 0); time.sleep(600)"]
    )
    with open(sys.argv[1], "w") as f:
        f.write(str(child.pid))
    time.sleep(600)
