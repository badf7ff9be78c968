"""A loopback server speaking the part of the Hugging Face Hub protocol huggingface_hub uses.

Real sockets, real HTTP: the real ``huggingface_hub`` client talks to it through ``endpoint``.
Served: ``GET /api/models/<repo>[/revision/<rev>]`` (info with siblings, sizes, LFS sha256),
``HEAD``/``GET /<repo>/resolve/<rev>/<file>`` with ETag, X-Repo-Commit, X-Linked-Size/Etag,
Content-Length and Range. Private repos answer 401 without the right bearer token; unknown repos,
revisions and files answer 404 with the Hub's X-Error-Code headers. Faults for tests: drop the
connection after N bytes once, stall after N bytes until released, always cut a file short, or
advertise a bigger size in the API than the file has.
"""

from __future__ import annotations

import hashlib
import json
import ssl
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse


@dataclass
class Repo:
    files: dict[str, bytes]
    sha: str = "0123456789abcdef0123456789abcdef01234567"
    token: str | None = None  # private repo: this bearer token is required

    @classmethod
    def from_dir(cls, root: Path, **kwargs: object) -> Repo:
        files = {
            p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()
        }
        return cls(files=files, **kwargs)  # type: ignore[arg-type]


def is_lfs(name: str) -> bool:
    return name.endswith((".safetensors", ".bin", ".model", ".h5", ".msgpack"))


@dataclass
class Faults:
    drop_after: dict[str, int] = field(default_factory=dict)  # once, then removed
    stall_after: dict[str, int] = field(default_factory=dict)  # wait on ``release``
    truncate: dict[str, int] = field(default_factory=dict)  # always send only N bytes
    advertise: dict[str, int] = field(default_factory=dict)  # size the API reports
    release: threading.Event = field(default_factory=threading.Event)
    stalled: threading.Event = field(default_factory=threading.Event)


TLS_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "tls"


def trust_test_ca(monkeypatch: object) -> None:
    """Make requests (huggingface_hub) and urllib trust the loopback test CA, and let the token
    go to 127.0.0.1 (the user's explicit allow list, ``TRAINWIZ_TOKEN_HOSTS``)."""
    ca = str(TLS_DIR / "ca.crt")
    setenv = monkeypatch.setenv  # type: ignore[attr-defined]
    setenv("REQUESTS_CA_BUNDLE", ca)
    setenv("SSL_CERT_FILE", ca)
    setenv("TRAINWIZ_TOKEN_HOSTS", "127.0.0.1")


class FakeHub:
    def __init__(self, tls: bool = False) -> None:
        self.repos: dict[str, Repo] = {}
        self.faults = Faults()
        self.log: list[tuple[str, str, str | None]] = []  # (method, path, Range header)
        self.auth_seen: list[str] = []  # every Authorization header that arrived
        self.tls = tls
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        if tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(TLS_DIR / "server.crt", TLS_DIR / "server.key")
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{'https' if self.tls else 'http'}://{host}:{port}"

    def start(self) -> FakeHub:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.faults.release.set()
        self._server.shutdown()
        self._server.server_close()

    def gets(self, name: str) -> list[str | None]:
        """Range headers of every GET of ``name`` (None: a whole-file request)."""
        return [
            r for m, p, r in self.log if m == "GET" and p.endswith("/" + name) and "/resolve/" in p
        ]


def _handler(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:  # quiet
            return

        def _error(self, status: int, code: str | None, message: str) -> None:
            body = json.dumps({"error": message}).encode()
            self.send_response(status)
            if code:
                self.send_header("X-Error-Code", code)
            self.send_header("X-Error-Message", message)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _repo(self, path: str, marker: str) -> tuple[str, Repo, str] | None:
            """(repo id, repo, rest) for the longest known repo id before ``marker``."""
            for repo_id in sorted(hub.repos, key=len, reverse=True):
                prefix = repo_id + marker
                if path.startswith(prefix) or (marker == "" and path == repo_id):
                    return repo_id, hub.repos[repo_id], path[len(prefix) :]
            return None

        def _authorized(self, repo: Repo) -> bool:
            if repo.token is None:
                return True
            auth = self.headers.get("Authorization", "")
            if not auth:
                self._error(401, None, "Invalid username or password.")
                return False
            if auth != f"Bearer {repo.token}":
                self._error(401, None, "Invalid credentials in Authorization header")
                return False
            return True

        def do_HEAD(self) -> None:
            self._serve()

        def do_GET(self) -> None:
            self._serve()

        def _serve(self) -> None:
            path = unquote(urlparse(self.path).path).lstrip("/")
            hub.log.append((self.command, "/" + path, self.headers.get("Range")))
            if self.headers.get("Authorization"):
                hub.auth_seen.append(self.headers["Authorization"])
            if path.startswith("api/models/"):
                self._info(path[len("api/models/") :])
            elif "/resolve/" in path:
                self._resolve(path)
            else:
                self._error(404, None, "Not found")

        def _info(self, rest: str) -> None:
            repo_id, _, revision = rest.partition("/revision/")
            repo = hub.repos.get(repo_id)
            if repo is None:
                self._error(404, "RepoNotFound", "Repository not found")
                return
            if not self._authorized(repo):
                return
            if revision and revision not in ("main", repo.sha):
                self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
                return
            siblings = []
            for name, data in sorted(repo.files.items()):
                size = hub.faults.advertise.get(name, len(data))
                entry: dict[str, object] = {
                    "rfilename": name,
                    "size": size,
                    "blobId": _git_sha(data),
                }
                if is_lfs(name):
                    digest = hashlib.sha256(data).hexdigest()
                    entry["lfs"] = {"sha256": digest, "size": size, "pointerSize": 134}
                siblings.append(entry)
            body = json.dumps(
                {
                    "id": repo_id,
                    "sha": repo.sha,
                    "private": repo.token is not None,
                    "siblings": siblings,
                }
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command == "GET":
                self.wfile.write(body)

        def _resolve(self, path: str) -> None:
            found = self._repo(path, "/resolve/")
            if found is None:
                self._error(404, "RepoNotFound", "Repository not found")
                return
            _, repo, rest = found
            if not self._authorized(repo):
                return
            revision, _, name = rest.partition("/")
            if revision not in ("main", repo.sha):
                self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
                return
            data = repo.files.get(name)
            if data is None:
                self._error(404, "EntryNotFound", f"{name} does not exist")
                return
            start = 0
            range_header = self.headers.get("Range")
            if range_header and range_header.startswith("bytes="):
                start = int(range_header[6:].split("-")[0] or 0)
            etag = hashlib.sha256(data).hexdigest() if is_lfs(name) else _git_sha(data)
            self.send_response(206 if start else 200)
            self.send_header("X-Repo-Commit", repo.sha)
            self.send_header("ETag", f'"{etag}"')
            if is_lfs(name):
                self.send_header("X-Linked-Etag", f'"{etag}"')
                self.send_header("X-Linked-Size", str(len(data)))
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Content-Length", str(len(data) - start))
            if start:
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            self.end_headers()
            if self.command == "HEAD":
                return
            self._send_body(name, data, start)

        def _send_body(self, name: str, data: bytes, start: int) -> None:
            faults = hub.faults
            cut = None
            if name in faults.drop_after and start == 0:
                cut = faults.drop_after.pop(name)
            elif name in faults.truncate:
                cut = max(start, faults.truncate[name])
            elif name in faults.stall_after and start == 0:
                cut = faults.stall_after.pop(name)
                self.wfile.write(data[:cut])
                self.wfile.flush()
                faults.stalled.set()
                faults.release.wait(60)
                self.close_connection = True
                return
            if cut is None:
                self.wfile.write(data[start:])
                return
            self.wfile.write(data[start:cut])
            self.wfile.flush()
            self.close_connection = True  # the client sees a short body: connection broken

    return Handler


def _git_sha(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\x00" % len(data) + data).hexdigest()


def llama_tensors(
    h: int, inter: int, layers: int, vocab: int, heads: int, kv_heads: int
) -> dict[str, list[int]]:
    """Tensor names and shapes of a Llama checkpoint (no torch needed)."""
    head_dim = h // heads
    shapes: dict[str, list[int]] = {
        "model.embed_tokens.weight": [vocab, h],
        "model.norm.weight": [h],
    }
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes.update(
            {
                p + "self_attn.q_proj.weight": [h, h],
                p + "self_attn.k_proj.weight": [kv_heads * head_dim, h],
                p + "self_attn.v_proj.weight": [kv_heads * head_dim, h],
                p + "self_attn.o_proj.weight": [h, h],
                p + "mlp.gate_proj.weight": [inter, h],
                p + "mlp.up_proj.weight": [inter, h],
                p + "mlp.down_proj.weight": [h, inter],
                p + "input_layernorm.weight": [h],
                p + "post_attention_layernorm.weight": [h],
            }
        )
    shapes["lm_head.weight"] = [vocab, h]
    return shapes


def write_safetensors(
    path: Path, shapes: dict[str, list[int]], dtype: str = "BF16", seed: int = 0
) -> None:
    """A valid safetensors file with deterministic pseudo-random bytes as data."""
    width = {"BF16": 2, "F16": 2, "F32": 4}[dtype]
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape in shapes.items():
        n = width
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    block = hashlib.sha256(str(seed).encode()).digest() * 64
    with path.open("wb") as fh:
        fh.write(len(raw).to_bytes(8, "little") + raw)
        left = offset
        while left > 0:
            fh.write(block[: min(left, len(block))])
            left -= len(block)


def write_llama_dir(
    root: Path, shards: int = 2, dtype: str = "BF16", with_bin: bool = False, vocab: int = 300
) -> int:
    """A small sharded Llama model directory; returns its parameter count.

    A vocab of 90000 makes the first shard ~11.5 MB: more than huggingface_hub's 10 MiB read
    chunk, which is the granularity at which an interrupted download keeps bytes.
    """
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 160,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": vocab,
        "max_position_embeddings": 256,
        "torch_dtype": {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}[dtype],
        "tie_word_embeddings": False,
    }
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps(cfg))
    (root / "tokenizer.model").write_bytes(b"\x0a\x05hello" * 50)
    (root / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "LlamaTokenizer"}))
    shapes = llama_tensors(64, 160, 3, vocab, 4, 2)
    names = list(shapes)
    weight_map, total = {}, 0
    for s in range(shards):
        part = {n: shapes[n] for n in names[s::shards]}
        fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        write_safetensors(root / fname, part, dtype, seed=s)
        weight_map.update({n: fname for n in part})
    n_params = 0
    for shape in shapes.values():
        n = 1
        for d in shape:
            n *= d
        n_params += n
        total += n * (4 if dtype == "F32" else 2)
    (root / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map})
    )
    if with_bin:
        (root / "pytorch_model.bin").write_bytes(
            b"PK\x03\x04" + b"\0" * 1000 + b"PK\x05\x06" + b"\0" * 18
        )
    return n_params
