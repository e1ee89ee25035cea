"""What a person reads: tables, the tuning ledger, plots, HTML reports and the leaderboard page of stored runs (``servelab ui``).

Layer: report | run. May import: rules, launch, recipes, settings, load, workloads, plan, store, metrics, server, engines, values, guards, errors; not its sibling run (docs/architecture.md).
"""
