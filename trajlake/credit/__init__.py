"""Credit assignment: per-turn values, credits, segments and loss weights, stored as data."""

from trajlake.credit._types import TrajectoryTurns, Turn, ValueSource

__all__ = ["TrajectoryTurns", "Turn", "ValueSource"]
