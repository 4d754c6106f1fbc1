"""A local Google Cloud Storage for tests: `gcp-storage-emulator` behind a counting proxy.

Everything listens on 127.0.0.1 and nothing can leave the machine:
- the emulator (in memory) speaks the GCS JSON API, batch requests included;
- a small proxy in front of it counts every request and every body byte in each direction, so a
  test (or the bench) can state how many requests and bytes a build cost; it also answers the
  OAuth token endpoint, so the real credential path runs with a throwaway key, and enforces
  `ifGenerationMatch` (create only if absent, delete only that generation), which the emulator
  ignores and the build's lock on a gs:// OUT relies on;
- the credentials are a throwaway service-account key, made for the run, whose `token_uri` is
  that proxy, and the metadata server is pointed at a closed local port.

Both servers run as child processes, not threads: a build forks its workers only from a process
with no other Python thread (`pipeline/runners/local_workers.py`).

    with GcsEmulator() as gcs:
        os.environ.update(gcs.env)
        gcs.create_bucket("b")
        ... build into gs://b/out ...
        print(gcs.stats())   # {"requests": ..., "bytes_down": ..., "bytes_up": ..., ...}
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

PROXY_SOURCE = r'''
import http.client, json, re, sys, threading, urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

UPSTREAM = ("127.0.0.1", int(sys.argv[2]))
HERE = "127.0.0.1:" + sys.argv[1]
THERE = [f"{host}:{UPSTREAM[1]}" for host in ("127.0.0.1", "localhost", "0.0.0.0")]
LOCK = threading.Lock()
STATS = {}

def fresh():
    return {"requests": 0, "bytes_down": 0, "bytes_up": 0, "token_requests": 0, "by_kind": {}}

STATS.update(fresh())
LOG_SIZE = 200_000
LOG = []  # (method, path) of the latest requests, for a look at what a build asked
PRECONDITION = threading.Lock()  # a checked request and its check, one at a time
NAME_IN_BODY = re.compile(rb'"name"\s*:\s*("(?:[^"\\]|\\.)*")')
# Injected faults: the modes and who is answered, `GcsEmulator.inject_faults`.
FAULTS = {"every": 0, "status": 503, "kinds": [], "mode": "before", "seen": {}, "injected": {}}
PART = (b"--fault\r\nContent-Type: application/http\r\n\r\nHTTP/1.1 %d Fault\r\n"
        b"Content-Type: application/json; charset=UTF-8\r\n\r\n%s\r\n")


def wanted_generation(method, path, body):
    """(bucket, object, generation) of a request with ifGenerationMatch, which the emulator
    ignores: GCS's create-if-absent (0) and delete- or replace-if-unchanged."""
    url = urllib.parse.urlsplit(path)
    query = urllib.parse.parse_qs(url.query)
    if "ifGenerationMatch" not in query:
        return None
    parts = url.path.split("/")
    if url.path.startswith("/upload/"):  # /upload/storage/v1/b/B/o?name=... or name in body
        bucket = parts[5]
        name = query.get("name", [None])[0]
        if name is None:
            found = NAME_IN_BODY.search(body)
            name = json.loads(found.group(1)) if found else None
    elif "/o/" in url.path:  # /storage/v1/b/B/o/NAME
        bucket, name = parts[4], urllib.parse.unquote(url.path.split("/o/", 1)[1])
    else:
        return None
    return bucket, name, int(query["ifGenerationMatch"][0])


def current_generation(bucket, name):
    conn = http.client.HTTPConnection(*UPSTREAM, timeout=30)
    conn.request("GET", f"/storage/v1/b/{bucket}/o/{urllib.parse.quote(name, safe='')}")
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return int(json.loads(data)["generation"]) if resp.status == 200 else 0

def kind(method, path):
    p = path.split("?", 1)[0]
    if p.startswith("/batch/"):
        return "batch"
    if p.startswith("/upload/"):
        return "upload"
    if p.startswith("/download/") or "alt=media" in path:
        return "download"
    if "/o/" in p and "/copyTo/" in p or "/rewriteTo/" in p:
        return "copy"
    if p.rstrip("/").endswith("/o"):
        return "list" if method == "GET" else "insert"
    if "/o/" in p:
        return {"GET": "object-get", "DELETE": "delete", "PATCH": "patch"}.get(method, method)
    if "/b/" in p or p.rstrip("/").endswith("/b"):
        return "bucket-" + method.lower()
    return "other"

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # TCP_NODELAY: a reply goes out as headers, then body; on a kept-alive connection Nagle's
    # algorithm holds the body until the client's delayed ACK, 40 ms a request
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def _body(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            return self.rfile.read(n)
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while True:
                size = int(self.rfile.readline().strip(), 16)
                if size == 0:
                    self.rfile.readline()
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
        return b""

    def _reply(self, status, body, ctype="application/json"):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _handle(self):
        body = self._body()
        if self.path == "/__stats":
            with LOCK:
                return self._reply(200, json.dumps(STATS).encode())
        if self.path == "/__reset":
            with LOCK:
                STATS.clear()
                STATS.update(fresh())
                LOG.clear()
            return self._reply(200, b"{}")
        if self.path == "/__faults":
            with LOCK:
                FAULTS.update(json.loads(body), seen={}, injected={})
            return self._reply(200, b"{}")
        if self.path == "/__injected":
            with LOCK:
                return self._reply(200, json.dumps(FAULTS["injected"]).encode())
        if self.path == "/__log":
            with LOCK:
                return self._reply(200, json.dumps(LOG).encode())
        if self.path.startswith("/token"):
            with LOCK:
                STATS["token_requests"] += 1
            token = {"access_token": "fake-token", "expires_in": 3600, "token_type": "Bearer"}
            return self._reply(200, json.dumps(token).encode())
        if self._fault(body):
            return
        condition = wanted_generation(self.command, self.path, body)
        if condition is None:
            return self._forward(body)
        with PRECONDITION:
            bucket, name, generation = condition
            if current_generation(bucket, name) != generation:
                with LOCK:
                    STATS["requests"] += 1
                    STATS["by_kind"]["precondition-failed"] = (
                        STATS["by_kind"].get("precondition-failed", 0) + 1)
                error = {"error": {"code": 412, "message": "conditionNotMet"}}
                return self._reply(412, json.dumps(error).encode())
            return self._forward(body)

    def _fault(self, body):
        """Answers the request with the injected fault when its turn has come."""
        k = kind(self.command, self.path)
        with LOCK:
            if not FAULTS["every"] or k not in FAULTS["kinds"]:
                return False
            FAULTS["seen"][k] = FAULTS["seen"].get(k, 0) + 1
            if (FAULTS["seen"][k] - 1) % FAULTS["every"]:  # the first, then every `every`-th
                return False
            FAULTS["injected"][k] = FAULTS["injected"].get(k, 0) + 1
            LOG.append((self.command, self.path, FAULTS["status"]))
        status = FAULTS["status"]
        error = json.dumps({"error": {"code": status, "message": "injected by the test's proxy"}})
        if FAULTS["mode"] == "drop":  # the connection closed, no answer
            self.close_connection = True
            return True
        if FAULTS["mode"] == "cut":  # the answer's first half, then the connection closed
            self._forward(body, cut=True)
            return True
        if FAULTS["mode"] == "after":
            self._forward(body, reply=False)
        if FAULTS["mode"] == "parts" and k == "batch":
            boundary = self.headers.get_param("boundary").encode()
            parts = body.count(b"--" + boundary) - 1
            answer = b"".join(PART % (status, error.encode()) for _ in range(parts))
            self._reply(200, answer + b"--fault--\r\n", "multipart/mixed; boundary=fault")
            return True
        self._reply(status, error.encode())
        return True

    def _forward(self, body, reply=True, cut=False):
        conn = http.client.HTTPConnection(*UPSTREAM, timeout=120)
        headers = {k: v for k, v in self.headers.items()
                   if k.lower() not in ("host", "transfer-encoding", "connection")}
        headers["Content-Length"] = str(len(body))
        conn.request(self.command, self.path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        if "json" in (resp.getheader("Content-Type") or ""):
            for there in THERE:  # links in metadata (mediaLink, selfLink) lead here too
                data = data.replace(there.encode(), HERE.encode())
        k = kind(self.command, self.path)
        with LOCK:
            STATS["requests"] += 1
            STATS["bytes_up"] += len(body)
            STATS["bytes_down"] += len(data)
            STATS["by_kind"][k] = STATS["by_kind"].get(k, 0) + 1
            name = NAME_IN_BODY.search(body) if k == "upload" else None
            LOG.append((self.command, self.path + (f"#{json.loads(name.group(1))}" if name else ""),
                        resp.status))
            del LOG[:-LOG_SIZE]
        if not reply:
            return
        self.send_response(resp.status)
        for key, value in resp.getheaders():
            if key.lower() not in ("content-length", "transfer-encoding", "connection"):
                if key.lower() == "location":  # a resumable upload's session: through us too
                    for there in THERE:
                        value = value.replace(there, HERE)
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if cut:
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)
            return
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _handle

server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
server.daemon_threads = True
print("ready", flush=True)
server.serve_forever()
'''


def fake_service_account(token_uri: str) -> dict:
    """A service-account key of a fresh RSA key pair, good for nothing but this emulator."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    return {
        "type": "service_account",
        "project_id": "test-project",
        "private_key_id": "0" * 40,
        "private_key": pem,
        "client_email": "builder@test-project.iam.gserviceaccount.com",
        "client_id": "1",
        "token_uri": token_uri,
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(port: int, proc: subprocess.Popen, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the {what} exited at start (code {proc.returncode})")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"the {what} did not listen on 127.0.0.1:{port} within {timeout:.0f} s")


class GcsEmulator:
    """A GCS emulator and its counting proxy, as child processes on loopback ports."""

    def __init__(self) -> None:
        self._procs: list[subprocess.Popen] = []
        self._dir = tempfile.mkdtemp(prefix="gcs-emulator-")
        self.emulator_port = free_port()
        self.proxy_port = free_port()
        self.closed_port = free_port()  # nothing listens here: the metadata server's address
        self.endpoint = f"http://127.0.0.1:{self.proxy_port}"
        self.env: dict[str, str] = {}

    def start(self) -> GcsEmulator:
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        emulator = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gcp_storage_emulator",
                "start",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.emulator_port),
                "--in-memory",
                "--quiet",
            ],
            **quiet,
        )
        self._procs.append(emulator)
        _wait_for(self.emulator_port, emulator, "GCS emulator")
        proxy = subprocess.Popen(
            [sys.executable, "-c", PROXY_SOURCE, str(self.proxy_port), str(self.emulator_port)],
            **quiet,
        )
        self._procs.append(proxy)
        _wait_for(self.proxy_port, proxy, "GCS counting proxy")
        creds = os.path.join(self._dir, "fake-service-account.json")
        with open(creds, "w", encoding="utf-8") as f:
            json.dump(fake_service_account(f"{self.endpoint}/token"), f)
        closed = f"127.0.0.1:{self.closed_port}"
        self.env = {
            "STORAGE_EMULATOR_HOST": self.endpoint,
            "GOOGLE_APPLICATION_CREDENTIALS": creds,
            "GOOGLE_CLOUD_PROJECT": "test-project",
            "GCE_METADATA_HOST": closed,
            "GCE_METADATA_IP": closed,
            "NO_GCE_CHECK": "true",  # google-auth compares with "true" exactly
        }
        return self

    def __enter__(self) -> GcsEmulator:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        for proc in self._procs:
            proc.terminate()
        for proc in self._procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        self._procs.clear()
        shutil.rmtree(self._dir, ignore_errors=True)  # the fake credentials

    def _call(
        self, method: str, path: str, body: bytes | None = None, direct: bool = False
    ) -> dict:
        """A request of the test's own; `direct` goes to the emulator, past the proxy's counts."""
        base = f"http://127.0.0.1:{self.emulator_port}" if direct else self.endpoint
        req = urllib.request.Request(
            base + path, data=body, method=method, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            data = resp.read()
        return json.loads(data) if data else {}

    def create_bucket(self, name: str) -> None:
        """Creates a bucket, past the proxy: a build's counts never include it."""
        self._call(
            "POST",
            "/storage/v1/b?project=test-project",
            json.dumps({"name": name}).encode(),
            direct=True,
        )

    def list_objects(self, bucket: str, prefix: str = "") -> list[str]:
        """Every object name under prefix (paged), without counting it against a build."""
        names: list[str] = []
        token = ""
        while True:
            query = f"?prefix={urllib.request.quote(prefix)}"
            if token:
                query += f"&pageToken={token}"
            page = self._call("GET", f"/storage/v1/b/{bucket}/o{query}", direct=True)
            names += [item["name"] for item in page.get("items", [])]
            token = page.get("nextPageToken", "")
            if not token:
                break
        return sorted(names)

    def stats(self) -> dict:
        return self._call("GET", "/__stats")

    def request_log(self) -> list[tuple[str, str, int]]:
        """(method, path, status) of the latest 200,000 counted requests; an upload's path ends
        with `#` and the object's name."""
        return [tuple(x) for x in self._call("GET", "/__log")]

    def inject_faults(
        self, every: int, kinds: list[str], status: int = 503, mode: str = "before"
    ) -> None:
        """From now on the first request of each kind in `kinds` (the proxy's `kind` names:
        upload, download, list, batch, copy, object-get, ...), then every `every`-th, is
        answered with `status`: in the emulator's place (`mode` "before"), after the emulator
        did it ("after": the answer lost on its way), or, for a batch, in each of its parts,
        none done ("parts"); "drop" closes the connection with no answer, "cut" after half the
        emulator's answer. `every` 0 ends it."""
        faults = {"every": every, "kinds": kinds, "status": status, "mode": mode}
        body = json.dumps(faults).encode()
        self._call("POST", "/__faults", body)

    def injected(self) -> dict[str, int]:
        """The faults injected since `inject_faults`, by kind."""
        return self._call("GET", "/__injected")

    def reset_stats(self) -> None:
        self._call("POST", "/__reset", b"")


def upload_tree(local: str, url: str, damage=None) -> None:
    """Every file below a local folder as an object below `url`, through `schemas.storage`,
    leaving out dot files (a build's lock). `damage(rel, data)` may change a file's bytes on the
    way (None: leave the file out)."""
    from schemas import storage

    for rel in sorted(storage.list_files(local)):
        if rel.startswith("."):
            continue
        with open(os.path.join(local, rel), "rb") as f:
            data = f.read()
        if damage is not None:
            data = damage(rel, data)
            if data is None:
                continue
        with storage.open_file(storage.join(url, rel), "wb") as out:
            out.write(data)
