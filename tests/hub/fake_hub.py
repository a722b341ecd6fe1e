"""A small Hugging Face Hub for tests: the endpoints huggingface_hub's upload and download use.

Standard library only (``http.server`` on 127.0.0.1, a free port, one daemon thread per request).
The real ``huggingface_hub`` client talks to it over HTTP when pointed at ``hub.url`` (``HF_ENDPOINT``
or ``endpoint=``), so files really travel. Shapes follow huggingface_hub 2.x's own code
(``hf_api.py``, ``_commit_api.py``, ``lfs.py``, ``file_download.py``, ``_snapshot_download.py``):

    GET  /api/whoami-v2                                         who the token belongs to
    POST /api/repos/create                                      {name, organization, type, visibility}
    POST /api/{type}s/{repo}/branch/{branch}                    create a branch from main
    GET  /api/{type}s/{repo}[/revision/{rev}]                   repo info: sha, siblings, private
    GET  /api/{type}s/{repo}/tree/{rev}[/{path}]                file listing (recursive)
    POST /api/{type}s/{repo}/paths-info/{rev}                   info on given paths
    POST /api/{type}s/{repo}/preupload/{rev}                    upload mode per file (regular / lfs)
    POST /{prefix}{repo}.git/info/lfs/objects/batch             LFS batch: where to PUT each object
    PUT  /lfs-objects/{oid}                                     the LFS object itself (checked by sha256)
    POST /api/validate-yaml                                     README front matter check (model-index fields)
    POST /api/{type}s/{repo}/commit/{rev}                       NDJSON commit (header, file, lfsFile, deleted*)
    HEAD|GET /{prefix}{repo}/resolve/{rev}/{path}               file download with X-Repo-Commit / ETag

Writes need ``Authorization: Bearer <token>`` with a known token; a wrong token gets 401 on any
request; private repos are invisible without one. ``fail(kind, status, times)`` makes the next
requests of one kind ("commit", "lfs-upload", "preupload", "lfs-batch", "create") fail, to test
interrupted pushes (``after=N`` lets N of them through first). ``GET /api/agent-harnesses`` (a daily telemetry registry the client fetches and
tolerates failing) is answered 404. Everything received is kept in memory; ``requests`` logs each request with
its headers so tests can check what the client sent.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FAKE_TOKEN = "hf_FakeTokenForXmcbenchTests0123456789"  # the token the fake Hub knows (user "tester")


LFS_SUFFIXES = (".safetensors", ".bin", ".npy", ".npz", ".pt", ".h5", ".onnx")
TYPES = {"models": "model", "datasets": "dataset", "spaces": "space"}
PREFIX = {"model": "", "dataset": "datasets/", "space": "spaces/"}


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob " + str(len(data)).encode() + b"\0" + data).hexdigest()


@dataclass
class Stored:
    data: bytes
    lfs: bool

    @property
    def blob_id(self) -> str:
        return git_blob_sha1(self.data)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


@dataclass
class Repo:
    repo_type: str
    repo_id: str
    private: bool
    branches: dict[str, str] = field(default_factory=dict)  # name -> commit sha
    commits: dict[str, dict[str, Stored]] = field(default_factory=dict)  # sha -> full tree
    messages: dict[str, str] = field(default_factory=dict)

    def resolve(self, rev: str) -> str | None:
        rev = urllib.parse.unquote(rev)
        if rev in self.branches:
            return self.branches[rev]
        return rev if rev in self.commits else None


class _HttpError(Exception):
    def __init__(self, status: int, message: str, code: str | None = None, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.code, self.headers = status, message, code, dict(headers or {})


class FakeHub:
    """``with FakeHub(tokens={"hf_x": "alice"}) as hub: ... hub.url``"""

    def __init__(self, tokens: dict[str, str] | None = None):
        self.tokens = dict(tokens or {})
        self.repos: dict[tuple[str, str], Repo] = {}
        self.lfs: dict[str, bytes] = {}
        self.requests: list[dict] = []
        self.validated: list[str] = []  # README contents checked by /api/validate-yaml
        self._faults: dict[str, list[int]] = {}
        self._fault_headers: dict[str, dict[str, str]] = {}
        self._lock = threading.RLock()
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = 30

            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                hub._handle(self, "GET")

            def do_HEAD(self) -> None:  # noqa: N802
                hub._handle(self, "HEAD")

            def do_POST(self) -> None:  # noqa: N802
                hub._handle(self, "POST")

            def do_PUT(self) -> None:  # noqa: N802
                hub._handle(self, "PUT")

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread: threading.Thread | None = None

    # -- life ----------------------------------------------------------------------------------
    def start(self) -> FakeHub:
        # a short poll interval: stop() waits for the serving loop to notice, 0.5 s by default, per test
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> FakeHub:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- test helpers --------------------------------------------------------------------------
    def fail(self, kind: str, status: int = 500, times: int = 1, after: int = 0, headers: dict | None = None) -> None:
        """Let ``after`` requests of ``kind`` through, then answer the next ``times`` with ``status``
        (and ``headers``, e.g. ``{"Retry-After": "9"}``).

        ``after=1`` on "lfs-upload" interrupts a push mid-upload: one object arrived, the rest did not.
        """
        with self._lock:
            self._faults.setdefault(kind, []).extend([0] * after + [status] * times)
            self._fault_headers[kind] = dict(headers or {})

    def files(self, repo_id: str, repo_type: str = "model", revision: str = "main") -> dict[str, bytes]:
        repo = self.repos[(repo_type, repo_id)]
        return {p: s.data for p, s in repo.commits[repo.resolve(revision)].items()}

    def commit_count(self, repo_id: str, repo_type: str = "model") -> int:
        return len(self.repos[(repo_type, repo_id)].commits) - 1  # the empty first commit is not a push

    def add_repo(self, repo_id: str, files: dict[str, bytes], repo_type: str = "model", private: bool = False) -> str:
        """Publish ``files`` directly (a "released checkpoint" for download tests); returns the commit sha."""
        with self._lock:
            repo = self._create(repo_type, repo_id, private)
            tree = {p: Stored(d, p.endswith(LFS_SUFFIXES)) for p, d in files.items()}
            return self._commit(repo, "main", tree, "upload")

    # -- plumbing ------------------------------------------------------------------------------
    def _handle(self, h: BaseHTTPRequestHandler, method: str) -> None:
        parsed = urllib.parse.urlsplit(h.path)
        path, query = parsed.path, urllib.parse.parse_qs(parsed.query)
        body = _read_body(h) if method in ("POST", "PUT") else b""
        self.requests.append(
            {"method": method, "path": path, "body": body, "headers": {k.lower(): v for k, v in h.headers.items()}}
        )
        try:
            status, headers, payload = self._route(h, method, path, query, body)
        except _HttpError as err:
            status = err.status
            headers = {**err.headers, "X-Error-Message": err.message, "Content-Type": "application/json"}
            if err.code:
                headers["X-Error-Code"] = err.code
            payload = json.dumps({"error": err.message}).encode()
        h.send_response(status)
        if isinstance(payload, (dict, list)):
            payload = json.dumps(payload).encode()
            headers.setdefault("Content-Type", "application/json")
        for key, value in headers.items():
            h.send_header(key, value)
        if "Content-Length" not in headers:
            h.send_header("Content-Length", str(len(payload)))
        h.end_headers()
        if method != "HEAD":
            h.wfile.write(payload)

    def _fault(self, kind: str) -> None:
        with self._lock:
            pending = self._faults.get(kind)
            if pending:
                status = pending.pop(0)
                if status:  # 0: a request let through before the failure
                    raise _HttpError(status, f"simulated failure of {kind}", headers=self._fault_headers.get(kind))

    def _user(self, h: BaseHTTPRequestHandler, required: bool) -> str | None:
        auth = h.headers.get("Authorization")
        if auth is None:
            if required:
                raise _HttpError(401, "You must be authenticated to access this endpoint.")
            return None
        token = auth.removeprefix("Bearer ").strip()
        if token not in self.tokens:
            raise _HttpError(401, "Invalid credentials in Authorization header")
        return self.tokens[token]

    def _repo(self, h, repo_type: str, repo_id: str, write: bool = False) -> Repo:
        user = self._user(h, required=write)
        repo = self.repos.get((repo_type, repo_id))
        if repo is None or (repo.private and user is None):
            raise _HttpError(404, "Repository not found", "RepoNotFound")
        return repo

    def _create(self, repo_type: str, repo_id: str, private: bool) -> Repo:
        repo = Repo(repo_type, repo_id, private)
        self.repos[(repo_type, repo_id)] = repo
        self._commit(repo, "main", {}, "initial commit")
        return repo

    def _commit(self, repo: Repo, branch: str, tree: dict[str, Stored], message: str) -> str:
        sha = hashlib.sha1(f"{repo.repo_id}{len(repo.commits)}{time.time_ns()}{message}".encode()).hexdigest()
        repo.commits[sha] = tree
        repo.messages[sha] = message
        repo.branches[branch] = sha
        return sha

    def _entry(self, path: str, stored: Stored) -> dict:
        entry = {"type": "file", "oid": stored.blob_id, "size": len(stored.data), "path": path}
        if stored.lfs:
            entry["lfs"] = {"oid": stored.sha256, "size": len(stored.data), "pointerSize": 134}
        return entry

    def _tree(self, tree: dict[str, Stored], under: str, recursive: bool) -> list[dict]:
        out, dirs = [], set()
        prefix = under.strip("/") + "/" if under.strip("/") else ""
        for path in sorted(tree):
            if not path.startswith(prefix):
                continue
            rest = path[len(prefix) :]
            parts = rest.split("/")
            for i in range(1, len(parts)):
                if recursive or i == 1:
                    dirs.add(prefix + "/".join(parts[:i]))
            if recursive or len(parts) == 1:
                out.append(self._entry(path, tree[path]))
        out += [
            {"type": "directory", "oid": hashlib.sha1(d.encode()).hexdigest(), "size": 0, "path": d}
            for d in sorted(dirs)
        ]
        return out

    # -- routes --------------------------------------------------------------------------------
    def _route(self, h, method: str, path: str, query: dict, body: bytes):
        with self._lock:
            if path == "/api/whoami-v2":
                user = self._user(h, required=True)
                return (
                    200,
                    {},
                    {
                        "type": "user",
                        "name": user,
                        "fullname": user,
                        "orgs": [],
                        "auth": {"type": "access_token", "accessToken": {"displayName": "test", "role": "write"}},
                    },
                )
            if path == "/api/validate-yaml" and method == "POST":
                return self._validate_yaml(json.loads(body or b"{}"))
            if path == "/api/repos/create" and method == "POST":
                self._fault("create")
                self._user(h, required=True)
                data = json.loads(body or b"{}")
                repo_type = data.get("type") or "model"
                repo_id = f"{data['organization']}/{data['name']}" if data.get("organization") else data["name"]
                url = f"{self.url}/{PREFIX[repo_type]}{repo_id}"
                if (repo_type, repo_id) in self.repos:
                    return 409, {}, {"error": "You already created this repo", "url": url}
                private = data.get("visibility") == "private" or bool(data.get("private"))
                self._create(repo_type, repo_id, private)
                return 200, {}, {"url": url}
            if path.startswith("/lfs-objects/") and method == "PUT":
                self._fault("lfs-upload")
                oid = path.rsplit("/", 1)[1]
                if hashlib.sha256(body).hexdigest() != oid:
                    raise _HttpError(400, "content does not match its sha256")
                self.lfs[oid] = body
                return 200, {}, b""
            m = re.match(r"^/(datasets/|spaces/)?([^/]+/[^/]+)\.git/info/lfs/objects/batch$", path)
            if m and method == "POST":
                self._fault("lfs-batch")
                repo_type = {"datasets/": "dataset", "spaces/": "space"}.get(m.group(1) or "", "model")
                self._repo(h, repo_type, m.group(2), write=True)
                objects = []
                for obj in json.loads(body)["objects"]:
                    item = {"oid": obj["oid"], "size": obj["size"]}
                    if obj["oid"] not in self.lfs:  # already stored: no action, the client skips it
                        item["actions"] = {"upload": {"href": f"{self.url}/lfs-objects/{obj['oid']}"}}
                    objects.append(item)
                return 200, {"Content-Type": "application/vnd.git-lfs+json"}, {"transfer": "basic", "objects": objects}
            m = re.match(r"^/api/(models|datasets|spaces)/([^/]+/[^/]+)(?:/(.*))?$", path)
            if m:
                return self._api(h, method, TYPES[m.group(1)], m.group(2), m.group(3) or "", query, body)
            m = re.match(r"^/(datasets/|spaces/)?([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path)
            if m and method in ("GET", "HEAD"):
                repo_type = {"datasets/": "dataset", "spaces/": "space"}.get(m.group(1) or "", "model")
                return self._resolve(h, repo_type, m.group(2), m.group(3), urllib.parse.unquote(m.group(4)))
            raise _HttpError(404, f"no route for {method} {path}")

    def _validate_yaml(self, data: dict):
        """What the Hub checks in a README's front matter before a commit that adds it."""
        import yaml

        content = data.get("content", "")
        m = re.match(r"^---\n(.*?)\n---", content, re.S)
        errors = []
        try:
            meta = yaml.safe_load(m.group(1)) if m else {}
        except yaml.YAMLError as exc:
            errors.append({"message": f"invalid YAML: {exc}"})
            meta = {}
        for entry in (meta or {}).get("model-index") or []:
            for res in entry.get("results") or []:
                if not res.get("task", {}).get("type"):
                    errors.append({"message": "model-index: task.type is required"})
                if not (res.get("dataset", {}).get("type") and res.get("dataset", {}).get("name")):
                    errors.append({"message": "model-index: dataset.type and dataset.name are required"})
                for metric in res.get("metrics") or []:
                    if "type" not in metric or "value" not in metric:
                        errors.append({"message": "model-index: metrics need type and value"})
        self.validated.append(content)
        return (400 if errors else 200), {}, {"errors": errors, "warnings": []}

    def _api(self, h, method, repo_type, repo_id, rest, query, body):
        if rest.startswith("branch/") and method == "POST":
            repo = self._repo(h, repo_type, repo_id, write=True)
            branch = urllib.parse.unquote(rest.removeprefix("branch/"))
            if branch in repo.branches:
                raise _HttpError(409, f"Reference already exists: refs/heads/{branch}")
            repo.branches[branch] = repo.branches["main"]
            return 200, {}, {}
        if rest.startswith("preupload/") and method == "POST":
            self._fault("preupload")
            repo = self._repo(h, repo_type, repo_id, write=True)
            head = repo.resolve(rest.removeprefix("preupload/")) or repo.branches["main"]
            tree = repo.commits[head]
            files = []
            for f in json.loads(body)["files"]:
                lfs = f["path"].endswith(LFS_SUFFIXES) or f["size"] >= 10 * 2**20
                existing = tree.get(f["path"])
                oid = None if existing is None else (existing.sha256 if existing.lfs else existing.blob_id)
                files.append(
                    {"path": f["path"], "uploadMode": "lfs" if lfs else "regular", "shouldIgnore": False, "oid": oid}
                )
            return 200, {}, {"files": files, "commitOid": head}
        if rest.startswith("commit/") and method == "POST":
            self._fault("commit")
            repo = self._repo(h, repo_type, repo_id, write=True)
            branch = urllib.parse.unquote(rest.removeprefix("commit/"))
            if branch not in repo.branches:
                raise _HttpError(404, f"Invalid rev id: {branch}", "RevisionNotFound")
            return 200, {}, self._apply_commit(repo, branch, body)
        if rest.startswith("paths-info/") and method == "POST":
            repo = self._repo(h, repo_type, repo_id)
            sha = repo.resolve(rest.removeprefix("paths-info/"))
            if sha is None:
                raise _HttpError(404, "Invalid rev id", "RevisionNotFound")
            form = urllib.parse.parse_qs(body.decode()) if not body.startswith(b"{") else json.loads(body)
            paths = form.get("paths", [])
            tree = repo.commits[sha]
            out = [self._entry(p, tree[p]) for p in paths if p in tree]
            out += [
                {"type": "directory", "oid": hashlib.sha1(p.encode()).hexdigest(), "size": 0, "path": p}
                for p in paths
                if p not in tree and any(q.startswith(p.rstrip("/") + "/") for q in tree)
            ]
            return 200, {}, out
        if rest.startswith("tree/") and method == "GET":
            repo = self._repo(h, repo_type, repo_id)
            rev, _, under = rest.removeprefix("tree/").partition("/")
            sha = repo.resolve(rev)
            if sha is None:
                raise _HttpError(404, "Invalid rev id", "RevisionNotFound")
            recursive = query.get("recursive", ["false"])[0].lower() in ("true", "1")
            return 200, {}, self._tree(repo.commits[sha], urllib.parse.unquote(under), recursive)
        if (rest == "" or rest.startswith("revision/")) and method == "GET":
            repo = self._repo(h, repo_type, repo_id)
            sha = repo.resolve(rest.removeprefix("revision/")) if rest else repo.branches["main"]
            if sha is None:
                raise _HttpError(404, "Invalid rev id", "RevisionNotFound")
            tree = repo.commits[sha]
            return (
                200,
                {},
                {
                    "id": repo_id,
                    "sha": sha,
                    "private": repo.private,
                    "tags": [],
                    "lastModified": "2026-01-01T00:00:00.000Z",
                    "siblings": [{"rfilename": p} for p in sorted(tree)],
                },
            )
        raise _HttpError(404, f"no API route for {method} {rest}")

    def _apply_commit(self, repo: Repo, branch: str, body: bytes) -> dict:
        tree = dict(repo.commits[repo.branches[branch]])
        message = ""
        for line in body.splitlines():
            if not line.strip():
                continue
            item = json.loads(line)
            key, value = item["key"], item["value"]
            if key == "header":
                message = value.get("summary", "")
                parent = value.get("parentCommit")
                if parent is not None and parent != repo.branches[branch]:
                    raise _HttpError(412, "parent commit is not the head of the branch")
            elif key == "file":
                tree[value["path"]] = Stored(base64.b64decode(value["content"]), False)
            elif key == "lfsFile":
                data = self.lfs.get(value["oid"])
                if data is None:
                    raise _HttpError(422, f"LFS object {value['oid']} for {value['path']} was never uploaded")
                tree[value["path"]] = Stored(data, True)
            elif key == "deletedFile":
                tree.pop(value["path"], None)
            elif key == "deletedFolder":
                for p in [p for p in tree if p.startswith(value["path"].rstrip("/") + "/")]:
                    tree.pop(p)
            else:
                raise _HttpError(400, f"unknown commit operation {key}")
        sha = self._commit(repo, branch, tree, message)
        url = f"{self.url}/{PREFIX[repo.repo_type]}{repo.repo_id}/commit/{sha}"
        return {"success": True, "commitOid": sha, "commitUrl": url}

    def _resolve(self, h, repo_type, repo_id, rev, path):
        repo = self._repo(h, repo_type, repo_id)
        sha = repo.resolve(rev)
        if sha is None:
            raise _HttpError(404, "Invalid rev id", "RevisionNotFound")
        stored = repo.commits[sha].get(path)
        if stored is None:
            raise _HttpError(404, "Entry not found", "EntryNotFound")
        headers = {
            "X-Repo-Commit": sha,
            "ETag": f'"{stored.blob_id}"',
            "Content-Length": str(len(stored.data)),
            "Content-Type": "application/octet-stream",
            "Accept-Ranges": "bytes",
        }
        if stored.lfs:
            headers["X-Linked-Etag"] = f'"{stored.sha256}"'
            headers["X-Linked-Size"] = str(len(stored.data))
        data = stored.data
        rng = h.headers.get("Range")
        if rng and rng.startswith("bytes="):
            start = int(rng[6:].split("-")[0] or 0)
            data = data[start:]
            headers["Content-Range"] = f"bytes {start}-{len(stored.data) - 1}/{len(stored.data)}"
            headers["Content-Length"] = str(len(data))
            return 206, headers, data
        return 200, headers, data


def _read_body(h: BaseHTTPRequestHandler) -> bytes:
    if h.headers.get("Transfer-Encoding", "").lower() == "chunked":
        chunks = []
        while True:
            size = int(h.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                h.rfile.readline()
                break
            chunks.append(h.rfile.read(size))
            h.rfile.readline()
        return b"".join(chunks)
    length = int(h.headers.get("Content-Length") or 0)
    return h.rfile.read(length) if length else b""
