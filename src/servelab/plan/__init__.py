"""What fits and how fast it can be, without a server: model and hardware specs, weight formats, memory, the roofline, predict and its calibration.

Layer: plan. May import: store, metrics, server, engines, values, guards, errors (docs/architecture.md).
"""
