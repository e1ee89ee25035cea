"""The client side of a load: streamed requests into records, the schedulers (closed loop, open loop, sessions), worker processes and Ray actors.

Layer: load | workloads. May import: plan, store, metrics, server, engines, values, guards, errors; not its sibling workloads (docs/architecture.md).
"""
