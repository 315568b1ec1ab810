"""Every Azure request carries a fresh ``x-ms-client-request-id``; a failure names it and the
service's ``x-ms-request-id`` (what a support ticket asks for). On the simulated account."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator

import pytest

from committer.errors import StoreError, TransientStoreError
from committer.store import open_backend
from committer.store.azure.wire import client_request_id
from committer.testing.cloud_sim import CloudSim, start_cloud_sim

_UUID4 = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")


@pytest.fixture(scope="module")
def sim() -> Iterator[CloudSim]:
    with start_cloud_sim(service="blob", latency_ms=0, p99_ms=0) as sim:
        yield sim


def test_client_request_ids_are_fresh_uuid4s() -> None:
    ids = {client_request_id() for _ in range(1000)}
    assert len(ids) == 1000 and all(_UUID4.fullmatch(i) for i in ids)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_process_draws_ids_of_its_own() -> None:
    # PySpark's workers are forked from one daemon: each must not repeat its parent's ids
    client_request_id()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next ids, to the parent
        try:
            os.write(write, " ".join(client_request_id() for _ in range(100)).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child = set(pipe.read().split())
    os.waitpid(pid, 0)
    parent = {client_request_id() for _ in range(100)}
    assert len(child) == 100 and not child & parent


def test_a_failure_names_both_request_ids(sim: CloudSim, caplog: pytest.LogCaptureFixture
                                          ) -> None:
    store = open_backend("abfs://ids/x", sim.storage_options)
    try:
        store.write_bytes("abfs://ids/dir/a", b"a")
        # every read refused (a slow read's hedged copy takes a refusal too)
        sim.set_faults(fail=[{"op": "get_blob", "times": 100, "status": 403,
                              "code": "AuthorizationPermissionMismatch"}])
        messages = []
        with caplog.at_level(logging.DEBUG, logger="committer.store.azure"):
            for _ in range(2):
                with pytest.raises(StoreError) as caught:
                    store.read_bytes("abfs://ids/dir/a")
                messages.append(str(caught.value))
        ids = [re.search(r"x-ms-client-request-id (\S+?)[;)]", m) for m in messages]
        assert all(ids), messages
        client = [i.group(1) for i in ids if i is not None]
        assert all(_UUID4.fullmatch(c) for c in client) and client[0] != client[1]
        assert all("x-ms-request-id " in m and "AuthorizationPermissionMismatch" in m
                   for m in messages)
        assert all(any(c in r.getMessage() for r in caplog.records) for c in client)  # logged
    finally:
        sim.set_faults(clear=True)
        store.close()


def test_no_answer_names_the_client_request_id(sim: CloudSim) -> None:
    store = open_backend("abfs://ids2/x", sim.storage_options)
    try:
        store.write_bytes("abfs://ids2/a", b"a")
        # (a lost answer to a read, or to a blob written over whatever is there, is sent
        # again by the client: a create-if-absent's is not)
        sim.set_faults(lose=[{"op": "put_blob", "times": 1}])
        with pytest.raises(TransientStoreError) as caught:
            store.write_bytes("abfs://ids2/b", b"b", exclusive=True)
        found = re.search(r"x-ms-client-request-id (\S+?)\)", str(caught.value))
        assert found and _UUID4.fullmatch(found.group(1)), str(caught.value)
    finally:
        sim.set_faults(clear=True)
        store.close()


def test_a_blob_written_over_whatever_is_there_is_sent_again_when_its_answer_is_lost(
        sim: CloudSim) -> None:
    """The same bytes written twice leave the same blob: a lost answer (the write carried
    out, the connection closed before its answer) costs no error, only the request again."""
    store = open_backend("abfs://ids3/x", sim.storage_options)
    try:
        store.write_bytes("abfs://ids3/a", b"a")  # (a connection to reuse)
        sim.set_faults(lose=[{"op": "put_blob", "times": 1}])
        store.write_bytes("abfs://ids3/b", b"b")
        assert store.read_bytes("abfs://ids3/b") == b"b"
    finally:
        sim.set_faults(clear=True)
        store.close()
