"""The data that lasts: run documents (``run.json``, records), grid cells, the runs database and other tools' results imported into it.

Layer: store. May import: metrics, server, engines, values, guards, errors (docs/architecture.md).
"""
