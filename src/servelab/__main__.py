"""``python -m servelab`` runs the CLI."""

from servelab.cli import app

app(prog_name="servelab")
