"""Model names never escape the lake: a recipe `name` (in the file or `--set name=…`) is checked
before anything is trained or written, model ids are checked where they are made, and
`--out` cannot put a model among the lake's tables or log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import trajlake as tl
from trajlake.cli.main import cli
from trajlake.errors import OutputInsideLake, UnsafeName
from trajlake.synth import SynthConfig, generate
from trajlake.value.recipe import RecipeError, load_recipe, parse_recipe
from trajlake.value.train import TrainingData, default_model_dir, model_id_for, train_value_model

MODELS = Path(__file__).resolve().parents[2] / "models"
BASELINE = MODELS / "baseline.yaml"
BAD_NAMES = ["../../../x", "a/b", "/abs", "..", ".hidden", "x\n", "a b", "x" * 129, ""]


def _listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.fixture(scope="module")
def labelled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A synthetic lake with outcomes (20 tasks × 4 rollouts), three folders deep."""
    root = tmp_path_factory.mktemp("names")
    lake = tl.open_lake(root / "a" / "b" / "lake", create=True)
    lake.write(generate(SynthConfig(seed=1, n_tasks=20, rollouts_per_task=4)).trajectories)
    return root


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_recipe_names_are_refused_with_the_field(name: str) -> None:
    with pytest.raises(RecipeError, match=r"name: .*invalid recipe name"):
        load_recipe(BASELINE, overrides={"name": name})
    with pytest.raises(RecipeError, match="name"):
        parse_recipe({"name": name, "kind": "baseline"})


def test_set_name_cannot_write_outside_the_lake(labelled: Path) -> None:
    lake_dir = labelled / "a" / "b" / "lake"
    before = _listing(labelled)
    args = ["train", "value", "--lake", str(lake_dir), "--config", str(BASELINE)]
    result = CliRunner().invoke(cli, [*args, "--set", "name=../../../escaped"])
    assert result.exit_code == 1
    assert "invalid recipe name '../../../escaped'" in result.output
    assert _listing(labelled) == before
    assert tl.open_lake(lake_dir).sql("select count(*) from models").rows() == [(0,)]


def test_a_model_id_is_checked_where_it_is_made() -> None:
    # A recipe changed without validation (model_copy) still cannot make a path-like id.
    recipe = parse_recipe({"name": "ok", "kind": "baseline"}).model_copy(update={"name": "../x"})
    data = TrainingData(snapshot_id=1, tags=[], where=None, splits={})
    with pytest.raises(UnsafeName, match="model id"):
        model_id_for(recipe, data)


def test_default_model_dir_stays_in_models(labelled: Path) -> None:
    lake = tl.open_lake(labelled / "a" / "b" / "lake")
    assert default_model_dir(lake, "ok-s1-abc") == Path(lake.uri) / "models" / "ok-s1-abc"
    with pytest.raises(UnsafeName):
        default_model_dir(lake, "../ok-s1-abc")


@pytest.mark.parametrize("inside", ["", "tables/models", "_trajlake", "tables/x/_delta_log"])
def test_out_inside_the_lake_is_refused(labelled: Path, inside: str) -> None:
    lake_dir = labelled / "a" / "b" / "lake"
    before = _listing(lake_dir)
    out = lake_dir / inside if inside else lake_dir
    args = ["train", "value", "--lake", str(lake_dir), "--config", str(BASELINE)]
    result = CliRunner().invoke(cli, [*args, "--out", str(out)])
    assert result.exit_code == 1
    assert "is inside the lake" in result.output
    assert _listing(lake_dir) == before
    lake = tl.open_lake(lake_dir)
    with pytest.raises(OutputInsideLake):
        train_value_model(lake, load_recipe(BASELINE), out=out)


def test_good_names_train_into_models(labelled: Path) -> None:
    lake_dir = labelled / "a" / "b" / "lake"
    args = ["train", "value", "--lake", str(lake_dir), "--config", str(BASELINE), "-o", "json"]
    result = CliRunner().invoke(cli, [*args, "--set", "name=base-line.v2_x", "--no-register"])
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout)
    assert info["model_id"].startswith("base-line.v2_x-s1-")
    assert Path(info["directory"]).parent == lake_dir.resolve() / "models"
    # Its evaluation report may go beside it, not among the lake's tables or log.
    before = _listing(lake_dir / "tables")
    model = info["directory"]
    inside = str(lake_dir / "tables" / "eval")
    result = CliRunner().invoke(
        cli, ["eval", "value", model, "--lake", str(lake_dir), "--out", inside]
    )
    assert result.exit_code == 1 and "is inside the lake" in result.output
    assert _listing(lake_dir / "tables") == before
    result = CliRunner().invoke(cli, ["eval", "value", model, "--lake", str(lake_dir)])
    assert result.exit_code == 0, result.output
    assert any(p.name.startswith("eval-s") for p in Path(model).iterdir())
