"""Measurements: one load sent to one target (``measure``), capacity's search over probes, a recipe's variants each relaunched (``sweep``); below them a run's levels and the ways a load is sent.

Layer: report | run. May import: rules, launch, recipes, settings, load, workloads, plan, store, metrics, server, engines, values, guards, errors; not its sibling report (docs/architecture.md).
"""
