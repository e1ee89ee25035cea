"""servelab: correct, reproducible measurements of OpenAI-compatible LLM inference servers."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("servelab")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0+unknown"
