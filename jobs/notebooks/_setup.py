# Databricks notebook source
# MAGIC %md
# MAGIC # Shared set-up of the spark_ext notebooks
# MAGIC
# MAGIC Every notebook runs this one first with `%run ./_setup`. On a workspace it reads the
# MAGIC widgets `bootstrap` (required: the Kafka brokers) and `root` (a Unity Catalog volume;
# MAGIC README, "Notebooks"); locally `NB_PROFILE`, `NB_BOOTSTRAP` and `NB_ROOT`.
# MAGIC
# MAGIC It defines `spark`, `BOOTSTRAP`, `ROOT` (a fresh folder per run), `show`,
# MAGIC `new_topic(prefix, partitions)` and `cleanup()`, which deletes the topics the run created.

# COMMAND ----------

from spark_ext.jobs.notebooks import setup

globals().update(setup(globals()))
print(f"brokers {BOOTSTRAP}, run folder {ROOT}")  # noqa: F821  (defined by setup)
