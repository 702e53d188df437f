# Databricks notebook source
# MAGIC %md
# MAGIC # Shared set-up of the spark_ext notebooks (`%run ./_setup`)
# MAGIC
# MAGIC Defines `spark`, `PROFILE`, `BOOTSTRAP`, `ROOT` (a fresh folder per run), `show`,
# MAGIC `new_topic(prefix, partitions)` and `cleanup()` from the widgets `bootstrap` and `root` on a
# MAGIC workspace, from `NB_PROFILE`, `NB_BOOTSTRAP` and `NB_ROOT` locally (README, "Notebooks").

# COMMAND ----------

from spark_ext.jobs.notebooks import setup

globals().update(setup(globals()))
print(f"brokers {BOOTSTRAP}, run folder {ROOT}")
