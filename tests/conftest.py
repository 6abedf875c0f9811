"""Shared fixtures: fresh lakes on local disk, seeded sample data."""

from __future__ import annotations

from pathlib import Path

import pytest

import trajlake as tl
from trajlake.sample import sample_trajectories

SHARED_CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"


@pytest.fixture
def lake(tmp_path: Path) -> tl.Lake:
    """An empty lake in a temporary directory."""
    return tl.open_lake(tmp_path / "lake", create=True)


@pytest.fixture
def sample_lake(lake: tl.Lake) -> tl.Lake:
    """A lake holding 40 sample trajectories (10 tasks × 4 attempts) in one snapshot."""
    lake.write(list(sample_trajectories(40)))
    return lake
