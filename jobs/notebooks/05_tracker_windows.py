# Databricks notebook source
# MAGIC %md
# MAGIC # Windows released by the tracker, not by a watermark
# MAGIC
# MAGIC `jobs/tracker_windows.py`: a window is emitted once, complete, when its source partitions
# MAGIC have closed it and every element of it was processed (docs/design.md, "Tracker" and
# MAGIC "Tracked queries").

# COMMAND ----------

# MAGIC %pip install --no-deps -r ./requirements.txt

# COMMAND ----------

# MAGIC %run ./_setup

# COMMAND ----------

from spark_ext.connectors.kafka import produce
from spark_ext.jobs.tracker_windows import demo_records, run_until_complete, start_windows

TOPIC = new_topic("nb-trk", partitions=3)
produce(BOOTSTRAP, TOPIC, demo_records(90, 3))
query, agent = start_windows(spark, BOOTSTRAP, TOPIC, 3, ROOT / "tracker", 60)
run_until_complete(query, agent)
windows = spark.read.format("delta").load(str(ROOT / "tracker" / "windows"))
show(windows.orderBy("window_start_ms", "key"))

# Every window is complete: counts add up to the events produced, no substream is left open.
total = windows.groupBy().sum("count").first()[0]
print(f"{windows.count()} windows holding {total} events; open substreams:", end=" ")
print(agent.state().open_substreams())
assert total == 90 and agent.state().open_substreams() == []

# COMMAND ----------

# MAGIC %md
# MAGIC ## Two queries through Kafka: the downstream closes by the upstream's tracker
# MAGIC
# MAGIC `jobs/tracker_two_queries.py`: `up` forwards its per-(window, user) rows through a topic to
# MAGIC `down`, which sums them per window with no watermark; one Kafka tracking agent serves both.

# COMMAND ----------

from spark_ext.jobs.tracker_two_queries import DOWN, start_two_queries
from spark_ext.jobs.tracker_two_queries import run_until_complete as run_both

TOPIC2 = new_topic("nb-trk2", partitions=3)
produce(BOOTSTRAP, TOPIC2, demo_records(45, 3))
MID = new_topic("nb-trk2-mid", partitions=3)
up, down, agent2 = start_two_queries(spark, BOOTSTRAP, TOPIC2, 3, MID, ROOT / "two", MID, 60)
run_both(up, down, agent2)
totals = spark.read.format("delta").load(str(ROOT / "two" / "totals"))
show(totals.orderBy("window_start_ms"))

# Every downstream window holds all its events, and each ended exactly once.
down_ends = [e.substream for e in agent2.end_events(0, 10**9) if e.namespace == DOWN]
print(f"{totals.count()} windows, {totals.groupBy().sum('events').first()[0]:.0f} events")
assert totals.groupBy().sum("events").first()[0] == 45
assert len(down_ends) == len(set(down_ends)) == totals.count()
agent2.close()

# COMMAND ----------

print("topics deleted:", cleanup())
