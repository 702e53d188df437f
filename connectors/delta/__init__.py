"""Delta Lake I/O and the Delta sinks (docs/design.md, "Delta sinks"): the table and its log,
staging, the two-phase sink, the idempotent ``txnAppId`` writer and the dedup sink."""

__all__: list[str] = []  # the modules are the surface: connectors.delta.two_phase, ...
