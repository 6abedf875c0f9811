"""The upload path against a local server that records the Hub API calls `huggingface_hub`
makes: a private repo by default, every file of the dry-run folder uploaded byte for byte,
a commit message naming the snapshot, stale shards deleted, visibility and token checked.

huggingface_hub uploads through Xet when `hf_xet` is installed; the fake Hub speaks the
LFS + NDJSON commit protocol only, so the `hf_home` fixture disables Xet (HF_HUB_DISABLE_XET).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.publish._fake_hub import FakeHub, Repo
from tests.publish.conftest import SynthLake
from trajlake.errors import MissingExtra
from trajlake.publish import PublishError, publish

pytest.importorskip("huggingface_hub")

# huggingface_hub's non-Xet LFS upload PUTs a file object as `data=`, which its HTTP client
# (httpx) deprecates; the suite turns warnings into errors, so this one is let through here.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Use 'content=<...>' to upload raw bytes/text content.:DeprecationWarning"
)

TOKEN = "hf_publish_test_token"


def _files(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }


@pytest.fixture
def hub(hf_home: Path) -> FakeHub:
    with FakeHub() as server:
        yield server


def test_upload_creates_a_private_repo_with_every_file_of_the_dry_run(
    synth: SynthLake, hub: FakeHub, tmp_path: Path
) -> None:
    report = publish(synth.lake, "me/rollouts", token=TOKEN, endpoint=hub.url)
    [create] = hub.calls_to(r"/api/repos/create")
    assert create.json() == {
        "name": "rollouts",
        "organization": "me",
        "visibility": "private",
        "type": "dataset",
    }
    assert create.headers["authorization"] == f"Bearer {TOKEN}"
    assert hub.repos["me/rollouts"].private and report.upload is not None
    assert report.upload.private and report.upload.method == "upload_folder"
    # The same snapshot written as a dry run: byte for byte what the Hub received.
    dry = tmp_path / "dry"
    publish(synth.lake, "me/rollouts", dry_run=str(dry))
    repo = hub.repos["me/rollouts"]
    assert {k: v for k, v in repo.files.items() if k != ".gitattributes"} == _files(dry)
    [commit] = repo.commits
    snapshot = synth.lake.snapshot().snapshot_id
    assert commit["summary"] == f"Publish trajlake lake snapshot {snapshot} (tags: gen-1)"
    assert report.upload.commit_oid == commit["oid"]
    # Parquet went through LFS (batch + PUT), the card and manifest inline.
    kinds = {op["value"]["path"]: op["key"] for op in commit["operations"]}
    assert {p for p, k in kinds.items() if k == "lfsFile"} == {p for p in kinds if ".parquet" in p}
    assert kinds["README.md"] == kinds["manifest.json"] == "file"
    assert len(hub.calls_to(r"/lfs-upload/", "PUT")) == len(report.folder.files) - 2
    assert hub.calls_to(r"/api/validate-yaml")


def test_a_later_publish_replaces_the_shards_of_the_earlier(
    synth: SynthLake, hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    publish(synth.lake, "me/rollouts", shard_mb=0.002)
    before = set(hub.repos["me/rollouts"].files)
    assert sum(p.startswith("data/messages/") for p in before) > 1
    where = f"task_id = '{synth.tasks[0]}'"
    report = publish(synth.lake, "me/rollouts", where=where, tables=["trajectories", "messages"])
    repo = hub.repos["me/rollouts"]
    assert set(repo.files) == {".gitattributes", *report.folder.files}
    deleted = {
        op["value"]["path"] for op in repo.commits[-1]["operations"] if op["key"] == "deletedFile"
    }
    assert deleted == before - set(repo.files)
    assert any(p.startswith("data/credits/") for p in deleted)


def test_an_existing_public_repo_is_not_published_to_as_private(
    synth: SynthLake, hub: FakeHub
) -> None:
    hub.repos["me/open"] = Repo(private=False)
    with pytest.raises(PublishError, match="exists and is public, but --private"):
        publish(synth.lake, "me/open", token=TOKEN, endpoint=hub.url)
    assert hub.repos["me/open"].commits == [] and not hub.calls_to(r"/preupload/")
    report = publish(
        synth.lake, "me/open", private=False, license="mit", token=TOKEN, endpoint=hub.url
    )
    assert report.upload is not None and not report.upload.private
    assert len(hub.repos["me/open"].commits) == 1


def test_without_a_token_nothing_is_sent(synth: SynthLake, hub: FakeHub, tmp_path: Path) -> None:
    with pytest.raises(PublishError, match="no Hugging Face token: pass --token, set HF_TOKEN"):
        publish(synth.lake, "me/rollouts", endpoint=hub.url)
    assert hub.calls == []
    # A dry run needs none.
    report = publish(synth.lake, "me/rollouts", dry_run=str(tmp_path / "dry"))
    assert report.dry_run and hub.calls == []


def test_without_huggingface_hub_the_upload_names_the_extra(
    synth: SynthLake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # import fails as if absent
    with pytest.raises(MissingExtra, match=r"pip install 'trajlake\[hub\]'"):
        publish(synth.lake, "me/rollouts", token=TOKEN)
    assert publish(synth.lake, "me/rollouts", dry_run=str(tmp_path / "dry")).dry_run
