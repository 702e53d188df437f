# Databricks notebook source
# MAGIC %md
# MAGIC # The recovery harness: what does a crash do to a job's output?
# MAGIC
# MAGIC For each job the harness runs it **clean** (output `O_e`), then runs it again and kills
# MAGIC the whole driver with SIGKILL at a named crash point (partial output `O_f`), restarts
# MAGIC it from its checkpoint (adding `O'`), and compares `O_f + O'` with `O_e`:
# MAGIC
# MAGIC | class | meaning |
# MAGIC |---|---|
# MAGIC | precise | equal |
# MAGIC | gap | rows missing, none extra |
# MAGIC | rollback-repeating | only duplicates of correct rows |
# MAGIC | rollback-convergent | re-emitted rows differ, the final state is equal |
# MAGIC | rollback-divergent | the final output differs |
# MAGIC
# MAGIC The jobs run as separate processes (`python -m jobs.X`), as on a cluster's driver; on
# MAGIC Databricks use the `spark-ext check` command from a job cluster's web terminal instead.

# COMMAND ----------

# MAGIC %pip install --no-deps -r ./requirements.txt

# COMMAND ----------

# MAGIC %run ./_setup

# COMMAND ----------

# ruff: noqa: E402, F821  (names from ./_setup; imports sit in the cells that use them)
import os

PROFILE = os.environ.get("NB_PROFILE", "local")  # the jobs' profile (their own processes)
JOBS = os.environ.get("NB_JOBS", "exactly_once_delta").split(",")

# COMMAND ----------

# MAGIC %md
# MAGIC ## The registered jobs and the class each output should get

# COMMAND ----------

from spark_ext.jobs import registry

for case in registry.JOBS.values():
    classes = ", ".join(f"{o.name}: {o.expected}" for o in case.outputs)
    print(f"{case.name:32} crash {case.crash.describe():38} {classes}")

# COMMAND ----------

# MAGIC %md
# MAGIC ## Check some of them (each check starts the job three times)

# COMMAND ----------

from spark_ext.recovery import RecoveryHarness, format_table, write_report

harness = RecoveryHarness(ROOT / "runs", BOOTSTRAP, profile=PROFILE)
results = [r for name in JOBS for r in harness.check(registry.get(name))]
print(format_table(results))

# COMMAND ----------

# MAGIC %md
# MAGIC ## The report: the table, one plot per output, and the differing rows

# COMMAND ----------

index = write_report(results, ROOT / "report")
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
