"""Databricks-style notebooks of the guarantees, their shared set-up, and a local runner.

Notebooks are ``.py`` files in Databricks' source format; each opens with its text, ``%pip
install`` (skipped locally) and ``%run ./_setup`` (:func:`setup`). :func:`run_notebook` runs
one here cell by cell (``python -m jobs.notebooks 07_dedup_delta``). Workspace settings:
README, "Notebooks".
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from spark_ext import kafka_clients
from spark_ext.errors import ConfigError

__all__ = ["NotebookSetupError", "cells", "check_root", "run_notebook", "setup"]

log = logging.getLogger(__name__)

HEADER = "# Databricks notebook source"
SEPARATOR = "# COMMAND ----------"
_RUN = re.compile(r"^# MAGIC %run\s+(\S+)\s*$")


class NotebookSetupError(ConfigError):
    """A notebook widget or environment setting is missing or cannot work; names the widget."""


def cells(path: Path) -> list[str]:
    """The cells of a notebook in Databricks' source format, stripped."""
    text = path.read_text()
    head, _, body = text.partition("\n")
    if head != HEADER:
        raise NotebookSetupError("notebook", f"{path} does not start with {HEADER!r}")
    return [c.strip() for c in body.split(SEPARATOR)]


def run_notebook(path: str | Path, namespace: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run a notebook cell by cell in ``namespace`` (a new one by default) and return it.

    ``%run <relative path>`` runs that notebook in the same namespace (as Databricks does);
    ``%md`` and ``%pip`` cells are skipped (the project is installed where this runs).
    """
    path = Path(path)
    if path.suffix != ".py":
        path = path.with_suffix(".py")
    ns = namespace if namespace is not None else {"__name__": "__main__"}
    for number, cell in enumerate(cells(path), start=1):
        first = cell.splitlines()[0] if cell else ""
        run = _RUN.match(first)
        if run:
            run_notebook(path.parent / run.group(1), ns)
        elif first.startswith("# MAGIC"):
            log.debug("%s cell %d: %s skipped locally", path.name, number, first)
        elif cell:
            exec(compile(cell, f"{path}#cell{number}", "exec"), ns)
    return ns


def check_root(root: str) -> Path:
    """The run root given in the ``root`` widget: an absolute path Spark and Python share."""
    if root.startswith(("dbfs:/", "/dbfs/")):
        raise NotebookSetupError(
            "root",
            f"{root!r}: Spark reads 'dbfs:/...' and Python '/dbfs/...', and the jobs hand one "
            "path to both (Spark and delta-rs); use a Unity Catalog volume, "
            "'/Volumes/<catalog>/<schema>/<volume>/spark_ext'",
        )
    if not root.startswith("/"):
        raise NotebookSetupError("root", f"{root!r} must be an absolute path")
    return Path(root)


def setup(namespace: dict[str, Any]) -> dict[str, Any]:
    """The names every notebook uses: ``spark``, ``BOOTSTRAP``, ``ROOT``, ``show``,
    ``new_topic(prefix, partitions)`` and ``cleanup()`` (deletes the topics it created).

    On Databricks (``dbutils`` in ``namespace``) they come from the widgets ``bootstrap``
    (required) and ``root``; locally from ``NB_PROFILE``, ``NB_BOOTSTRAP``, ``NB_ROOT``.
    """
    dbutils = namespace.get("dbutils")
    if dbutils is not None:
        dbutils.widgets.text("bootstrap", "", "Kafka bootstrap servers (host:port,...)")
        dbutils.widgets.text("root", "/Volumes/main/default/spark_ext", "Unity Catalog volume")
        bootstrap = dbutils.widgets.get("bootstrap").strip()
        if not bootstrap:
            raise NotebookSetupError(
                "bootstrap", "set the widget to your Kafka brokers; the driver runs none"
            )
        spark = namespace["spark"]
        root = check_root(dbutils.widgets.get("root").strip()) / f"run-{uuid.uuid4().hex[:8]}"
        show: Callable[[Any], None] = namespace["display"]
    else:
        from spark_ext.session import build_session

        spark = build_session(os.environ.get("NB_PROFILE", "local"))
        bootstrap = os.environ.get("NB_BOOTSTRAP", "127.0.0.1:9092")
        root = Path(os.environ.get("NB_ROOT") or tempfile.mkdtemp(prefix="nb_"))

        def show(df: Any) -> None:
            df.show(10, truncate=False)

    created: list[str] = []

    def new_topic(prefix: str, partitions: int = 3) -> str:
        """A fresh topic ``<prefix>-<random>``, deleted again by ``cleanup()``."""
        from connectors.kafka import create_topic

        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        create_topic(bootstrap, name, partitions)
        created.append(name)
        return name

    def cleanup() -> list[str]:
        """Delete the topics this run created; returns their names."""
        if not created:
            return []
        with kafka_clients.admin(bootstrap) as admin:
            admin.delete_topics(list(created))
        deleted, created[:] = list(created), []
        return deleted

    return {
        "spark": spark,
        "BOOTSTRAP": bootstrap,
        "ROOT": root,
        "show": show,
        "new_topic": new_topic,
        "cleanup": cleanup,
    }
