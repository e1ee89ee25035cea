"""Runs and their levels.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

METRICS = ["output_tok_s", "request_rps", "ttft_ms_p50", "ttft_ms_p99", "ttft_ms_mean", "tpot_ms_p50", "tpot_ms_p99", "tpot_ms_mean",
           "itl_ms_p50", "itl_ms_p99", "e2e_ms_p50", "e2e_ms_p99", "e2e_ms_mean", "decode_tok_s_p50", "decode_tok_s_mean"]  # fmt: skip


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("source", sa.String(32), nullable=False),
        sa.Column("origin", sa.Text, nullable=False),
        sa.Column("imported_at", sa.String(40), nullable=False),
        sa.Column("started_at", sa.String(40)),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("model", sa.Text, nullable=False),
        sa.Column("engine", sa.String(32), nullable=False),
        sa.Column("engine_version", sa.Text),
        sa.Column("hardware", sa.Text, nullable=False),
        sa.Column("host", sa.Text),
        sa.Column("recipe", sa.Text),
        sa.Column("variant", sa.Text),
        sa.Column("input_tokens", sa.Integer),
        sa.Column("output_tokens", sa.Integer),
        sa.Column("prefix_cache", sa.String(16)),
        sa.Column("document", sa.Text, nullable=False),
    )
    op.create_index("ix_runs_model", "runs", ["model"])
    op.create_table(
        "levels",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String(32), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("position", sa.Integer, nullable=False),
        sa.Column("label", sa.Text, nullable=False),
        sa.Column("concurrency", sa.Integer, nullable=False),
        sa.Column("rate_rps", sa.Float),
        sa.Column("ok", sa.Integer, nullable=False),
        sa.Column("failed", sa.Integer, nullable=False),
        *[sa.Column(name, sa.Float) for name in METRICS],
    )
    op.create_index("ix_levels_run_id", "levels", ["run_id"])


def downgrade() -> None:
    op.drop_table("levels")
    op.drop_table("runs")
