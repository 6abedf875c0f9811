"""Inference loads no training code: `import trajlake.serve` (the Reranker and the HTTP server)
must not import the trainer, the dataset builders or credit, in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys

TRAINING = (
    "trajlake.value.train",
    "trajlake.value._train_neural",
    "trajlake.value._train_inputs",
    "trajlake.value.trainer",
    "trajlake.value.dataset",
    "trajlake.credit",
)


def _modules_after(statement: str) -> set[str]:
    code = f"import json, sys\n{statement}\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout))


def test_serve_imports_no_training_module() -> None:
    loaded = _modules_after("import trajlake.serve\nfrom trajlake.serve import Reranker")
    assert "trajlake.serve.reranker" in loaded
    assert not [m for m in loaded if m.startswith(TRAINING)]
    assert "torch" not in loaded


def test_value_names_load_on_first_use() -> None:
    loaded = _modules_after("import trajlake.value as v\nv.auroc")
    assert "trajlake.value.metrics" in loaded
    assert "trajlake.value.train" not in loaded
    loaded = _modules_after("from trajlake.value import train_value_model")
    assert "trajlake.value.train" in loaded


def test_every_exported_name_resolves() -> None:
    import trajlake.value as value

    assert sorted(value._LAZY) == sorted(value.__all__)
    for name in value.__all__:
        assert getattr(value, name) is not None
