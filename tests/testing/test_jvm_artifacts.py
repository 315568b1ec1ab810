"""The pinned-jar fetcher: a jar is cached only when its SHA-256 is the pinned one, a cached jar
is checked before it is used, and a failure names the artifact and the reason. Served by a
local HTTP server standing in for Maven Central."""

from __future__ import annotations

import hashlib
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from committer.testing import jvm_artifacts
from committer.testing.jvm_artifacts import Artifact, ArtifactError

BODY = b"PK\x03\x04 a jar, as far as this test cares"


class _Repo(http.server.BaseHTTPRequestHandler):
    files: dict[str, bytes] = {}
    hits: list[str] = []

    def do_GET(self) -> None:
        self.hits.append(self.path)
        body = self.files.get(self.path)
        if body is None:
            self.send_error(404, "Not Found")
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def repo() -> Iterator[str]:
    _Repo.files = {}
    _Repo.hits = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Repo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/maven2"
    finally:
        server.shutdown()
        server.server_close()


def _artifact(body: bytes = BODY, classifier: str | None = None) -> Artifact:
    return Artifact("org.example.group", "thing", "1.2.3", hashlib.sha256(body).hexdigest(),
                    "azure", classifier=classifier)


def _serve(artifact: Artifact, body: bytes) -> None:
    _Repo.files["/maven2/" + artifact.path] = body


def test_fetch_caches_a_jar_with_the_pinned_checksum(repo: str, tmp_path: Path) -> None:
    artifact = _artifact(classifier="shaded")
    assert artifact.url(repo).endswith("/org/example/group/thing/1.2.3/thing-1.2.3-shaded.jar")
    _serve(artifact, BODY)
    path = jvm_artifacts.fetch(artifact, tmp_path, repository=repo)
    assert path == tmp_path / "thing-1.2.3-shaded.jar"
    assert path.read_bytes() == BODY
    assert path.stat().st_mode & 0o444 == 0o444
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name], "no temporary file left"
    # Cached: a second fetch asks nothing.
    assert jvm_artifacts.fetch(artifact, tmp_path, repository=repo) == path
    assert len(_Repo.hits) == 1


def test_a_wrong_checksum_is_refused_and_nothing_cached(repo: str, tmp_path: Path) -> None:
    artifact = _artifact()
    _serve(artifact, BODY + b"tampered")
    with pytest.raises(ArtifactError) as e:
        jvm_artifacts.fetch(artifact, tmp_path, repository=repo)
    message = str(e.value)
    assert "org.example.group:thing:1.2.3" in message
    assert "SHA-256" in message and artifact.sha256 in message
    assert list(tmp_path.iterdir()) == []


def test_a_missing_artifact_names_it_and_the_answer(repo: str, tmp_path: Path) -> None:
    artifact = _artifact()
    with pytest.raises(ArtifactError, match=r"org\.example\.group:thing:1\.2\.3: .* HTTP 404"):
        jvm_artifacts.fetch(artifact, tmp_path, repository=repo)
    assert list(tmp_path.iterdir()) == []


def test_an_unreachable_repository_names_the_artifact(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ArtifactError, match=r"thing:1\.2\.3: could not download .*"):
        jvm_artifacts.fetch(_artifact(), tmp_path, repository=f"http://127.0.0.1:{port}")


def test_an_altered_cached_jar_is_fetched_again(repo: str, tmp_path: Path) -> None:
    artifact = _artifact()
    _serve(artifact, BODY)
    path = jvm_artifacts.fetch(artifact, tmp_path, repository=repo)
    path.write_bytes(b"corrupted on disk")
    assert jvm_artifacts.cached(artifact, tmp_path) is None
    assert jvm_artifacts.fetch(artifact, tmp_path, repository=repo).read_bytes() == BODY
    assert len(_Repo.hits) == 2


def test_check_fetches_nothing_and_names_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(ArtifactError, match=r"hadoop-azure:3\.5\.0"):
        jvm_artifacts.check_all("4", [jvm_artifacts.AZURE], tmp_path)


def test_every_line_pins_each_role_once() -> None:
    roles = {jvm_artifacts.AZURE, jvm_artifacts.GCS, jvm_artifacts.MINICLUSTER,
             jvm_artifacts.CLOUD_COMMITTER}
    for line, artifacts in jvm_artifacts.LINES.items():
        assert sorted(a.role for a in artifacts) == sorted(roles), line
        for a in artifacts:
            assert len(a.sha256) == 64 and int(a.sha256, 16) >= 0, a
    assert jvm_artifacts.line_of("3.5.7") == "3.5"
    assert jvm_artifacts.line_of("4.3.0") == "4"
    with pytest.raises(ArtifactError, match=r"3\.4\.1"):
        jvm_artifacts.line_of("3.4.1")
