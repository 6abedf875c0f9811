"""SFT export end to end: files, manifest, byte-identical reruns, self-checks, shards, CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import trajlake as tl
from trajlake.cli.export_sft_cmd import sft
from trajlake.credit import run_credit
from trajlake.errors import NoSuchCreditRun, SftSelfCheckFailed
from trajlake.export.sft import export_sft
from trajlake.sample import sample_trajectories


@pytest.fixture
def credited(lake: tl.Lake) -> tl.Lake:
    lake.write(list(sample_trajectories(40)))
    run_credit(lake, estimator="prefix-mc", mask="rise", name="r")
    lake.tag("v1")
    return lake


def rows(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("fmt", ["openai", "trl", "sharegpt", "axolotl"])
def test_rerun_is_byte_identical(credited: tl.Lake, tmp_path: Path, fmt: str) -> None:
    kw = {"format": fmt, "credit": "r", "val_frac": 0.3, "seed": 7}
    export_sft(credited, str(tmp_path / "a"), **kw)  # type: ignore[arg-type]
    export_sft(credited, str(tmp_path / "b"), **kw)  # type: ignore[arg-type]
    names = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert names == ["manifest.json", "train-00000.jsonl", "val-00000.jsonl"]
    for name in names:
        a, b = (tmp_path / "a" / name).read_bytes(), (tmp_path / "b" / name).read_bytes()
        if name == "manifest.json":  # only the lake path differs
            a = a.replace(str(tmp_path / "a").encode(), b"").replace(
                str(tmp_path / "b").encode(), b""
            )
        assert a == b


def test_manifest_and_task_splits(credited: tl.Lake, tmp_path: Path) -> None:
    report = export_sft(
        credited,
        str(tmp_path),
        format="trl",
        credit="r",
        mask="rise",
        val_frac=0.3,
        seed=1,
        where="stage = 'eval'",
        at="v1",
    )
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    snap = credited.snapshot("v1")
    assert manifest["lake"] == credited.uri
    assert manifest["snapshot"] == {
        "id": snap.snapshot_id,
        "tags": ["v1"],
        "timestamp": snap.timestamp,
    }
    assert manifest["where"] == "stage = 'eval'" and manifest["credit_run"] == "r"
    assert manifest["mask_rule"] == "rise" and manifest["format"] == "trl"
    assert manifest["tokenizer"] is None and manifest["chat_template_sha256"] is None
    assert manifest["trajlake_version"] == tl.__version__
    assert manifest["splits"] == report.to_dict()["splits"]
    tasks: dict[str, set[str]] = {}
    for split in ("train", "val"):
        data = rows(tmp_path / f"{split}-00000.jsonl")
        counts = manifest["splits"][split]
        assert counts["samples"] == counts["trajectories"] == len(data)
        assert counts["trained_turns"] == sum(
            1
            for r in data
            for w in r["message_weights"]
            if w > 0  # type: ignore[attr-defined]
        )
        assert 0 < counts["trained_turns"] <= counts["turns"]
        ids = [str(r["trajectory_id"]) for r in data]
        tasks[split] = {
            str(t["task_id"])
            for t in credited.sql("SELECT trajectory_id, task_id FROM trajectories").to_dicts()
            if t["trajectory_id"] in ids
        }
    assert tasks["train"] and tasks["val"] and not tasks["train"] & tasks["val"]
    total = sum(c["trajectories"] + sum(c["dropped"].values()) for c in manifest["splits"].values())
    assert manifest["splits"]["train"]["dropped"]  # unresolved rollouts without a rise segment
    assert total == credited.sql("SELECT count(*) FROM trajectories").rows()[0][0]


def test_untrained_trajectories_are_left_out_and_counted(lake: tl.Lake, tmp_path: Path) -> None:
    lake.write(list(sample_trajectories(8)))
    # Outcome values give zero credit, so rise keeps only resolved trajectories' turns.
    run_credit(lake, estimator="outcome", mask="rise", name="flat")
    unresolved = lake.sql("SELECT count(*) FROM trajectories WHERE NOT resolved").rows()[0][0]
    with pytest.raises(SftSelfCheckFailed, match=f"{unresolved} selected trajectories have no"):
        export_sft(
            lake,
            str(tmp_path / "a"),
            format="openai",
            credit="flat",
            where="NOT resolved",
            require_trained=True,
        )
    assert not (tmp_path / "a").exists()
    report = export_sft(lake, str(tmp_path / "b"), format="openai", credit="flat")
    train = report.splits["train"]
    assert train.dropped == {"untrained": unresolved}
    assert train.trajectories == 8 - unresolved == len(rows(tmp_path / "b" / "train-00000.jsonl"))


def test_unknown_run_and_bad_arguments(credited: tl.Lake, tmp_path: Path) -> None:
    with pytest.raises(NoSuchCreditRun, match="available: r"):
        export_sft(credited, str(tmp_path), format="openai", credit="nope")
    with pytest.raises(ValueError, match="tokenizer"):
        export_sft(credited, str(tmp_path), format="openai", tokenizer="x")
    with pytest.raises(ValueError, match="unknown SFT format"):
        export_sft(credited, str(tmp_path), format="alpaca")


def test_shards_roll_and_stale_shards_go(sample_lake: tl.Lake, tmp_path: Path) -> None:
    tmp_path = tmp_path / "out"
    report = export_sft(sample_lake, str(tmp_path), format="openai", shard_mb=0.1)
    files = report.splits["train"].files
    assert len(files) > 2 and [f["path"] for f in files] == [
        f"train-{i:05d}.jsonl" for i in range(len(files))
    ]
    assert sum(len(rows(tmp_path / f["path"])) for f in files) == 40
    export_sft(sample_lake, str(tmp_path), format="openai")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json", "train-00000.jsonl"]


def test_memory_url(sample_lake: tl.Lake) -> None:
    import fsspec

    export_sft(sample_lake, "memory://sft-out", format="sharegpt", where="resolved")
    fs = fsspec.filesystem("memory")
    assert fs.exists("/sft-out/manifest.json") and fs.exists("/sft-out/train-00000.jsonl")


def test_cli(credited: tl.Lake, tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = [
        str(out),
        "--lake",
        credited.uri,
        "--format",
        "axolotl",
        "--credit",
        "r",
        "--mask",
        "rise",
        "--val-frac",
        "0.2",
        "--seed",
        "3",
    ]
    result = CliRunner().invoke(sft, [*args, "--output", "json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["format"] == "axolotl" and set(report["splits"]) == {"train", "val"}
    first = rows(out / "train-00000.jsonl")[0]
    assert set(first) == {"messages", "tools", "trajectory_id"}
    text = CliRunner().invoke(sft, args)
    assert text.exit_code == 0 and "axolotl export of snapshot" in text.output
    bad = CliRunner().invoke(sft, [*args, "--tokenizer", "x"])
    assert bad.exit_code == 2 and "tokenizer" in bad.output
    failed = CliRunner().invoke(sft, [*args, "--require-trained", "--output", "json"])
    assert isinstance(failed.exception, SftSelfCheckFailed)


@pytest.mark.long
def test_tokenized(credited: tl.Lake, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from trajlake.testing_tokenizer import tiny_chat_tokenizer

    tokenizer = tiny_chat_tokenizer(tmp_path / "tok")
    for name in ("a", "b"):
        report = export_sft(
            credited,
            str(tmp_path / name),
            format="tokenized",
            credit="r",
            tokenizer=str(tmp_path / "tok"),
        )
    assert report.splits["train"].samples > 0 and report.splits["train"].trained_tokens
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert manifest["tokenizer"] == str(tmp_path / "tok")
    assert manifest["chat_template_sha256"] and tokenizer.chat_template
    tokenization = manifest["tokenization"]
    assert tokenization["samples"] == report.splits["train"].samples
    assert tokenization["truncated_turns"] == 0 and tokenization["reference_fallbacks"] == 0
    table = pq.read_table(tmp_path / "a" / "train-00000.parquet")
    assert table.column_names == [
        "trajectory_id", "sample_index", "input_ids", "labels", "loss_weight", "attention_mask"
    ]  # fmt: skip
    first = table.slice(0, 1).to_pylist()[0]
    assert len(first["input_ids"]) == len(first["labels"]) == len(first["loss_weight"])
    trained = [w > 0 for w in first["loss_weight"]]
    assert any(trained) and not all(trained)
    assert all((lab == -100) == (not t) for lab, t in zip(first["labels"], trained, strict=True))
    a = (tmp_path / "a" / "train-00000.parquet").read_bytes()
    assert a == (tmp_path / "b" / "train-00000.parquet").read_bytes()
    files = manifest["splits"]["train"]["files"]
    assert files[0]["path"] == "train-00000.parquet" and files[0]["bytes"] == len(a)
