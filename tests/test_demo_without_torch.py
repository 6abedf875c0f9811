"""`trajlake demo` on the base install (`pip install -e .`, no torch, no transformers): the loop
trains the hybrid sparse text model (the best CPU recipe), says so, ranks gen-1 with it and
finishes without importing torch.

The demo runs in a subprocess whose `sitecustomize` puts a meta-path finder in front of every
other that refuses torch and transformers, as a fresh install without them would: the test
process itself may hold torch already, and the blocker must be in place before trajlake loads.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import trajlake as tl

ROOT = Path(__file__).resolve().parents[1]

SITECUSTOMIZE = """
import atexit
import importlib.abc
import json
import os
import sys

BLOCKED = {"torch", "transformers"}


class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, Blocker())


@atexit.register
def _record():
    loaded = sorted(m for m in sys.modules if m.partition(".")[0] in BLOCKED)
    with open(os.environ["BLOCKER_REPORT"], "w") as f:
        json.dump(loaded, f)
"""


def test_the_quick_demo_runs_without_torch_on_the_hybrid_cpu_model(tmp_path: Path) -> None:
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(SITECUSTOMIZE)
    record, lake = tmp_path / "loaded.json", tmp_path / "lake"
    path = os.pathsep.join([str(tmp_path / "site"), str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path, "BLOCKER_REPORT": str(record)}
    result = subprocess.run(
        [sys.executable, "-m", "trajlake", "demo", "--quick", "--lake", str(lake)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=240,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith(
        "value model: hybrid sparse text model (CPU) — the best CPU recipe on held-out tasks "
        "of both synthetic environments (docs/value-models.md); numpy only\n"
    )
    assert json.loads(record.read_text()) == []  # torch and transformers were never loaded

    report = json.loads((lake / "demo-report" / "report.json").read_text())
    model = report["value_model"]
    assert model["kind"] == "hybrid" and "best CPU recipe" in model["why"]
    assert model["model_id"].startswith("hybrid-")
    assert "hybrid sparse text model (CPU): hybrid-" in result.stdout
    assert Path(model["directory"], "sparse_value.json").is_file()
    assert not Path(model["directory"], "model.safetensors").exists()
    assert set(report["plots"]) == {"success", "value_curves", "best_at_k"}
    # Gen-1 was ranked by the hybrid: the picked candidate of each task has its top score.
    rows = (
        tl.open_lake(lake)
        .sql(
            "SELECT task_id, json_extract(attrs, '$.best_of_n.score')::DOUBLE, "
            "json_extract(attrs, '$.best_of_n.selected')::BOOLEAN FROM trajectories "
            "WHERE generation = 1"
        )
        .rows()
    )
    by_task: dict[str, list[tuple[float, bool]]] = {}
    for task, score, selected in rows:
        by_task.setdefault(task, []).append((score, selected))
    assert len(by_task) == report["best_of_n"]["tasks"] > 0
    for candidates in by_task.values():
        assert sum(s for _, s in candidates) == 1
        assert next(score for score, s in candidates if s) == max(c[0] for c in candidates)
    assert len({row[1] for row in rows}) > 1  # the scores tell candidates apart
