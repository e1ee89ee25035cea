"""A recipe's server started and stopped: a process, a container, a Ray or native cluster; readiness.

Layer: launch. May import: recipes, settings, load, workloads, plan, store, metrics, server, engines, values, guards, errors (docs/architecture.md).
"""
