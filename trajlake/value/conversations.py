"""Lake trajectories as the conversations value models read: one query for the canonical rows
(with messages) at a snapshot, each turned into a `Conversation`.

Shared by training, lake scoring (`artifacts`) and the `value-model:<dir>` credit source, so it
sits in a module of its own rather than inside the training code.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from trajlake.value.serialize import Conversation, as_conversation

if TYPE_CHECKING:
    from trajlake.lake import LakeStore


def read_conversations(
    lake: LakeStore, snapshot_id: int, ids: Sequence[str]
) -> dict[str, Conversation]:
    """Canonical trajectories (with messages) at one snapshot, as conversations by id."""
    from trajlake.export.jsonl import read_canonical

    found = read_canonical(lake, at=snapshot_id, ids=list(ids))
    return {row["trajectory_id"]: as_conversation(row) for row in found}
