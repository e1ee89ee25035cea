"""A local stand-in for the Hugging Face Hub on loopback (tests point ``HF_ENDPOINT`` at it).

It serves what ``huggingface_hub`` asks of the Hub for ``servelab plan --model org/name``: ``HEAD``
and ``GET /{repo}/resolve/{revision}/{file}`` with the commit and ETag headers, byte ranges
(the safetensors headers), and the Hub's error codes for a missing repository or file. Every
request is recorded, so a test can check that no weights were downloaded whole.
"""

from __future__ import annotations

import hashlib
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class FakeHub:
    """Repositories ``{repo_id: folder}`` served on ``url``; ``requests``: (method, path, range)."""

    def __init__(self, repos: dict[str, Path]):
        self.repos = repos
        self.requests: list[tuple[str, str, str | None]] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def do_HEAD(self) -> None:
                self._serve(body=False)

            def do_GET(self) -> None:
                self._serve(body=True)

            def _serve(self, body: bool) -> None:
                hub.requests.append((self.command, self.path, self.headers.get("range")))
                m = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+?)(?:\?.*)?$", self.path)
                if not m or m.group(1) not in hub.repos:
                    return self._error(404, "RepoNotFound", "Repository not found")
                if m.group(2) not in ("main", COMMIT):
                    return self._error(404, "RevisionNotFound", "Invalid rev id")
                path = hub.repos[m.group(1)] / m.group(3)
                if not path.is_file():
                    return self._error(404, "EntryNotFound", "Entry not found")
                data = path.read_bytes()
                status, chunk = 200, data
                rng = re.match(r"bytes=(\d+)-(\d+)", self.headers.get("range") or "")
                if rng:
                    start, end = int(rng.group(1)), min(int(rng.group(2)), len(data) - 1)
                    status, chunk = 206, data[start : end + 1]
                    self.send_response(status)
                    self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
                else:
                    self.send_response(status)
                self.send_header("Content-Length", str(len(chunk)))
                self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
                self.send_header("X-Repo-Commit", COMMIT)
                self.end_headers()
                if body:
                    self.wfile.write(chunk)

            def _error(self, code: int, error_code: str, message: str) -> None:
                self.send_response(code)
                self.send_header("X-Error-Code", error_code)
                self.send_header("X-Error-Message", message)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeHub:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
