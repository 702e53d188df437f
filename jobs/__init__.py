"""The guarantee jobs, one module per guarantee: ``python -m jobs.<name>``, ``spark-ext run``
or ``scripts/submit.sh jobs/<name>.py``.

Shared start-up and flags: :mod:`jobs.startup`; the harness's view: :mod:`jobs.registry`;
notebooks: :mod:`jobs.notebooks`.
"""
