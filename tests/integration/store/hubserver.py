"""A real HTTP server on 127.0.0.1 that speaks the slice of the Hugging Face hub API that
huggingface_hub 2.4 uses to download and to upload a model (point it there with HF_ENDPOINT):

  GET  /api/models/{repo}[/revision/{rev}]      model info with siblings (?blobs=true)
  GET  /api/models/{repo}/tree/{rev}            recursive file listing
  HEAD /{repo}/resolve/{rev}/{file}             X-Repo-Commit, ETag, Content-Length, X-Linked-*
  GET  /{repo}/resolve/{rev}/{file}             body, with Range support
  GET  /api/whoami-v2                           the token's user (401 for any other token)
  POST /api/repos/create                        a new empty repo (409 if it exists)
  POST /api/validate-yaml                       README metadata: always fine
  POST /api/models/{repo}/preupload/{rev}       upload mode per file (weights: lfs) + its oid
  POST /{repo}.git/info/lfs/objects/batch       upload actions for LFS objects not stored yet
  PUT  /lfs/{oid}                               an LFS object's bytes (checked against oid)
  POST /api/models/{repo}/commit/{rev}          NDJSON commit: files, LFS files by oid

Fault injection: gated repos (public metadata, 401/403 on file downloads, like the hub),
drop a connection mid-file once, hold a transfer mid-file until released (for Ctrl-C tests),
serve a file with one byte flipped.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit


@dataclass
class FixtureRepo:
    files: dict[str, bytes]
    commit: str = "0123456789abcdef0123456789abcdef01234567"
    # 401 or 403: a gated repo, as the hub serves one: its metadata is public (model info
    # and tree say "gated": "manual"), only file downloads (/resolve/) are refused.
    gated: int | None = None
    private: bool = False

    @classmethod
    def from_dir(
        cls, path: Path, extra: dict[str, bytes] | None = None, gated: int | None = None
    ) -> FixtureRepo:
        files = {p.name: p.read_bytes() for p in sorted(Path(path).iterdir()) if p.is_file()}
        return cls(files={**files, **(extra or {})}, gated=gated)


def etag(name: str, data: bytes) -> str:
    """The hub's id of a file: LFS files (weights) by sha256, regular git files by their git
    blob id (sha1 of `blob <size>\\0` + content, as `git hash-object`)."""
    if name.endswith(".safetensors"):
        return hashlib.sha256(data).hexdigest()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class HubServer:
    repos: dict[str, FixtureRepo] = field(default_factory=dict)
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)  # method, path, Range
    drop_once: set[str] = field(default_factory=set)  # file names: cut the first GET halfway
    hold: set[str] = field(default_factory=set)  # file names: pause halfway until released
    corrupt: set[str] = field(default_factory=set)  # file names: served with one byte flipped
    half_sent: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    token: str = "hf_fixture_token"  # the one token whoami and uploads accept
    user: str = "tester"
    lfs: dict[str, bytes] = field(default_factory=dict)  # uploaded LFS objects, by sha256
    hold_uploads: set[str] = field(default_factory=set)  # oids: a PUT of one never completes
    commits: list[str] = field(default_factory=list)  # repo ids, one per commit received

    def __post_init__(self) -> None:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> HubServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self._httpd.shutdown()
        self._httpd.server_close()


def _handler(hub: HubServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:  # keep test output clean
            pass

        def do_HEAD(self) -> None:
            self._route(head=True)

        def do_GET(self) -> None:
            self._route(head=False)

        def do_POST(self) -> None:
            self._upload_route()

        def do_PUT(self) -> None:
            self._upload_route()

        def _upload_route(self) -> None:
            path = unquote(urlsplit(self.path).path)
            hub.requests.append((self.command, path, None))
            body = self._body()
            if path == "/api/validate-yaml":
                self._json({"errors": [], "warnings": []})
            elif path.startswith("/lfs/"):  # a presigned storage URL, as the hub hands out
                self._lfs_put(path.removeprefix("/lfs/"), body)
            elif not self._authorized():
                self._error(401, "Unauthorized", "Invalid credentials in Authorization header")
            elif path == "/api/repos/create":
                self._create_repo(json.loads(body))
            elif path.endswith(".git/info/lfs/objects/batch"):
                self._lfs_batch(json.loads(body))
            elif "/preupload/" in path or "/commit/" in path:
                rest = path.removeprefix("/api/models/")
                repo_id, kind = "/".join(rest.split("/")[:2]), rest.split("/")[2]
                repo = self._repo(repo_id, None)
                if repo is not None and kind == "preupload":
                    self._preupload(repo, json.loads(body))
                elif repo is not None:
                    self._commit(repo_id, repo, body)
            else:
                self._error(404, "NotFound", "not found")

        def _body(self) -> bytes:
            """The request body, sized or chunked (httpx streams an LFS file chunked)."""
            if self.headers.get("Transfer-Encoding", "").lower() != "chunked":
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))
            parts = []
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                parts.append(self.rfile.read(size))
                self.rfile.readline()
            self.rfile.readline()  # the blank line after the last (empty) chunk
            return b"".join(parts)

        def _authorized(self) -> bool:
            return self.headers.get("Authorization") == f"Bearer {hub.token}"

        def _route(self, head: bool) -> None:
            path = unquote(urlsplit(self.path).path)
            hub.requests.append((self.command, path, self.headers.get("Range")))
            if path == "/api/whoami-v2":
                if self._authorized():
                    self._json({"type": "user", "name": hub.user, "orgs": []})
                else:
                    self._error(401, "Unauthorized", "Invalid credentials in Authorization header")
            elif path.startswith("/api/models/"):
                self._api(path[len("/api/models/") :])
            elif "/resolve/" in path:
                repo_id, _, rest = path.lstrip("/").partition("/resolve/")
                rev, _, name = rest.partition("/")
                self._file(repo_id, rev, name, head)
            else:
                self._error(404, "RepoNotFound", "not found")

        def _repo(self, repo_id: str, rev: str | None, files: bool = False) -> FixtureRepo | None:
            repo = hub.repos.get(repo_id)
            if repo is None:
                self._error(404, "RepoNotFound", f"Repository {repo_id} not found")
            elif repo.gated and files:
                self._error(repo.gated, "GatedRepo", f"Access to {repo_id} is restricted")
            elif rev not in (None, "main", repo.commit):
                self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
            else:
                return repo
            return None

        def _api(self, rest: str) -> None:
            parts = rest.split("/")
            repo_id, tail = "/".join(parts[:2]), parts[2:]
            rev = tail[1] if len(tail) >= 2 else None
            repo = self._repo(repo_id, rev)
            if repo is None:
                return
            entries = [(n, len(d), etag(n, d)) for n, d in repo.files.items()]
            if tail and tail[0] == "tree":
                body = [{"type": "file", "path": n, "size": s, "oid": e} | _lfs(n, s, e, "oid")
                        for n, s, e in entries]  # fmt: skip
                self._json(body)
                return
            siblings = [{"rfilename": n, "size": s, "blobId": e} | _lfs(n, s, e, "sha256")
                        for n, s, e in entries]  # fmt: skip
            gated = "manual" if repo.gated else False
            self._json({"id": repo_id, "modelId": repo_id, "sha": repo.commit,
                        "private": repo.private, "gated": gated, "siblings": siblings})  # fmt: skip

        def _create_repo(self, body: dict) -> None:
            repo_id = f"{body.get('organization') or hub.user}/{body['name']}"
            if repo_id in hub.repos:
                self._error(409, "RepoExists", "You already created this model repo")
                return
            private = body.get("visibility") == "private" or bool(body.get("private"))
            hub.repos[repo_id] = FixtureRepo(files={}, private=private)
            self._json({"url": f"{hub.url}/{repo_id}", "name": repo_id})

        def _preupload(self, repo: FixtureRepo, body: dict) -> None:
            files = []
            for f in body["files"]:
                mode = "lfs" if f["path"].endswith(".safetensors") else "regular"
                data = repo.files.get(f["path"])
                oid = etag(f["path"], data) if data is not None else None
                files.append({"path": f["path"], "uploadMode": mode, "shouldIgnore": False,
                              "oid": oid})  # fmt: skip
            self._json({"files": files})

        def _lfs_batch(self, body: dict) -> None:
            objects = []
            for obj in body["objects"]:
                entry = {"oid": obj["oid"], "size": obj["size"]}
                if obj["oid"] not in hub.lfs:  # stored already: nothing to upload (resume)
                    entry["actions"] = {"upload": {"href": f"{hub.url}/lfs/{obj['oid']}"}}
                objects.append(entry)
            self._json({"transfer": "basic", "objects": objects})

        def _lfs_put(self, oid: str, data: bytes) -> None:
            if oid in hub.hold_uploads:  # an upload that never ends (the pusher gets killed)
                hub.half_sent.set()
                hub.release.wait(60)
                self.close_connection = True
                return
            if hashlib.sha256(data).hexdigest() != oid:
                self._error(400, "BadOid", "content does not match its oid")
                return
            hub.lfs[oid] = data
            self._json({})

        def _commit(self, repo_id: str, repo: FixtureRepo, body: bytes) -> None:
            changes = {}
            for line in body.splitlines():
                item = json.loads(line)
                value = item["value"]
                if item["key"] == "file":
                    changes[value["path"]] = base64.b64decode(value["content"])
                elif item["key"] == "lfsFile":
                    if value["oid"] not in hub.lfs:
                        self._error(400, "LfsMissing", f"LFS object {value['oid']} not uploaded")
                        return
                    changes[value["path"]] = hub.lfs[value["oid"]]
            repo.files.update(changes)
            repo.commit = hashlib.sha1(repr(sorted(repo.files.items())).encode()).hexdigest()
            hub.commits.append(repo_id)
            self._json({"commitUrl": f"{hub.url}/{repo_id}/commit/{repo.commit}",
                        "commitOid": repo.commit, "pullRequestUrl": None})  # fmt: skip

        def _file(self, repo_id: str, rev: str, name: str, head: bool) -> None:
            repo = self._repo(repo_id, rev, files=True)
            if repo is None:
                return
            if name not in repo.files:
                self._error(404, "EntryNotFound", f"{name} not found")
                return
            data = repo.files[name]
            start = _range_start(self.headers.get("Range"))
            # A bad mirror or a flipped bit in transit: right size and headers, wrong bytes.
            sent = _flip_middle_byte(data) if name in hub.corrupt else data
            body = sent[start:]
            self.send_response(206 if start else 200)
            self.send_header("X-Repo-Commit", repo.commit)
            self.send_header("ETag", f'"{etag(name, data)}"')
            if name.endswith(".safetensors"):  # the hub describes LFS files with these
                self.send_header("X-Linked-Etag", f'"{etag(name, data)}"')
                self.send_header("X-Linked-Size", str(len(data)))
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Content-Length", str(len(body)))
            if start:
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            self.end_headers()
            if not head:
                self._send_body(name, body, start)

        def _send_body(self, name: str, body: bytes, start: int) -> None:
            half = len(body) // 2
            if name in hub.drop_once and start == 0:
                hub.drop_once.discard(name)
                self.wfile.write(body[:half])
                self.wfile.flush()
                self.close_connection = True  # the client sees a truncated body
                return
            if name in hub.hold and start == 0:
                self.wfile.write(body[:half])
                self.wfile.flush()
                hub.half_sent.set()
                hub.release.wait(60)
                self.close_connection = True
                return
            self.wfile.write(body)

        def _json(self, obj: object) -> None:
            raw = json.dumps(obj).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(raw)

        def _error(self, status: int, code: str, message: str) -> None:
            raw = json.dumps({"error": message}).encode()
            self.send_response(status)
            self.send_header("X-Error-Code", code)
            self.send_header("X-Error-Message", message)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(raw)

    return Handler


def _lfs(name: str, size: int, sha: str, key: str) -> dict[str, object]:
    """The hub's LFS block for weights (tree listings say "oid", model info "sha256")."""
    if not name.endswith(".safetensors"):
        return {}
    return {"lfs": {key: sha, "size": size, "pointerSize": 134}}


def _flip_middle_byte(data: bytes) -> bytes:
    i = len(data) // 2
    return data[:i] + bytes([data[i] ^ 0x01]) + data[i + 1 :]


def _range_start(header: str | None) -> int:
    if not header or not header.startswith("bytes="):
        return 0
    return int(header[len("bytes=") :].split("-")[0] or 0)
