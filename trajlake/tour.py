"""`trajlake tour`: a quick tour of the lake on bundled rollouts (a local lake, SQL, tags).

It ingests the bundled sample rollouts, tags the snapshot, answers the questions people ask of
their rollouts in SQL, time-travels to the tag, maintains and validates the lake, and returns
every number it found (nothing here is precomputed). It uses only the public `Lake` API, as a
user's script would, so it doubles as a worked example.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from trajlake.api import open_lake
from trajlake.errors import TagAlreadyExists

DEFAULT_TOUR_LAKE = "trajlake-tour"
SAMPLE_FILE = "sample_rollouts.jsonl.gz"
SAMPLE_TAG = "sample-v1"

QUESTIONS: dict[str, str] = {
    "success rate by harness and policy": """
        SELECT t.harness, t.policy_model, count(*) AS rollouts,
               round(avg(o.resolved::INT), 3)::DOUBLE AS success_rate
        FROM outcomes o JOIN trajectories t USING (trajectory_id)
        GROUP BY ALL ORDER BY success_rate DESC""",
    "most used tools": """
        SELECT tool_name, count(*) AS calls, count(DISTINCT trajectory_id) AS rollouts
        FROM tool_calls GROUP BY tool_name ORDER BY calls DESC LIMIT 5""",
    "tokens and turns, resolved vs not": """
        SELECT resolved, count(*) AS rollouts, round(avg(n_turns), 1)::DOUBLE AS avg_turns,
               sum(total_tokens)::BIGINT AS total_tokens
        FROM trajectories GROUP BY resolved ORDER BY resolved""",
    "tasks every attempt failed": """
        SELECT count(*) AS tasks FROM (
            SELECT task_id FROM trajectories GROUP BY task_id HAVING NOT bool_or(resolved))""",
}


@dataclass
class TourReport:
    """Everything the tour did and found."""

    lake: str
    ingest: dict[str, Any]
    tag: str
    answers: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    time_travel: dict[str, int] = field(default_factory=dict)
    maintenance: dict[str, Any] = field(default_factory=dict)
    valid: bool = False


def sample_data_path() -> str:
    """Path of the bundled sample rollouts (canonical JSONL, gzip)."""
    return str(resources.files("trajlake") / "data" / SAMPLE_FILE)


def run_tour(lake_uri: str | os.PathLike[str] = DEFAULT_TOUR_LAKE) -> TourReport:
    """Run the quick tour on a local lake (created if missing; re-running adds nothing)."""
    lake = open_lake(lake_uri, create=True)
    ingest = lake.ingest(sample_data_path(), generation=0, stage="eval")
    with contextlib.suppress(TagAlreadyExists):  # a re-run: the tag names the first ingest
        lake.tag(SAMPLE_TAG, at=ingest.snapshot_id, note="bundled sample rollouts")
    report = TourReport(lake=lake.uri, ingest=ingest.to_dict(), tag=SAMPLE_TAG)
    with lake.query() as session:  # one pinned session: every answer reads the same snapshot
        for question, sql in QUESTIONS.items():
            report.answers[question] = session.sql(sql).to_dicts()
    # Time travel: later rollouts do not change what the tag shows.
    lake.write(_extra_rollouts(), operation="tour-extra")
    count = "SELECT count(*) FROM trajectories"
    report.time_travel = {
        "latest": int(lake.sql(count).rows()[0][0]),
        SAMPLE_TAG: int(lake.sql(count, at=SAMPLE_TAG).rows()[0][0]),
    }
    report.maintenance = lake.maintain().to_dict()
    report.valid = lake.validate().ok
    return report


def _extra_rollouts() -> list[dict[str, Any]]:
    from trajlake.sample import sample_trajectories

    return list(sample_trajectories(8, seed=8, start=10_000))
