"""Rules that turn evidence into findings: a recipe's (``lint``), a run's (``diagnose``), and a measured run beside predict's curve (``explain``).

Layer: rules. May import: launch, recipes, settings, load, workloads, plan, store, metrics, server, engines, values, guards, errors (docs/architecture.md).
"""
