"""A server as servelab reaches it: discovery of an endpoint, its tokenizer, liveness, and the embedded llama.cpp server in a child process.

Layer: server. May import: engines, values, guards, errors (docs/architecture.md).
"""
