"""``python -m spark_ext.recovery.in_host HOST MODULE ARGS...``: run ``python -m MODULE ARGS`` on
the isolated host ``HOST``, in this same process (its pid, session and environment), as the
``driver-partition`` cell runs a job's driver (docs/design.md, "Isolated hosts")."""

from __future__ import annotations

import os
import sys

from spark_ext.recovery.network import in_host

__all__ = ["main"]


def main(argv: list[str]) -> None:
    """Exec ``python -m argv[1] argv[2:]`` on host ``argv[0]``; never returns."""
    host, module, *args = argv
    command = in_host(host, [sys.executable, "-m", module, *args])
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
