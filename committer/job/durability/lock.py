"""The destination lock: a lease that serialises job commits on one destination.

Leases are files ``<dest>/_manifest_committer/lock/<generation>.lease``, each created with the
store's atomic create-if-absent (``O_EXCL`` on local disk, If-None-Match on Azure,
ifGenerationMatch=0 on GCS). The holder is the owner of the highest generation present. To take
the lock a job lists the lock directory and, if the newest lease is absent, released or stale,
creates the *next* generation: of any number of jobs racing for the same generation exactly one
create succeeds, so a stale lease is taken over safely without ever deleting a lease that
another job might hold. The winner then deletes the older generations. Releasing marks the
lease released rather than deleting it, so generations only ever grow: a job that decided on a
stale view can never create a generation that someone else already moved past (one small
released lease therefore stays in the lock directory).

A lease names its owner (job, host, pid) and an expiry; a heartbeat thread renews it (write then
replace, so readers never see half a lease) every quarter of the lease time, and notices if it
was taken over (a newer generation appeared), after which :meth:`DestinationLock.check` raises.
A lease is stale when its expiry has passed, or at once when its owner ran on this host and that
process no longer exists (a driver killed by SIGKILL); a lease of the same job left by this
very process (its release failed with the store) is taken back at once too. Clocks of the hosts
sharing a destination must agree to well within the lease time. Every time the lock reads or
waits goes through its :class:`LockClock` (tests give one of their own).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import random
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from types import TracebackType

import orjson

from committer.errors import (
    FormatError,
    JobConflictError,
    PathExistsError,
    PathNotFoundError,
    StoreError,
)
from committer.layout import basename, lease_generation, lease_path, lock_dir
from committer.store.managed import ManagedStore
from manifest_schema.records import LeaseRecord

LOG = logging.getLogger("committer.job.durability.lock")

LEASE_LIMIT = 65536


@dataclass(frozen=True)
class Lease(LeaseRecord):
    """A lease as found in the lock directory: its record, its generation and where it lies."""

    generation: int = 0
    path: str = ""

    @classmethod
    def of(cls, record: LeaseRecord, generation: int, path: str) -> Lease:
        return cls(**dataclasses.asdict(record), generation=generation, path=path)

    def describe(self) -> str:
        expires = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.expires_ms / 1000))
        return (f"job {self.job_id} ({self.purpose}) on {self.host} pid {self.pid}, "
                f"lease {self.path} expiring {expires}")


class LockClock:
    """The time a lock reads: wall-clock milliseconds for leases (what hosts sharing a
    destination compare), a monotonic clock and sleeps for a wait, and the heartbeat's pause
    between renewals, which a release ends early."""

    def wall_ms(self) -> int:
        return int(time.time() * 1000)

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def pause(self, stop: threading.Event, seconds: float) -> bool:
        """Wait ``seconds``, or until ``stop`` is set: whether it was."""
        return stop.wait(seconds)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


def is_stale(lease: Lease, now_ms: int) -> bool:
    if now_ms > lease.expires_ms:
        return True
    return lease.host == socket.gethostname() and not _pid_alive(lease.pid)


class DestinationLock:
    """Context manager: ``with DestinationLock(store, dest, job_id, ...): commit``."""

    def __init__(self, store: ManagedStore, dest: str, job_id: str, *, wait_ms: int,
                 lease_ms: int, purpose: str = "commit", clock: LockClock | None = None) -> None:
        self.store = store
        self.clock = clock or LockClock()
        self.dir = lock_dir(dest)
        self.dest = dest
        self.job_id = job_id
        self.wait_ms = wait_ms
        self.lease_ms = lease_ms
        self.purpose = purpose
        self.token = uuid.uuid4().hex
        self.lease: Lease | None = None
        self.lost: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- reading leases --------------------------------------------------------------------

    def _generations(self) -> list[tuple[int, str]]:
        try:
            listing = self.store.list_dir(self.dir)
        except PathNotFoundError:
            return []
        out = []
        for st in listing:
            generation = lease_generation(basename(st.path))
            if generation is not None:
                out.append((generation, st.path))
        return sorted(out)

    def _read(self, generation: int, path: str) -> Lease | None:
        try:
            data = self.store.read_if_exists(path, LEASE_LIMIT)
            if data is None:
                return None  # released in the meantime
            return Lease.of(LeaseRecord.loads(data, path), generation, path)
        except FormatError:
            # Leases are created whole and renewed by replace; an unreadable one is damage.
            # Treat it as held until the file itself is older than a lease time.
            st = self.store.stat_or_none(path)
            modified = (st.modified if st is not None and st.modified
                        else self.clock.wall_ms() / 1000)
            unreadable = LeaseRecord("(unreadable)", "", "?", 0, int(modified * 1000),
                                     int(modified * 1000) + self.lease_ms, "?")
            return Lease.of(unreadable, generation, path)

    def holder(self) -> Lease | None:
        """The live lease on the destination, if any."""
        gens = self._generations()
        if not gens:
            return None
        lease = self._read(*gens[-1])
        if lease is None or lease.released or is_stale(lease, self.clock.wall_ms()):
            return None
        return lease

    # -- acquiring and releasing -----------------------------------------------------------

    def _left_by_this_job(self, lease: Lease) -> bool:
        """A lease of this same job in this same process whose release failed (its store was
        failing): the commit that held it is over, so its abort or resume may take it."""
        return (lease.job_id == self.job_id and lease.host == socket.gethostname()
                and lease.pid == os.getpid() and lease.owner != self.token)

    def _record(self, acquired_ms: int, *, released: bool = False) -> LeaseRecord:
        return LeaseRecord(self.job_id, self.token, socket.gethostname(), os.getpid(),
                           acquired_ms, self.clock.wall_ms() + self.lease_ms, self.purpose,
                           released)

    def _document(self, acquired_ms: int, *, released: bool = False) -> bytes:
        return orjson.dumps(self._record(acquired_ms, released=released).to_json())

    def acquire(self) -> Lease:
        clock = self.clock
        deadline = clock.monotonic() + self.wait_ms / 1000
        delay = 0.05
        while True:
            gens = self._generations()
            top = gens[-1] if gens else (0, "")
            current = self._read(*top) if gens else None
            now = clock.wall_ms()
            if current is None or current.released or is_stale(current, now) \
                    or self._left_by_this_job(current):
                if current is not None and not current.released:
                    LOG.warning("taking over the stale lock of %s on %s", current.describe(),
                                self.dest)
                generation = top[0] + 1
                path = lease_path(self.dest, generation)
                record = self._record(now)
                try:
                    self.store.write_bytes(path, orjson.dumps(record.to_json()), exclusive=True)
                except (PathExistsError, PathNotFoundError):
                    # another job won this generation (or removed the empty lock directory
                    # between our mkdir and create): look again at once
                    continue
                self.lease = Lease.of(record, generation, path)
                for _gen, old in gens:  # every older generation is ours to remove now
                    self.store.delete_file(old)
                self._start_heartbeat()
                return self.lease
            if clock.monotonic() >= deadline:
                raise JobConflictError(
                    f"destination {self.dest} is locked by {current.describe()}; job "
                    f"{self.job_id} waited {self.wait_ms} ms (mapreduce.manifest.committer."
                    "lock.wait.ms). If that job is dead, its lease expires by itself.")
            # jittered backoff, the last pause ending at the deadline (not short of it)
            clock.sleep(min(delay * random.uniform(0.5, 1),
                            max(0.0, deadline - clock.monotonic())))
            delay = min(delay * 2, 1.0)

    def _start_heartbeat(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._heartbeat, name="lease-heartbeat",
                                         daemon=True)
        self._thread.start()

    def _heartbeat(self) -> None:
        interval = self.lease_ms / 4000
        while not self.clock.pause(self._stop, interval):
            lease = self.lease
            if lease is None:
                return
            try:
                gens = self._generations()
                if not gens or gens[-1][0] != lease.generation:
                    self.lost = (f"the lease {lease.path} was taken over "
                                 f"(newest generation is now {gens[-1][0] if gens else None})")
                    LOG.error("job %s lost the lock on %s: %s", self.job_id, self.dest,
                              self.lost)
                    return
                self.store.save_atomic(lease.path, self._document(lease.acquired_ms),
                                       temp_path=f"{lease.path}.{self.token}.tmp")
            except StoreError:
                LOG.warning("lease heartbeat for %s failed; retrying", lease.path,
                            exc_info=True)

    def check(self) -> None:
        """Raise if the lease was lost; called between commit stages."""
        if self.lost is not None:
            raise JobConflictError(f"job {self.job_id} lost the lock on {self.dest}: "
                                   f"{self.lost}")

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        lease, self.lease = self.lease, None
        if lease is None or self.lost is not None:
            return
        try:
            self.store.save_atomic(lease.path, self._document(lease.acquired_ms, released=True),
                                   temp_path=f"{lease.path}.{self.token}.tmp")
        except Exception:  # runs in finally blocks: never mask the error being raised
            LOG.warning("could not release the lease %s; it expires by itself", lease.path,
                        exc_info=True)

    def __enter__(self) -> DestinationLock:
        self.acquire()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()
