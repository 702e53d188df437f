# Databricks notebook source
# MAGIC %md
# MAGIC # Shared set-up of the spark_ext notebooks
# MAGIC
# MAGIC Every notebook runs this one first with `%run ./_setup`. On a workspace it reads two
# MAGIC widgets: `bootstrap` (required: the Kafka brokers, `host:port,...`) and `root` (a Unity
# MAGIC Catalog volume, `/Volumes/<catalog>/<schema>/<volume>/...`, the one path both Spark and
# MAGIC delta-rs read; `dbfs:/` and `/dbfs/` paths are refused with the reason). Locally it
# MAGIC builds the session from `NB_PROFILE` and reads `NB_BOOTSTRAP` and `NB_ROOT`.
# MAGIC
# MAGIC It defines `spark`, `BOOTSTRAP`, `ROOT` (a fresh folder per run), `show`,
# MAGIC `new_topic(prefix, partitions)` and `cleanup()`, which deletes the topics the run created.

# COMMAND ----------

from jobs.notebooks import setup

globals().update(setup(globals()))
print(f"brokers {BOOTSTRAP}, run folder {ROOT}")  # noqa: F821  (defined by setup)
