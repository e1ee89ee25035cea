"""SLO figures of a level: goodput (req/s, tok/s) and attainment (docs/metrics.md, "SLOs and goodput").

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

COLUMNS = ["goodput_rps", "goodput_tok_s", "slo_attainment"]


def upgrade() -> None:
    for name in COLUMNS:
        op.add_column("levels", sa.Column(name, sa.Float))


def downgrade() -> None:
    for name in COLUMNS:
        op.drop_column("levels", name)
