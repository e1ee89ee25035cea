"""Figures from records and from the server: per-level summaries, SLOs and goodput, waves, turns, Prometheus counters, the boot log, the GPU.

Layer: metrics. May import: server, engines, values, guards, errors (docs/architecture.md).
"""
