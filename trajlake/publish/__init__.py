"""Publishing to the Hugging Face Hub: a lake snapshot (a Parquet config per table) or an
export folder (SFT, RL groups) as a dataset repo with a card, provenance and sha256 per file.

`publish` builds the folder (`--dry-run DIR` keeps it and uploads nothing) and uploads it with
`huggingface_hub` (extra `hub`, imported only to upload). Building needs no extra.
"""

from trajlake.publish._export import read_export, write_export_folder
from trajlake.publish._folder import PublishError, PublishFolder
from trajlake.publish._publish import PublishReport, publish
from trajlake.publish._snapshot import write_snapshot_folder
from trajlake.publish._tables import DEFAULT_TABLES, TRAJECTORY_TABLES
from trajlake.publish._upload import LARGE_FOLDER_BYTES, LARGE_FOLDER_FILES, UploadResult, upload

__all__ = [
    "DEFAULT_TABLES",
    "LARGE_FOLDER_BYTES",
    "LARGE_FOLDER_FILES",
    "TRAJECTORY_TABLES",
    "PublishError",
    "PublishFolder",
    "PublishReport",
    "UploadResult",
    "publish",
    "read_export",
    "upload",
    "write_export_folder",
    "write_snapshot_folder",
]
