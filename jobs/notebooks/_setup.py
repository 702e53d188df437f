# Databricks notebook source
# MAGIC %md
# MAGIC # Shared set-up of the spark_ext notebooks (`%run ./_setup`)
# MAGIC
# MAGIC Defines the names every notebook uses, from the widgets `bootstrap` and `root` on a
# MAGIC workspace (README, "Notebooks").

# COMMAND ----------

from spark_ext.jobs.notebooks import setup

globals().update(setup(globals()))
print(f"brokers {BOOTSTRAP}, run folder {ROOT}")
