"""The simulator as a service: its process and control API, the HTTP server's framing, the
throttle, the latency model, faults, statistics and the timeline."""

from __future__ import annotations

import base64
import hashlib
import http.client
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from committer.testing.cloud_sim import CloudSim, CloudSimError, SimOptions
from committer.testing.cloud_sim.server import WorkQueue
from tests.testing.cloud_sim.client import Client, blob_path, gcs_object

# -- control API -------------------------------------------------------------------------------


def test_populate_and_objects(adls: CloudSim) -> None:
    data = b"manifest bytes"
    answers = adls.populate([
        {"bucket": "c", "key": "src/p/f1", "size": 1000},
        {"bucket": "c", "key": "src/p/f2", "size": 1000},
        {"bucket": "c", "key": "m/manifest.json", "data_b64": base64.b64encode(data).decode()}])
    assert len(answers) == 3
    assert answers[0]["md5"] != answers[1]["md5"]  # random, as if content
    assert len(base64.b64decode(answers[0]["md5"])) == 16
    assert len(base64.b64decode(answers[0]["crc32c"])) == 4
    assert answers[2]["md5"] == base64.b64encode(hashlib.md5(data).digest()).decode()
    listed = {o["key"]: o for o in adls.objects("c")}
    assert set(listed) == {"m", "m/manifest.json", "src", "src/p", "src/p/f1", "src/p/f2"}
    assert listed["src/p"]["is_dir"] and not listed["src/p/f1"]["is_dir"]
    assert listed["src/p/f1"]["size"] == 1000 and listed["src/p/f1"]["md5"] == answers[0]["md5"]
    assert [o["key"] for o in adls.objects("c", "src/p/")] == ["src/p/f1", "src/p/f2"]
    c = Client(adls.ports["blob"])
    head = c.request("HEAD", blob_path("c", "src/p/f1")).headers
    assert head["etag"] == answers[0]["etag"] and head["content-md5"] == answers[0]["md5"]
    assert c.request("GET", blob_path("c", "src/p/f1")).body == bytes(1000)
    assert c.request("GET", blob_path("c", "m/manifest.json")).body == data
    assert adls.populate_count({"bucket": "c", "key": f"k{i}", "size": 1} for i in range(5)) == 5
    with pytest.raises(CloudSimError, match="populate"):
        adls.populate([{"bucket": "c", "key": "src/p", "size": 1}])  # a directory is there
    with pytest.raises(CloudSimError, match="no bucket"):
        adls.objects("nope")


def test_gcs_populate_reports_the_gcs_etag_and_generation(gcs: CloudSim) -> None:
    [answer] = gcs.populate([{"bucket": "b", "key": "x/y", "size": 3}])
    obj = Client(gcs.ports["gcs"], sign=False).request("GET", gcs_object("b", "x/y")).json()
    assert obj["etag"] == answer["etag"] and int(obj["generation"]) == answer["generation"]
    assert (obj["md5Hash"], obj["crc32c"]) == (answer["md5"], answer["crc32c"])


def test_stats_and_timeline(blob: CloudSim) -> None:
    c = Client(blob.ports["blob"])
    c.request("PUT", blob_path("c") + "?restype=container")
    for _ in range(3):
        c.request("HEAD", blob_path("c", "missing"))
    stats = blob.stats()
    assert stats["requests"] == 4 and stats["ops"] == 4
    assert stats["by_op"] == {"create_container": 1, "get_blob_properties": 3}
    assert stats["requests_by_op"] == stats["by_op"]
    assert stats["by_op_status"]["get_blob_properties"] == {"404": 3}
    assert stats["by_status"] == {"201": 1, "404": 3}
    assert stats["cpu"]["total_s"] > 0 and stats["memory_kib"]["peak_rss"] > 10_000
    assert stats["bytes_in"] > 0 and stats["bytes_out"] > 0
    buckets = blob.timeline()["buckets"]
    assert sum(b["arrivals"] for b in buckets) == 4
    assert sum(b["responses"] for b in buckets) == 4
    assert max(b["max_in_flight"] for b in buckets) == 1
    blob.reset_stats()
    assert blob.stats()["requests"] == 0
    assert sum(b["arrivals"] for b in blob.timeline()["buckets"]) == 0


def test_unknown_control_request() -> None:
    with CloudSim(service="gcs", latency_ms=0) as sim:
        with pytest.raises(CloudSimError, match="no control request"):
            sim._control("GET", "/nothing")
        with pytest.raises(CloudSimError, match="unknown fault fields"):
            sim.set_faults(bogus=1)
        with pytest.raises(CloudSimError, match="no dfs port"):
            _ = sim.dfs_endpoint


# -- the HTTP server ---------------------------------------------------------------------------


def _raw(port: int, payload: bytes, *, read_until_close: bool = False) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        s.sendall(payload)
        if not read_until_close:
            s.shutdown(socket.SHUT_WR)
        out = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return out
            out += chunk


def test_framing_keep_alive_pipelining_chunked_and_close(gcs: CloudSim) -> None:
    port = gcs.ports["gcs"]
    create = (b"POST /storage/v1/b?project=x HTTP/1.1\r\nHost: h\r\n"
              b"Transfer-Encoding: chunked\r\n\r\n"
              b"5\r\n{\"nam\r\n9;ext=1\r\ne\": \"bk\"}\r\n0\r\n\r\n")
    get = b"GET /storage/v1/b/bk HTTP/1.1\r\nHost: h\r\n\r\n"
    last = b"GET /storage/v1/b/bk HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n"
    out = _raw(port, create + get + last, read_until_close=True)  # pipelined, in one packet
    assert out.count(b"HTTP/1.1 200 OK") == 3
    assert out.index(b"storage#bucket") < out.rindex(b"Connection: close")
    # HTTP/1.0 without keep-alive closes after its answer
    assert b"200 OK" in _raw(port, b"GET /storage/v1/b/bk HTTP/1.0\r\n\r\n",
                             read_until_close=True)


def test_a_bad_request_does_not_take_the_server_down(gcs: CloudSim) -> None:
    port = gcs.ports["gcs"]
    assert _raw(port, b"NONSENSE\r\n\r\n").startswith(b"HTTP/1.1 400 ")
    assert _raw(port, b"GET / HTTP/1.1\r\nno colon here\r\n\r\n").startswith(b"HTTP/1.1 400 ")
    assert _raw(port, b"POST / HTTP/1.1\r\nContent-Length: x\r\n\r\n").startswith(
        b"HTTP/1.1 400 ")
    assert _raw(port, b"GET /" + b"a" * 70_000).startswith(b"HTTP/1.1 431 ")
    expect = (b"POST /storage/v1/b HTTP/1.1\r\nContent-Length: 13\r\n"
              b"Expect: 100-continue\r\n\r\n")
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        s.sendall(expect)
        assert s.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
        s.sendall(b'{"name":"e1"}')
        assert s.recv(1000).startswith(b"HTTP/1.1 200 ")
    assert Client(port, sign=False).request("GET", "/storage/v1/b/e1").status == 200


# -- throttle ----------------------------------------------------------------------------------


def test_the_account_throttle_answers_busy_and_does_nothing() -> None:
    # A bucket of five that refills a token every 100 s: which requests it serves is the
    # count's, not the machine's speed (a token refilled while a slow machine sends would
    # let a sixth through). Refilling over time is the bucket's own test (test_parts.py).
    with CloudSim(service="blob", latency_ms=0, ops_limit=0.01, burst_s=500.0) as sim:
        c = Client(sim.ports["blob"])
        statuses = [c.request("PUT", blob_path(f"c{i}") + "?restype=container")
                    for i in range(8)]
        assert [r.status for r in statuses] == [201] * 5 + [503] * 3
        busy = statuses[5]
        assert busy.error_code == "ServerBusy"
        # when the bucket holds a token again: under 100 s, in whole seconds, at least 1
        assert 1 <= int(busy.headers["retry-after"]) <= 100
        assert b"Operations per second is over the account limit." in busy.body
        stats = sim.stats()
        assert stats["stored"]["buckets"] == 5  # the throttled requests changed nothing
        assert stats["throttled"]["bucket"] == 3 and stats["by_status"]["503"] == 3


def test_gcs_throttle_and_a_batch_takes_a_token_per_part() -> None:
    with CloudSim(service="gcs", latency_ms=0, ops_limit=1, burst_s=3.0,
                  retry_after_s=7) as sim:
        c = Client(sim.ports["gcs"], sign=False)
        assert c.request("POST", "/storage/v1/b", body=b'{"name":"b"}').status == 200
        parts = [f"DELETE {gcs_object('b', f'o{i}')} HTTP/1.1\r\n\r\n".encode()
                 for i in range(3)]
        from tests.testing.cloud_sim.client import batch_body

        r = c.request("POST", "/batch/storage/v1", body=batch_body("B", parts, gcs=True),
                      headers={"Content-Type": "multipart/mixed; boundary=B"})
        assert r.status == 429 and r.headers["retry-after"] == "7"
        err = r.json()["error"]
        assert err["code"] == 429 and err["errors"][0]["reason"] == "rateLimitExceeded"
        stats = sim.stats()
        assert stats["throttled"]["bucket"] == 1 and stats["sub_by_status"] == {}


# -- latency -----------------------------------------------------------------------------------


def test_latency_median_and_effect_on_arrival() -> None:
    # What a client sees is the model's delay and then some (its own time, the machine's):
    # only the least it can be is a property of the simulator. The model's median and
    # percentile themselves are the latency model's test (test_parts.py).
    with CloudSim(service="gcs", latency_ms=30, p99_ms=30, seed=3) as sim:
        c = Client(sim.ports["gcs"], sign=False)
        c.request("POST", "/storage/v1/b", body=b'{"name":"b"}')
        for _ in range(10):
            t = time.perf_counter()
            assert c.request("GET", "/storage/v1/b/b").status == 200
            assert time.perf_counter() - t >= 0.03  # (p99 = median: every delay is 30 ms)
    # Carried out on arrival, answered after the delay: the simulator's own account, in one
    # snapshot, has the bucket stored and its request still in flight. The delay (a minute)
    # is only the window the test looks in; the simulator stops before it ends.
    done: list[object] = []

    def create(client: Client) -> None:
        try:
            done.append(client.request("POST", "/storage/v1/b", body=b'{"name":"now"}').status)
        except (OSError, http.client.HTTPException) as e:  # the simulator stopped first
            done.append(e)

    with CloudSim(service="gcs", latency_ms=60_000, p99_ms=60_000) as slow:
        thread = threading.Thread(target=create, args=(Client(slow.ports["gcs"], sign=False,
                                                              timeout=120),), daemon=True)
        thread.start()
        deadline = time.monotonic() + 60  # (a bound for a hang, not a speed)
        while not (stats := slow.stats())["stored"]["buckets"] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert stats["stored"]["buckets"] == 1 and stats["in_flight"] == 1
        assert done == []  # carried out, not yet answered
    thread.join(60)
    assert not thread.is_alive() and len(done) == 1 and not isinstance(done[0], int)


def test_a_service_with_a_rate_answers_each_request_after_those_ahead_of_it() -> None:
    """``serve_rate``: a latency that rises with the load. Three requests on a service
    working through 5 operations a second: each answered a fifth of a second after it came at
    the soonest, the last no sooner than three fifths after the first came (however late the
    others were sent)."""
    queue = WorkQueue(5.0)
    assert [round(queue.wait(1, 10.0), 3) for _ in range(3)] == [0.2, 0.4, 0.6]
    assert round(queue.wait(2, 10.5), 3) == 0.5  # after the others, two operations more
    assert round(queue.wait(1, 20.0), 3) == 0.2  # idle meanwhile: no queue
    with CloudSim(service="gcs", latency_ms=0, serve_rate=5.0) as sim:
        c = Client(sim.ports["gcs"], sign=False)
        assert c.request("POST", "/storage/v1/b", body=b'{"name":"b"}').status == 200
        spans: list[tuple[float, float]] = []

        def one() -> None:
            t = time.perf_counter()
            assert Client(sim.ports["gcs"], sign=False).request(
                "GET", "/storage/v1/b/b").status == 200
            spans.append((t, time.perf_counter()))

        time.sleep(0.3)  # the bucket's creation worked off
        threads = [threading.Thread(target=one) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert min(end - start for start, end in spans) >= 0.19
        assert max(end for _, end in spans) - min(start for start, _ in spans) >= 0.59


# -- faults ------------------------------------------------------------------------------------


def test_a_lost_answer_happened_and_the_client_saw_a_closed_connection(azure: CloudSim) -> None:
    c = Client(azure.ports["blob"])
    c.request("PUT", blob_path("c") + "?restype=container")
    armed = azure.set_faults(lose=[{"op": "put_blob", "times": 1}])
    assert armed["scripted"] == [{"op": "put_blob", "remaining": 1, "kind": "lose"}]
    with pytest.raises((ConnectionError, http.client.RemoteDisconnected)):
        c.request("PUT", blob_path("c", "f"), body=b"data",
                  headers={"x-ms-blob-type": "BlockBlob"})
    assert [o["key"] for o in azure.objects("c") if not o["is_dir"]] == ["f"]
    stats = azure.stats()
    assert stats["lost"] == 1 and stats["lost_by_op"] == {"put_blob": 1}
    # the next one is answered
    assert c.request("HEAD", blob_path("c", "f")).status == 200


def test_scripted_failures_and_random_throttling(gcs: CloudSim) -> None:
    c = Client(gcs.ports["gcs"], sign=False)
    c.request("POST", "/storage/v1/b", body=b'{"name":"b"}')
    gcs.set_faults(fail=[{"op": "get_bucket", "times": 2, "status": 500,
                          "code": "backendError"}])
    got = [c.request("GET", "/storage/v1/b/b") for _ in range(3)]
    assert [r.status for r in got] == [500, 500, 200]
    assert got[0].json()["error"]["errors"][0]["reason"] == "backendError"
    gcs.set_faults(throttle_rate=1.0, ops=["get_bucket"], seed=1)
    r = c.request("GET", "/storage/v1/b/b")
    assert r.status == 429 and r.headers["retry-after"] == "1"
    assert c.request("GET", gcs_object("b", "x")).status == 404  # other operations pass
    stats = gcs.stats()
    assert stats["failed_injected"] == 2 and stats["throttled"]["injected"] == 1
    gcs.set_faults(clear=True)
    assert c.request("GET", "/storage/v1/b/b").status == 200


# -- the process -------------------------------------------------------------------------------


def _listening(pid: int) -> list[tuple[str, int]]:
    """The (address, port) of every TCP socket ``pid`` listens on (from /proc)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except FileNotFoundError:  # closed since it was listed (a connection ending): not
            continue  # a listening socket, which lives as long as the process
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in list(f)[1:]:
                cols = line.split()
                if cols[3] == "0A" and cols[9] in inodes:  # LISTEN
                    host, port = cols[1].split(":")
                    addr = socket.inet_ntop(socket.AF_INET, bytes.fromhex(host)[::-1]) \
                        if len(host) == 8 else host
                    out.append((addr, int(port, 16)))
    return out


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_binds_only_loopback(adls: CloudSim) -> None:
    listening = _listening(adls.pid)
    assert sorted(port for _, port in listening) == sorted(
        v for k, v in adls.ports.items() if k != "pid")
    assert {addr for addr, _ in listening} == {"127.0.0.1"}


def _gone(pid: int, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:  # a zombie of ours counts as gone
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return True
        except ChildProcessError:
            pass
        time.sleep(0.05)
    return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG")
def test_dies_with_its_parent() -> None:
    # a parent that starts the simulator, reports its pid, and is then killed (SIGKILL: no
    # atexit, no context manager)
    code = ("import sys; from committer.testing.cloud_sim import CloudSim\n"
            "sim = CloudSim(service='gcs', latency_ms=0).start()\n"
            "print(sim.pid, flush=True); sys.stdin.read()\n")
    parent = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, cwd=Path(__file__).parents[3])
    try:
        assert parent.stdout is not None
        pid = int(parent.stdout.readline())
        assert not _gone(pid, 0.2)
        parent.send_signal(signal.SIGKILL)
        parent.wait(60)
        assert _gone(pid, 60)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(60)


def test_stops_at_the_end_of_its_stdin_and_on_sigterm() -> None:
    argv = [sys.executable, "-m", "committer.testing.cloud_sim", *SimOptions(
        service="gcs", latency_ms=0).argv()]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdin is not None
    assert b'"gcs"' in proc.stdout.readline()
    proc.stdin.close()
    assert proc.wait(60) == 0
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    assert b'"control"' in proc.stdout.readline()
    proc.terminate()
    assert proc.wait(60) == 0


def test_options_are_checked() -> None:
    for bad in ({"service": "s3"}, {"latency_ms": 10, "p99_ms": 5}, {"ops_limit": -1},
                {"burst_s": 0}, {"serve_rate": -1}):
        with pytest.raises(ValueError):
            SimOptions(**bad)
    out = subprocess.run([sys.executable, "-m", "committer.testing.cloud_sim", "--p99-ms", "1"],
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
                         check=False)
    assert out.returncode == 2 and "p99_ms" in out.stderr
