"""A local HTTP server speaking the part of the Hugging Face Hub API that `huggingface_hub`
calls to create a dataset repo and upload a folder to it, recording every call.

Endpoints, as `huggingface_hub` 2.x calls them on its non-Xet path (`HF_HUB_DISABLE_XET`):
repo create and info, README YAML validation, the repo tree (for `delete_patterns`),
preupload (Parquet files go to LFS, other files inline, as the Hub's `.gitattributes` says),
the LFS batch API with a basic PUT transfer, and the NDJSON commit. Repos live in memory:
path → bytes per repo, so a test can compare what arrived with what was sent.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

GITATTRIBUTES = b"*.parquet filter=lfs diff=lfs merge=lfs -text\n"
_REPO = r"(?P<repo>[^/]+/[^/]+?)"


@dataclass
class Repo:
    """One dataset repo: visibility, files and commits."""

    private: bool
    files: dict[str, bytes] = field(default_factory=lambda: {".gitattributes": GITATTRIBUTES})
    commits: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Call:
    """One recorded request."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class FakeHub:
    """The server: `url` to point `HF_ENDPOINT` at, `calls` and `repos` to assert on."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.repos: dict[str, Repo] = {}
        self.lfs: dict[str, bytes] = {}
        self._lock = threading.Lock()
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                hub._handle(self, "GET")

            def do_POST(self) -> None:
                hub._handle(self, "POST")

            def do_PUT(self) -> None:
                hub._handle(self, "PUT")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> FakeHub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def calls_to(self, pattern: str, method: str | None = None) -> list[Call]:
        """Recorded calls whose path matches the regex `pattern`."""
        return [
            c
            for c in self.calls
            if re.search(pattern, c.path) and (method is None or c.method == method)
        ]

    # Dispatch --------------------------------------------------------------------------------

    def _handle(self, request: BaseHTTPRequestHandler, method: str) -> None:
        parts = urlsplit(request.path)
        length = int(request.headers.get("Content-Length") or 0)
        body = request.rfile.read(length) if length else b""
        call = Call(method, parts.path, parse_qs(parts.query), dict(request.headers), body)
        with self._lock:
            self.calls.append(call)
            status, payload = self._route(call)
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        request.send_response(status)
        request.send_header("Content-Type", "application/json")
        request.send_header("Content-Length", str(len(data)))
        if status == 404:
            request.send_header("X-Error-Code", "RepoNotFound")
        request.end_headers()
        request.wfile.write(data)

    def _route(self, call: Call) -> tuple[int, Any]:
        routes = [
            ("POST", r"/api/repos/create", self._create),
            ("POST", r"/api/validate-yaml", self._validate_yaml),
            ("GET", rf"/api/datasets/{_REPO}/tree/main", self._tree),
            ("POST", rf"/api/datasets/{_REPO}/preupload/main", self._preupload),
            ("POST", rf"/api/datasets/{_REPO}/commit/main", self._commit),
            ("GET", rf"/api/datasets/{_REPO}", self._info),
            ("POST", rf"/datasets/{_REPO}\.git/info/lfs/objects/batch", self._lfs_batch),
            ("PUT", r"/lfs-upload/(?P<oid>[0-9a-f]{64})", self._lfs_put),
        ]
        for method, pattern, handler in routes:
            match = re.fullmatch(pattern, call.path)
            if method == call.method and match:
                if "repo" in match.groupdict() and match["repo"] not in self.repos:
                    return 404, {"error": f"Repository Not Found: {match['repo']}"}
                return handler(call, **match.groupdict())
        return 404, {"error": f"no route {call.method} {call.path}"}

    # Endpoints -------------------------------------------------------------------------------

    def _create(self, call: Call) -> tuple[int, Any]:
        body = call.json()
        repo_id = f"{body['organization']}/{body['name']}"
        if body.get("type") != "dataset":
            return 400, {"error": "only dataset repos here"}
        if repo_id in self.repos:
            return 409, {"error": "You already created this dataset repo", "url": repo_id}
        private = body.get("visibility") == "private" or body.get("private") is True
        self.repos[repo_id] = Repo(private=private)
        return 200, {"url": f"{self.url}/datasets/{repo_id}", "name": repo_id}

    def _info(self, call: Call, repo: str) -> tuple[int, Any]:
        state = self.repos[repo]
        sha = state.commits[-1]["oid"] if state.commits else "0" * 40
        return 200, {"id": repo, "private": state.private, "sha": sha}

    def _validate_yaml(self, call: Call) -> tuple[int, Any]:
        content = call.json()["content"]
        front = content.split("---", 2)[1] if content.startswith("---") else ""
        try:
            data = yaml.safe_load(front)
        except yaml.YAMLError as e:
            return 400, {"errors": [{"message": str(e)}]}
        if not isinstance(data, dict):
            return 400, {"errors": [{"message": "metadata must be a mapping"}]}
        return 200, {"errors": [], "warnings": []}

    def _tree(self, call: Call, repo: str) -> tuple[int, Any]:
        files = self.repos[repo].files
        return 200, [
            {"type": "file", "path": path, "size": len(data), "oid": hashlib.sha1(data).hexdigest()}
            for path, data in sorted(files.items())
        ]

    def _preupload(self, call: Call, repo: str) -> tuple[int, Any]:
        files = call.json()["files"]
        return 200, {
            "files": [
                {
                    "path": f["path"],
                    "uploadMode": "lfs" if f["path"].endswith(".parquet") else "regular",
                    "shouldIgnore": False,
                }
                for f in files
            ]
        }

    def _lfs_batch(self, call: Call, repo: str) -> tuple[int, Any]:
        objects = []
        for obj in call.json()["objects"]:
            entry: dict[str, Any] = {"oid": obj["oid"], "size": obj["size"]}
            if obj["oid"] not in self.lfs:
                entry["actions"] = {"upload": {"href": f"{self.url}/lfs-upload/{obj['oid']}"}}
            objects.append(entry)
        return 200, {"transfer": "basic", "objects": objects}

    def _lfs_put(self, call: Call, oid: str) -> tuple[int, Any]:
        if hashlib.sha256(call.body).hexdigest() != oid:
            return 400, {"error": "content does not match its oid"}
        self.lfs[oid] = call.body
        return 200, b""

    def _commit(self, call: Call, repo: str) -> tuple[int, Any]:
        state = self.repos[repo]
        lines = [json.loads(line) for line in call.body.splitlines() if line.strip()]
        header, operations = lines[0], lines[1:]
        files = dict(state.files)
        for op in operations:
            value = op["value"]
            if op["key"] == "file":
                files[value["path"]] = base64.b64decode(value["content"])
            elif op["key"] == "lfsFile":
                if value["oid"] not in self.lfs:
                    return 400, {"error": f"LFS object {value['oid']} was never uploaded"}
                files[value["path"]] = self.lfs[value["oid"]]
            elif op["key"] == "deletedFile":
                files.pop(value["path"], None)
            else:
                return 400, {"error": f"unsupported operation {op['key']}"}
        oid = hashlib.sha1(call.body).hexdigest()
        state.files = files
        state.commits.append({"oid": oid, **header["value"], "operations": operations})
        url = f"{self.url}/datasets/{repo}/commit/{oid}"
        return 200, {"commitUrl": url, "commitOid": oid, "success": True}
