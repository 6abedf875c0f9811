"""Inference: the `Reranker` (score, rank and pick the best of N candidates with a saved value
model) and the HTTP reranking server.

A package of its own, above the value models, so that serving a model never imports the code
that trains one: it loads through `trajlake.value.scorer` and imports neither
`trajlake.value.train` nor credit (import-linter checks it).
"""

from trajlake.serve.reranker import (
    Ranked,
    Reranker,
    SparseReranker,
    hybrid_select,
    load_reranker,
)
from trajlake.serve.server import (
    Scorer,
    ServerLimits,
    create_app,
    run_server,
    serve_in_background,
)

__all__ = [
    "Ranked",
    "Reranker",
    "Scorer",
    "ServerLimits",
    "SparseReranker",
    "create_app",
    "hybrid_select",
    "load_reranker",
    "run_server",
    "serve_in_background",
]
