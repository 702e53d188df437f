# Databricks notebook source
# MAGIC %md
# MAGIC # The recovery harness: what does a crash do to a job's output?
# MAGIC
# MAGIC A check runs a job clean, then killed by SIGKILL at a named crash point and restarted from
# MAGIC its checkpoint, and classifies the output against the clean run (docs/design.md, "Recovery
# MAGIC classes"). The jobs run as processes of their own, as on a cluster's driver; on Databricks
# MAGIC run `spark-ext check` from a job cluster's web terminal instead.

# COMMAND ----------

# MAGIC %pip install --no-deps -r ./requirements.txt

# COMMAND ----------

# MAGIC %run ./_setup

# COMMAND ----------

import os

from spark_ext.jobs import cli, registry
from spark_ext.recovery import RecoveryHarness, format_table, write_report

cli.main(["list"])  # `spark-ext list`: each job, its crash points, the class each output gets

# COMMAND ----------

# MAGIC %md
# MAGIC ## Check some of them (each check starts the job three times), then the report

# COMMAND ----------

JOBS = os.environ.get("NB_JOBS", "exactly_once_delta").split(",")
harness = RecoveryHarness(ROOT / "runs", BOOTSTRAP, profile=PROFILE)
results = [r for name in JOBS for r in harness.check(registry.get(name))]
print(format_table(results))
index = write_report(results, ROOT / "report")  # the table, a plot per output, differing rows
print("report:", index)
try:
    displayHTML(index.read_text())  # Databricks only
except NameError:
    pass
for r in results:
    for diff in r.comparison.missing[:3]:
        print(f"{r.label}: missing {diff.row}")
assert all(r.as_expected for r in results), format_table(results)

# COMMAND ----------

print("topics deleted:", cleanup())
