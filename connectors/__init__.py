"""The I/O layer: ``connectors.kafka`` (the Spark reader, the Kafka sinks, the local broker),
``connectors.delta`` (the Delta sinks), ``connectors.sinks`` (the two entry points)."""

__all__: list[str] = []
