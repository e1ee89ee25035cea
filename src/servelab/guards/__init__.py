"""Where outside data crosses in or out: text made safe for each sink, secrets masked, files, YAML and JSON read with caps.

Layer: guards. May import: errors (docs/architecture.md).
"""
