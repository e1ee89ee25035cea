"""The traffic a run measured: its API and its kind of load (results.LoadSpec.traffic), e.g.
``chat``, ``completions``, ``chat sessions``, ``chat trace mooncake``.

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("traffic", sa.Text))


def downgrade() -> None:
    op.drop_column("runs", "traffic")
