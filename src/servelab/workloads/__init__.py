"""What is sent: token-exact prompts from a corpus, named workloads and mixes, datasets, sessions, traces.

Layer: load | workloads. May import: plan, store, metrics, server, engines, values, guards, errors; not its sibling load (docs/architecture.md).
"""
