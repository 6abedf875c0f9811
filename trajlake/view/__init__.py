"""`trajlake view`: a local, read-only web viewer over a lake at a snapshot, and static bundles.

The server (`run_view`, `view_in_background`) answers the page's JSON API from `ViewData`,
which reads the lake through read-only query sessions pinned to a snapshot; `write_bundle`
stores the same payloads as script files beside a copy of the page, so a selection opens from
disk without a server. aiohttp (extra `view`) is needed only to serve.
"""

from trajlake.view._app import (
    SECURITY_HEADERS,
    STATIC_DIR,
    check_bind,
    create_app,
    run_view,
    view_in_background,
)
from trajlake.view._bundle import BundleReport, write_bundle
from trajlake.view._edits import edits_of_call
from trajlake.view._params import ViewRequestError
from trajlake.view._service import ENDPOINTS, ViewData

__all__ = [
    "ENDPOINTS",
    "SECURITY_HEADERS",
    "STATIC_DIR",
    "BundleReport",
    "ViewData",
    "ViewRequestError",
    "check_bind",
    "create_app",
    "edits_of_call",
    "run_view",
    "view_in_background",
    "write_bundle",
]
