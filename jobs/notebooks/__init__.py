"""Databricks-style notebooks of the guarantees, their shared set-up (:func:`setup`) and a local
runner (:func:`run_notebook`); README, "Notebooks"."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import logging
import os
import re
import sys
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import spark_ext
from spark_ext import kafka_clients
from spark_ext.errors import ConfigError

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


#: The checkout's top-level packages that the wheel installs under ``spark_ext`` (setup.py).
_BUNDLED = ("connectors", "jobs")


class _CheckoutNames(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """In a checkout, ``spark_ext.<package>.x`` is the checkout's ``<package>.x``: the same
    module object, so a notebook's imports mean what they mean where the wheel is installed."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        top = fullname.split(".")
        if top[0] == "spark_ext" and len(top) > 1 and top[1] in _BUNDLED:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec: Any) -> None:
        return None  # a placeholder, replaced in sys.modules by exec_module

    def exec_module(self, module: ModuleType) -> None:
        checkout = module.__name__.removeprefix("spark_ext.")
        sys.modules[module.__name__] = importlib.import_module(checkout)


def _import_installed_names() -> None:
    """Make the wheel's names importable in a checkout (a no-op where the wheel is installed)."""
    installed = Path(spark_ext.__file__).parent / _BUNDLED[0]
    if not installed.is_dir() and not any(isinstance(f, _CheckoutNames) for f in sys.meta_path):
        sys.meta_path.insert(0, _CheckoutNames())


def run_notebook(path: str | Path, namespace: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run a notebook cell by cell in ``namespace`` (a new one by default) and return it:
    ``%run <relative path>`` in the same namespace (as Databricks does), other ``%`` cells
    skipped, the wheel's names importing the checkout's modules."""
    _import_installed_names()
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


#: The ``root`` widget's default: a placeholder to replace (the workspace's volumes differ).
ROOT_PLACEHOLDER = "/Volumes/<catalog>/<schema>/<volume>/spark_ext"


def check_root(root: str) -> Path:
    """The run root given in the ``root`` widget: a Unity Catalog volume path, the one path
    Spark on every executor and Python on the driver (delta-rs) read alike."""
    if root == ROOT_PLACEHOLDER or not root.startswith("/Volumes/"):
        raise NotebookSetupError(
            "root",
            f"{root!r}: set the widget to a folder of a Unity Catalog volume, {ROOT_PLACEHOLDER} "
            "(not dbfs: Spark reads 'dbfs:/', Python '/dbfs/'; not the driver's own disk)",
        )
    return Path(root)


def setup(namespace: dict[str, Any]) -> dict[str, Any]:
    """The names every notebook uses (README, "Notebooks"): on Databricks (``dbutils`` in
    ``namespace``) from the widgets ``bootstrap`` and ``root``, both required (no default names a
    broker or a volume); locally from ``NB_PROFILE``, ``NB_BOOTSTRAP``, ``NB_ROOT``."""
    profile = os.environ.get("NB_PROFILE", "local")
    dbutils = namespace.get("dbutils")
    if dbutils is not None:
        dbutils.widgets.text("bootstrap", "", "Kafka bootstrap servers (host:port,...)")
        dbutils.widgets.text("root", ROOT_PLACEHOLDER, "Unity Catalog volume folder")
        bootstrap = dbutils.widgets.get("bootstrap").strip()
        hosts = [server.rsplit(":", 1)[0].strip("[]") for server in bootstrap.split(",")]
        if not bootstrap or any(h in ("localhost", "::1") or h.startswith("127.") for h in hosts):
            raise NotebookSetupError(
                "bootstrap",
                f"{bootstrap!r}: set the widget to your Kafka brokers (host:port,...); "
                "no broker runs on the driver's loopback",
            )
        spark = namespace["spark"]
        root = check_root(dbutils.widgets.get("root").strip()) / f"run-{uuid.uuid4().hex[:8]}"
        show: Callable[[Any], None] = namespace["display"]
    else:
        from spark_ext.session import build_session

        spark = build_session(profile)
        bootstrap = os.environ.get("NB_BOOTSTRAP", "127.0.0.1:9092")
        root = Path(os.environ.get("NB_ROOT") or tempfile.mkdtemp(prefix="nb_"))

        def show(df: Any) -> None:
            df.show(10, truncate=False)

    created: list[str] = []

    def new_topic(prefix: str, partitions: int = 3) -> str:
        """A fresh topic ``<prefix>-<random>``, deleted again by ``cleanup()``."""
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        kafka_clients.create_topic(bootstrap, name, partitions)
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
        "PROFILE": profile,
        "BOOTSTRAP": bootstrap,
        "ROOT": root,
        "show": show,
        "new_topic": new_topic,
        "cleanup": cleanup,
    }
