"""The guarantee jobs: one module per guarantee, each runnable as ``python -m jobs.<name>``,
with ``spark-submit`` (``scripts/submit.sh jobs/<name>.py``) or through ``spark-ext run``.

Installed with the project (``pip install .``), so ``spark-ext list|run|check`` works from any
folder. What every job shares (flags, session, output folder and its tables, the
``foreachBatch`` query, the closing report) is :mod:`jobs.startup`; the recovery harness's
view of each job is :mod:`jobs.registry`; the Databricks-style notebooks and their runner are
:mod:`jobs.notebooks`. Each job's docstring says what it guarantees and what it does not.
"""
