"""`trajlake demo --quick`: the generation loop end to end, and its report checked against the
lake — success rates against SQL over `outcomes`, lineage attrs, tags, the `models` and
`credits` tables, the SFT exports, the cloned policy's exact success, the PNG plots and
`trajlake lineage`; and the same loop on an install without torch (the feature baseline)."""

from __future__ import annotations

import json
import time
from collections import deque
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

import trajlake as tl
from trajlake.cli.main import cli
from trajlake.errors import MissingExtra, UnsupportedStorage
from trajlake.loop import (
    QUICK_SIZES,
    choose_value_model,
    mean_interval,
    parse_seeds,
    run_loop,
    summarize,
)
from trajlake.loop._steps import GEN1_VARIANT, VARIANTS
from trajlake.synth import PolicyParams, SynthConfig, exact_success

MODELS = Path(__file__).resolve().parents[1] / "models"
PNG = b"\x89PNG\r\n\x1a\n"
JOIN = "FROM outcomes o JOIN trajectories t USING (trajectory_id)"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One quick demo run through the CLI (text output, the default hybrid value model); its
    report.json and lake."""
    lake_dir = tmp_path_factory.mktemp("loop") / "lake"
    start = time.perf_counter()
    result = CliRunner().invoke(cli, ["demo", "--lake", str(lake_dir), "--quick"])
    seconds = time.perf_counter() - start
    assert result.exit_code == 0, result.output
    report = json.loads((lake_dir / "demo-report" / "report.json").read_text())
    return {
        "dir": lake_dir,
        "lake": tl.open_lake(lake_dir),
        "report": report,
        "text": result.output,
        "seconds": seconds,
    }


def test_quick_run_records_every_step(demo: dict[str, Any]) -> None:
    report = demo["report"]
    names = [s["name"] for s in report["steps"]]
    assert names == [
        "generate gen-0",
        "ingest, label, tag gen-0",
        "credit",
        "export SFT",
        "behaviour cloning",
        "train value model",
        "register gen-1 policy",
        "generate gen-1 + best-of-N",
        "ingest, label, tag gen-1",
        "evaluate value model on gen-1",
        "report",
    ]
    assert report["quick"] is True and report["sizes"]["gen0_tasks"] == QUICK_SIZES.gen0_tasks
    assert 0 < report["seconds"] <= demo["seconds"]
    assert sum(s["seconds"] for s in report["steps"]) <= report["seconds"]


def test_success_per_generation_equals_sql(demo: dict[str, Any]) -> None:
    rows = (
        demo["lake"]
        .sql(
            "SELECT t.generation, count(*), count(DISTINCT t.task_id), sum(o.resolved::INT), "
            f"avg(o.resolved::INT) {JOIN} GROUP BY 1 ORDER BY 1"
        )
        .rows()
    )
    sizes = QUICK_SIZES
    assert [r[:3] for r in rows] == [
        (0, sizes.gen0_tasks * sizes.rollouts_per_task, sizes.gen0_tasks),
        (1, sizes.heldout_tasks * sizes.candidates, sizes.heldout_tasks),
    ]
    reported = {g["generation"]: g for g in demo["report"]["generations"]}
    for generation, n, tasks, resolved, rate in rows:
        got = reported[generation]
        assert (got["trajectories"], got["tasks"], got["resolved"]) == (n, tasks, resolved)
        assert got["success_rate"] == pytest.approx(rate, abs=1e-12)
    # The label step: rollouts arrived without outcomes, every outcome is a label.
    lake = demo["lake"]
    assert lake.sql("SELECT count(*) FROM trajectories WHERE resolved IS NOT NULL").rows() == [(0,)]
    assert lake.sql("SELECT count(*) FROM labels").rows()[0][0] == sum(r[1] for r in rows)


def test_best_of_n_numbers_equal_sql(demo: dict[str, Any]) -> None:
    lake, bon = demo["lake"], demo["report"]["best_of_n"]
    picks = lake.sql(
        "SELECT t.task_id, o.resolved, "
        "json_extract(t.attrs, '$.best_of_n.score')::DOUBLE AS score, "
        "json_extract(t.attrs, '$.best_of_n.rank')::INT AS rank "
        f"{JOIN} WHERE t.generation = 1 ORDER BY t.task_id"
    ).to_dicts()
    by_task: dict[str, list[dict[str, Any]]] = {}
    for row in picks:
        by_task.setdefault(row["task_id"], []).append(row)
    n = QUICK_SIZES.candidates
    assert bon["n"] == n and bon["tasks"] == len(by_task) == QUICK_SIZES.heldout_tasks
    chosen = []
    for rows in by_task.values():
        assert sorted(r["rank"] for r in rows) == list(range(1, n + 1))
        top = next(r for r in rows if r["rank"] == 1)
        assert top["score"] == max(r["score"] for r in rows)  # the value model's pick
        chosen.append(top["resolved"])
    assert bon["selected"] == pytest.approx(sum(chosen) / len(chosen))
    means = [sum(r["resolved"] for r in rows) / n for rows in by_task.values()]
    assert bon["random"] == pytest.approx(sum(means) / len(means))
    assert bon["pass"] == pytest.approx(
        sum(any(r["resolved"] for r in rows) for rows in by_task.values()) / len(by_task)
    )
    # `eval value` on the same candidates agrees on Random@N and Pass@N (Best@N averages ties).
    assert bon["eval_random_at_n"] == pytest.approx(bon["random"])
    assert bon["eval_pass_at_n"] == pytest.approx(bon["pass"])


def test_gen1_carries_lineage_and_tags_exist(demo: dict[str, Any]) -> None:
    lake, report = demo["lake"], demo["report"]
    refs = lake.sql(
        "SELECT DISTINCT generation, policy_model, "
        "json_extract_string(attrs, '$.lineage.policy_model_id'), "
        "json_extract_string(attrs, '$.lineage.value_model_id') FROM trajectories ORDER BY 1"
    ).rows()
    policy = report["gen1_policy"]
    assert refs == [
        (0, "synth-policy-v0", None, None),
        (1, policy["name"], policy["model_id"], report["value_model"]["model_id"]),
    ]
    assert report["lineage"] == {
        "policy_model_id": policy["model_id"],
        "value_model_id": report["value_model"]["model_id"],
    }
    tags = {t.name: t.snapshot_id for t in lake.tags()}
    assert {"gen-0", "gen-0-sft", "gen-1"} <= set(tags)
    assert report["tags"] == tags
    count = "SELECT count(DISTINCT generation), count(*) FROM trajectories"
    assert lake.sql(count, at="gen-0").rows()[0][0] == 1
    assert lake.sql(count, at="gen-1").rows()[0] == lake.sql(count).rows()[0]


def test_models_and_credit_runs_are_in_the_lake(demo: dict[str, Any]) -> None:
    lake, report = demo["lake"], demo["report"]
    models = lake.sql("SELECT model_id, kind, training_tag FROM models ORDER BY kind").rows()
    assert models == [
        (report["gen1_policy"]["model_id"], "policy", "gen-0-sft"),
        (report["value_model"]["model_id"], "sparse", "gen-0"),
    ]
    runs = lake.sql(
        "SELECT run_name, any_value(estimator), any_value(json_extract_string(params, '$.mask')),"
        " count(*) FILTER (WHERE mask) FROM credits GROUP BY 1 ORDER BY 1"
    ).rows()
    assert {(r[1], r[2]) for r in runs} >= {
        ("outcome", "rise"),
        ("prefix-mc", "rise"),
        ("prefix-mc", "advantage"),
        ("crossfit:text-td", "rise"),
    }
    kept = {r[0]: r[3] for r in runs}
    assert {r["run_name"]: r["kept_turns"] for r in report["credit_runs"]} == kept
    assert report["value_model"]["kind"] == "hybrid"
    assert Path(report["value_model"]["directory"], "sparse_value.json").is_file()


def test_rejection_sampling_export_trains_only_resolved_rollouts(demo: dict[str, Any]) -> None:
    lake, report = demo["lake"], demo["report"]
    resolved = {r[0] for r in lake.sql("SELECT trajectory_id FROM outcomes WHERE resolved").rows()}
    folder = Path(next(p["export"] for p in report["policies"] if p["name"].startswith("resolved")))
    trained, examples = set(), 0
    for shard in folder.glob("train-*.jsonl"):
        for line in shard.read_text().splitlines():
            row = json.loads(line)
            weights = [w for w in row["message_weights"] if w > 0]
            examples += len(weights)
            if weights:
                trained.add(row["trajectory_id"])
    assert trained and trained <= resolved
    policy = next(p for p in report["policies"] if p["export"] == str(folder))
    assert policy["examples"] == examples


def test_gen1_policy_is_saved_and_its_exact_success_reproduces(demo: dict[str, Any]) -> None:
    report = demo["report"]
    row = demo["lake"].sql("SELECT artifact_uri FROM models WHERE kind = 'policy'").rows()[0]
    policy = PolicyParams.from_dict(json.loads(Path(row[0]).read_text()))
    sizes = QUICK_SIZES
    heldout = SynthConfig(
        seed=0,
        n_tasks=sizes.heldout_tasks,
        rollouts_per_task=sizes.candidates,
        task_offset=sizes.gen0_tasks,
    )
    chosen = next(p for p in report["policies"] if p["variant"] == GEN1_VARIANT)
    assert chosen["credit_run"] == report["gen1_policy"]["credit_run"] == "value-model-rise"
    assert exact_success(policy, heldout) == pytest.approx(chosen["exact_success_heldout"])
    gen1 = next(g for g in report["generations"] if g["generation"] == 1)
    assert gen1["expected_success"] == pytest.approx(chosen["exact_success_heldout"])
    names = [p["name"] for p in report["policies"]]
    assert names[0].startswith("gen-0 policy") and "all trajectories" in names


def test_plots_are_png_files(demo: dict[str, Any]) -> None:
    plots = demo["report"]["plots"]
    assert set(plots) == {"success", "value_curves", "best_at_k"}
    for path in plots.values():
        data = Path(path).read_bytes()
        assert data[:8] == PNG and len(data) > 5_000
        assert Path(path).parent == demo["dir"] / "demo-report"
    evaluation = Path(demo["report"]["files"]["value_eval_gen1"]).parent
    assert (evaluation / "best_at_k.png").read_bytes()[:8] == PNG


def test_text_report_shows_steps_and_tables(demo: dict[str, Any]) -> None:
    text = demo["text"]
    assert text.startswith("value model: hybrid sparse text model (CPU) — the best CPU recipe")
    for expected in (
        "train value model",
        "success per generation and method",
        "best-of-4 by the value model",
        "resolved only (rejection sampling)",
        "credit-weighted: rise (prefix-mc)",
        "prefix-mc-rise",
    ):
        assert expected in text
    report = demo["report"]
    lines = text.splitlines()
    for g in report["generations"]:
        row = next(line for line in lines if line.strip().startswith(f"{g['tag']}: "))
        assert f"{g['success_rate']:.3f}" in row and str(g["trajectories"]) in row
    for p in report["policies"]:
        row = next(line for line in lines if line.strip().startswith(p["name"]))
        assert row.rstrip().endswith(f"{p['exact_success_heldout']:.3f}")


def _reachable(edges: list[dict[str, str]], start: str, goal: str) -> list[str] | None:
    parents: dict[str, str | None] = {start: None}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        if node == goal:
            path: list[str] = []
            cur: str | None = node
            while cur is not None:
                path.append(cur)
                cur = parents[cur]
            return path[::-1]
        for e in edges:
            if e["source"] == node and e["target"] not in parents:
                parents[e["target"]] = node
                queue.append(e["target"])
    return None


def test_lineage_leads_from_generation_0_through_gen_0_and_the_model_to_generation_1(
    demo: dict[str, Any],
) -> None:
    runner = CliRunner()
    result = runner.invoke(cli, ["lineage", "--lake", str(demo["dir"]), "--output", "json"])
    assert result.exit_code == 0, result.output
    edges = json.loads(result.stdout)["edges"]
    model = f"model:{demo['report']['value_model']['model_id']}"
    first = _reachable(edges, "generation:0", "tag:gen-0")
    then = _reachable(edges, "tag:gen-0", model)
    last = _reachable(edges, model, "generation:1")
    assert first and then and last, (first, then, last)
    # The policy branch: gen-0 → credit run → its SFT export → the cloned policy → gen-1.
    policy = f"model:{demo['report']['gen1_policy']['model_id']}"
    run = f"credit-run:{demo['report']['gen1_policy']['credit_run']}"
    export = next(e["source"] for e in edges if e["target"] == policy and "export" in e["source"])
    assert _reachable(edges, "tag:gen-0", run) and _reachable(edges, run, export)
    assert _reachable(edges, policy, "generation:1")
    text = runner.invoke(cli, ["lineage", "--lake", str(demo["dir"])]).output
    assert "tagged: tag gen-0" in text and "rollouts of generation 1" in text


def test_a_second_run_on_the_same_lake_is_refused(demo: dict[str, Any]) -> None:
    result = CliRunner().invoke(cli, ["demo", "--lake", str(demo["dir"]), "--quick", "-o", "json"])
    assert result.exit_code == 1
    assert "already holds trajectories" in result.output


def test_the_demo_needs_a_local_lake() -> None:
    with pytest.raises(UnsupportedStorage):
        run_loop("s3://bucket/lake", quick=True)


def _hide_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a)
    )


def test_without_torch_the_loop_trains_the_best_cpu_recipe_and_says_which(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _hide_torch(monkeypatch)
    choice = choose_value_model()
    assert choice.kind == "hybrid"
    assert choice.describe() == (
        "value model: hybrid sparse text model (CPU) — the best CPU recipe on held-out tasks "
        "of both synthetic environments (docs/value-models.md); numpy only"
    )
    recipe = choice.recipe(epochs=1, max_tokens=128)  # the budget is the transformer's
    assert recipe.kind == "sparse" and recipe.name == "hybrid"
    baseline = choose_value_model("baseline")
    assert baseline.kind == "baseline" and baseline.describe().endswith("— asked for")
    assert baseline.recipe(epochs=1, max_tokens=128).name == "feature-baseline"
    with pytest.raises(ValueError, match="expected one of auto, hybrid, transformer, baseline"):
        choose_value_model("bert")


def test_asking_for_the_transformer_without_torch_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _hide_torch(monkeypatch)
    with pytest.raises(MissingExtra, match=r"pip install 'trajlake\[train\]'"):
        choose_value_model("transformer")
    args = ["demo", "--lake", str(tmp_path / "lake"), "--quick", "--value-model", "transformer"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1
    assert "pip install 'trajlake[train]'" in result.output
    assert not (tmp_path / "lake").exists()  # nothing was created


def test_embedded_recipes_are_models_tiny_baseline_and_hybrid_yaml() -> None:
    from trajlake.loop._steps import _BASELINE_RECIPE, _HYBRID_RECIPE, _TINY_RECIPE

    assert yaml.safe_load((MODELS / "tiny.yaml").read_text()) == _TINY_RECIPE
    assert yaml.safe_load((MODELS / "baseline.yaml").read_text()) == _BASELINE_RECIPE
    assert yaml.safe_load((MODELS / "hybrid.yaml").read_text()) == _HYBRID_RECIPE


def test_the_embedded_recipe_is_used_without_the_models_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from trajlake.loop import _steps

    overrides = {"train.epochs": 1, "serializer.max_tokens": 256}
    from_file = _steps.tiny_recipe(overrides)
    baseline, hybrid = _steps.baseline_recipe(), _steps.hybrid_recipe()
    monkeypatch.setattr(_steps, "TINY_RECIPE_FILE", tmp_path / "missing.yaml")
    monkeypatch.setattr(_steps, "BASELINE_RECIPE_FILE", tmp_path / "missing.yaml")
    monkeypatch.setattr(_steps, "HYBRID_RECIPE_FILE", tmp_path / "missing.yaml")
    embedded = _steps.tiny_recipe(overrides)
    assert embedded == from_file and embedded.fingerprint() == from_file.fingerprint()
    assert embedded.train.epochs == 1 and embedded.serializer.max_tokens == 256
    assert _steps.baseline_recipe().fingerprint() == baseline.fingerprint()
    assert _steps.hybrid_recipe().fingerprint() == hybrid.fingerprint()


def test_json_output_with_seed_and_out(tmp_path: Path) -> None:
    out = tmp_path / "report"
    args = ["demo", "--lake", str(tmp_path / "lake"), "--quick", "--seed", "1", "--out", str(out)]
    # The feature baseline: the options under test do not depend on the value model (≈ 10 s).
    result = CliRunner().invoke(cli, [*args, "--value-model", "baseline", "--output", "json"])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)  # nothing but the report: no "value model:" line
    assert printed == json.loads((out / "report.json").read_text())
    assert printed["seed"] == 1 and printed["out"] == str(out)
    assert printed["value_model"]["kind"] == "baseline"
    assert all(Path(p).parent == out for p in printed["plots"].values())
    ids = tl.open_lake(tmp_path / "lake").sql("SELECT trajectory_id FROM trajectories").rows()
    assert ids and all(i[0].startswith("synth-s1-") for i in ids)


def test_a_policy_is_cloned_from_the_cross_fitted_credit_run(demo: dict[str, Any]) -> None:
    lake, report = demo["lake"], demo["report"]
    best = next(v for v in VARIANTS if v.key == "credit-rise-best")
    # Gen-1 runs the built-in value model's rise policy: better over 8 seeds (README).
    assert GEN1_VARIANT == report["gen1_policy"]["variant"] == "credit-rise-vm"
    assert best.label == "credit-weighted: rise (cross-fitted text)"
    # The rise mask keeps every turn of a resolved rollout and rising segments of failed ones;
    # the text model's values differ between turns (it read the transcripts, not only R).
    rows = lake.sql(
        "SELECT o.resolved, count(*), count(*) FILTER (WHERE c.mask), "
        "count(DISTINCT round(c.value_before, 6)) FROM credits c JOIN outcomes o "
        "USING (trajectory_id) WHERE c.run_name = 'crossfit-td-rise' GROUP BY 1 ORDER BY 1"
    ).rows()
    (_, failed, failed_kept, failed_values), (_, resolved, resolved_kept, _) = rows
    assert resolved_kept == resolved and 0 <= failed_kept < failed and failed_values > 10
    policy = next(p for p in report["policies"] if p["variant"] == best.key)
    assert policy["examples"] == resolved_kept + failed_kept
    run = next(r for r in report["credit_runs"] if r["run_name"] == "crossfit-td-rise")
    assert run["estimator"] == "crossfit:text-td"


def test_seeds_are_parsed_from_ranges_and_lists() -> None:
    assert parse_seeds("0-3") == [0, 1, 2, 3]
    assert parse_seeds("0-2, 7,1") == [0, 1, 2, 7]
    for bad in ("x", "3-1", "-2", "0-", ""):
        with pytest.raises(ValueError, match="seeds"):
            parse_seeds(bad)


def test_mean_interval_is_the_student_t_interval() -> None:
    got = mean_interval([0.5, 0.6, 0.7])
    # mean 0.6, sd 0.1, t(0.975, 2 dof) = 4.302653 (tables): half-width 4.302653 · 0.1 / √3.
    half = 4.302653 * 0.1 / 3**0.5
    assert got.mean == pytest.approx(0.6) and got.sd == pytest.approx(0.1) and got.n == 3
    assert got.low == pytest.approx(0.6 - half) and got.high == pytest.approx(0.6 + half)
    # t(0.975, 9 dof) = 2.262157: ten values 0, 1, 0, 1, … have sd √(10 / 36).
    ten = mean_interval([0.0, 1.0] * 5)
    assert ten.high == pytest.approx(0.5 + 2.262157 * (10 / 36) ** 0.5 / 10**0.5, rel=1e-6)
    one = mean_interval([0.4])
    assert (one.mean, one.low, one.high, one.sd) == (0.4, None, None, None)


def test_gains_over_rejection_sampling_are_paired_by_seed() -> None:
    per_seed = {
        0: {"resolved-only": 0.50, "best": 0.60},
        1: {"resolved-only": 0.40, "best": 0.60},
        2: {"resolved-only": 0.60, "best": 0.65},
    }
    rows = summarize(per_seed, {"resolved-only": "rejection sampling", "best": "best"})
    baseline, best = rows
    assert baseline.gain is None and baseline.success.mean == pytest.approx(0.5)
    assert best.per_seed == {0: 0.60, 1: 0.60, 2: 0.65}
    # Differences 0.10, 0.20, 0.05: mean 0.11667, sd 0.076376; unpaired, the baseline's own
    # spread (sd 0.1) would widen the interval.
    assert best.gain is not None and best.gain.mean == pytest.approx(0.35 / 3)
    assert best.gain.sd == pytest.approx(0.0763763, rel=1e-5)
    half = 4.302653 * 0.0763763 / 3**0.5
    assert best.gain.low == pytest.approx(0.35 / 3 - half, rel=1e-5)
    with pytest.raises(ValueError, match="'best' has no value for seed"):
        summarize({0: {"resolved-only": 0.5}}, {"best": "best"})


TINY_SIZES = QUICK_SIZES.__class__(20, 4, 6, 3, epochs=1, max_tokens=128)


@pytest.mark.long  # two small loop runs: ≈ 8 s on 2 cores
def test_two_seeds_end_to_end_summarise_their_own_reports(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from trajlake.loop import _run

    monkeypatch.setattr(_run, "QUICK_SIZES", TINY_SIZES)  # the loop's steps, on fewer tasks
    root = tmp_path / "seeds"
    # The feature baseline: what is summarised over seeds does not depend on the value model.
    args = ["demo", "--lake", str(root), "--quick", "--seeds", "0-1", "--value-model", "baseline"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "gain over rejection sampling, paired [95% CI]" in result.output
    assert "— used for gen-1" in result.output
    summary = json.loads((root / "seeds-report.json").read_text())
    assert summary["seeds"] == [0, 1] and summary["gen1_variant"] == GEN1_VARIANT
    assert summary["value_model"] == "baseline"
    reports = [
        json.loads((root / f"seed-{s}" / "demo-report" / "report.json").read_text()) for s in (0, 1)
    ]
    assert [r["seed"] for r in reports] == [0, 1]
    success = [{p["variant"]: p["exact_success_heldout"] for p in r["policies"]} for r in reports]
    rows = {row["key"]: row for row in summary["policies"]}
    assert list(rows) == ["gen-0", *(v.key for v in VARIANTS)]
    t1 = 12.706205  # t(0.975, 1 dof): two seeds give wide intervals
    for key, row in rows.items():
        a, b = success[0][key], success[1][key]
        assert row["per_seed"] == {"0": a, "1": b}
        half = t1 * abs(a - b) / 2**0.5 / 2**0.5
        assert row["success"]["mean"] == pytest.approx((a + b) / 2)
        assert row["success"]["high"] == pytest.approx((a + b) / 2 + half, abs=1e-6)
        if key == "resolved-only":
            assert row["gain"] is None
            continue
        da, db = a - success[0]["resolved-only"], b - success[1]["resolved-only"]
        assert row["gain"]["mean"] == pytest.approx((da + db) / 2)
        assert row["gain"]["low"] == pytest.approx((da + db) / 2 - t1 * abs(da - db) / 2, abs=1e-6)
    picked = [r["best_of_n"]["selected"] for r in reports]
    gen1 = {row["key"]: row for row in summary["gen1"]}
    assert gen1["selected"]["success"]["mean"] == pytest.approx(sum(picked) / 2)


def test_seeds_options_are_checked(tmp_path: Path) -> None:
    lake = str(tmp_path / "lake")
    one = CliRunner().invoke(cli, ["demo", "--lake", lake, "--quick", "--seeds", "3"])
    assert one.exit_code == 2 and "needs two or more" in one.output
    both = CliRunner().invoke(cli, ["demo", "--lake", lake, "--seed", "1", "--seeds", "0-1"])
    assert both.exit_code == 2 and "not both" in both.output
    bad = CliRunner().invoke(cli, ["demo", "--lake", lake, "--seeds", "0-x"])
    assert bad.exit_code == 2 and "'0-x'" in bad.output
    assert not (tmp_path / "lake").exists()


@pytest.mark.long  # one small loop run training the tiny transformer: ≈ 20 s on 2 cores
def test_the_transformer_value_model_runs_the_loop_when_asked_for(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pytest.importorskip("torch")
    from trajlake.loop import _run

    monkeypatch.setattr(_run, "QUICK_SIZES", TINY_SIZES)
    args = ["demo", "--lake", str(tmp_path / "lake"), "--quick", "--value-model", "transformer"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert result.output.startswith("value model: tiny transformer — asked for")
    report = json.loads((tmp_path / "lake" / "demo-report" / "report.json").read_text())
    assert report["value_model"]["kind"] == "transformer"
    assert Path(report["value_model"]["directory"], "model.safetensors").is_file()
    assert 0.0 <= report["value_model"]["test_split"]["auroc"] <= 1.0
    assert 0.0 <= report["value_model"]["gen1"]["best_at_n"] <= 1.0  # gen-1's ranked candidates
