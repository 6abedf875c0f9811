"""Real trajectories for the credit sources' end-to-end tests: the SWE-agent, mini-swe-agent and
τ-bench files of the shared corpus, ingested, with alternating labels on the trajectories that
carry no outcome of their own (so every source has both classes to fit on)."""

from __future__ import annotations

import csv
from pathlib import Path

import trajlake as tl

CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus"
PARTS = ("01_sweagent_traj", "02_mini_swe_agent", "06_eval_frameworks/tau_bench")


def ingest_labelled_corpus(lake: tl.Lake, tmp_path: Path) -> int:
    """Ingest `PARTS` into `lake` and label its unlabelled trajectories alternately resolved /
    not resolved; the number of labels written."""
    for part in PARTS:
        lake.ingest(str(CORPUS / part))
    unlabelled = lake.sql("SELECT trajectory_id FROM outcomes WHERE resolved IS NULL").rows()
    with (tmp_path / "labels.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["trajectory_id", "resolved"])
        writer.writerows([tid, "true" if i % 2 else "false"] for i, (tid,) in enumerate(unlabelled))
    lake.label(str(tmp_path / "labels.csv"))
    return len(unlabelled)
