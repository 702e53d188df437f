# Databricks notebook source
# MAGIC %md
# MAGIC # Deterministic order and dedup in front of an order-sensitive fold
# MAGIC
# MAGIC `jobs/ordering_dedup.py`: sensor readings over two partitions, some delivered twice, go
# MAGIC through an ordering buffer and a dedup catalog into an EWMA per sensor; the result does not
# MAGIC depend on batch boundaries or arrival order (docs/design.md, "Ordering" and "Dedup").

# COMMAND ----------

# MAGIC %pip install --no-deps -r ./requirements.txt

# COMMAND ----------

# MAGIC %run ./_setup

# COMMAND ----------

from spark_ext.jobs.ordering_dedup import (
    PipelineOptions,
    PipelinePaths,
    produce_readings,
    start_pipeline,
)

TOPIC = new_topic("nb-ord", partitions=2)
produced = produce_readings(BOOTSTRAP, TOPIC, sensors=3, per_sensor=20, duplicate_every=4)


def run(name: str, limit: int | None):
    paths = PipelinePaths(ROOT / name)
    options = PipelineOptions(max_offsets_per_trigger=limit)
    query, sink = start_pipeline(spark, BOOTSTRAP, TOPIC, paths, options)
    query.awaitTermination()
    return spark.read.format("delta").load(str(paths.ewma)), sink.metrics


one_batch, metrics = run("one_batch", None)
show(one_batch.orderBy("key", "seq"))
dropped = metrics.catalog_duplicates + metrics.batch_duplicates
print(f"{produced} records produced, {one_batch.count()} readings out, {dropped} copies dropped")

# COMMAND ----------

# MAGIC %md
# MAGIC ## Another batch plan, the same output

# COMMAND ----------

from chispa import assert_df_equality

many_batches, _ = run("many_batches", 25)
cols = ["key", "record_id", "event_time", "temp_f", "ewma_f", "seq"]
assert one_batch.count() == 3 * 20
assert_df_equality(one_batch.select(*cols), many_batches.select(*cols), ignore_row_order=True)
print("same readings, same EWMA values, whatever the batches")

# COMMAND ----------

print("topics deleted:", cleanup())
