"""Alembic environment for servelab's runs database: migrations run on the connection store.py passes."""

from alembic import context

connection = context.config.attributes["connection"]
context.configure(connection=connection, render_as_batch=True)  # batch mode: SQLite can alter tables too
with context.begin_transaction():
    context.run_migrations()
