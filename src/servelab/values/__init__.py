"""Plain value types with no behaviour of their own: one request's record, a server's argv read as flags, a model's architecture and an accelerator.

Layer: values. May import: guards, errors (docs/architecture.md).
"""
