"""Helpers for the core suites: build task output through the public API, snapshot trees.

The store-generic tests of the core (task commit, job commit, the protocol properties) take a
``store_target`` fixture: a :class:`StoreTarget`, the store under test plus the test's own view
of it. In ``tests/committer`` that is local disk (:class:`LocalTarget`); the very same test
functions run on Azurite, fake-gcs-server, the ADLS Gen2 stub (hierarchical namespace) and
fake-gcs-server behind the moveTo proxy, from ``tests/store/test_core_on_emulators.py``,
whose ``store_target`` is an ``tests.store.targets.EmulatorTarget``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from hypothesis import HealthCheck, settings

from committer import CommitterConfig, JobCommitter, TaskAttemptCommitter, task_ids
from committer.errors import PathNotFoundError, TransientStoreError
from committer.store import ManagedStore, open_store
from committer.store.base import Store
from committer.store.http.strain import Strain
from committer.store.local import LocalStore

JOB_ID = "job_20260101_0001"
#: the destination's name: it needs URI escaping (HADOOP-17112), on every store
DEST_NAME = "dest dir ü #%"


T = TypeVar("T")

#: tries of the test's own access to a store (below)
_TRIES = 5


def _again(call: Callable[[], T]) -> T:
    """The test's own access to the store it sets up and inspects, a transient failure tried
    again as the committers' managed stores do: on a loaded machine an emulator resets a
    reused connection now and then (Azurite failed a test's own write of its input at load
    15). What the tests test is the committers' handling of such failures, not this."""
    for attempt in range(1, _TRIES + 1):
        try:
            return call()
        except TransientStoreError:
            if attempt == _TRIES:
                raise
    raise AssertionError("unreachable")


class PinnedStrain(Strain):
    """A cloud store's strain (``committer/store/http/strain.py``) as a test sets it:
    ``slowed`` (from the ``after``-th answer on, if given, until before the ``until``-th),
    never refusing, whatever the answers say. A test of what the store does with or without
    strain must not hang on how busy the machine is: this client's own lag on a loaded
    machine reads as a slowed service."""

    def __init__(self, slowed: bool = False, after: int | None = None,
                 until: int | None = None) -> None:
        super().__init__()
        self.slowed = slowed
        self.after = after
        self.until = until
        self.answers = 0

    def answered(self, seconds: float, now: float = 0.0) -> None:
        self.answers += 1
        if self.after is not None and self.answers >= self.after:
            self.slowed = self.until is None or self.answers < self.until

    def refused(self, now: float) -> None:
        pass


def pin_strain(store: ManagedStore | Store, strain: Strain | None = None) -> Strain:
    """Give a cloud store's limit ``strain`` (default: never strained); returned."""
    backend = store.backend if isinstance(store, ManagedStore) else store
    pinned = strain if strain is not None else PinnedStrain()
    backend.limit.strain = pinned  # type: ignore[attr-defined]
    return pinned


def fast_config(**changes: Any) -> CommitterConfig:
    """Few threads and millisecond retry back-off, so failure paths run quickly."""
    values: dict[str, Any] = {
        "io_threads": 4,
        "retry_initial_delay_ms": 1,
        "retry_max_delay_ms": 4,
    }
    values.update(changes)
    return CommitterConfig(**values)


def tree(root: Path) -> dict[str, bytes | None]:
    """Every file (with its bytes) and directory (``None``) below ``root``, by relative path."""
    out: dict[str, bytes | None] = {}
    for here, dirs, files in os.walk(root):
        rel_here = os.path.relpath(here, root)
        for d in dirs:
            out[os.path.normpath(os.path.join(rel_here, d)) + "/"] = None
        for f in files:
            out[os.path.normpath(os.path.join(rel_here, f))] = Path(here, f).read_bytes()
    return out


def is_hidden(rel: str) -> bool:
    """True for paths a reader of the table does not see: a ``_``/``.`` path segment."""
    return any(part.startswith(("_", ".")) for part in rel.split("/"))


def visible_of(snapshot: Mapping[str, bytes | None]) -> dict[str, bytes]:
    """The data files of a :func:`tree`-shaped snapshot, as a reader of the table sees them."""
    return {rel: data for rel, data in snapshot.items()
            if data is not None and not is_hidden(rel)}


def visible_files(root: Path) -> dict[str, bytes]:
    """Data files as a reader of the table sees them: no ``_``/``.`` hidden path segments."""
    return visible_of(tree(root))


class StoreTarget:
    """A store the core suites run against, and the test's own access to it.

    The committers under test reach the store through :meth:`managed` (or a
    ``FaultInjectingStore`` around :meth:`backend`); the test itself writes task output, reads
    results and checks existence through the methods below, which never see injected faults
    (the application's writer and the table's reader are not the committer).

    This base class is the generic implementation for any backend (the emulators use it);
    :class:`LocalTarget` keeps the local suites' direct filesystem calls.
    """

    #: "local", "azurite", "gcs", "adls-hns" or "gcs-move"
    kind = "store"

    # -- places ------------------------------------------------------------------------------------

    def new_root(self) -> str:
        """A fresh, empty location no other test or example uses."""
        raise NotImplementedError

    def new_dest(self, name: str = DEST_NAME) -> str:
        """A fresh destination directory (created) whose name needs URI escaping."""
        dest = f"{self.new_root()}/{name}"
        self.mkdirs(dest)
        return dest

    def discard(self, root: str) -> None:
        """Reclaim a root from :meth:`new_root` (best effort)."""

    # -- the store under test ------------------------------------------------------------------

    def backend(self) -> Store:
        """The backend the committers' stores wrap."""
        raise NotImplementedError

    def config(self, **changes: Any) -> CommitterConfig:
        return fast_config(**changes)

    def managed(self, location: str, config: CommitterConfig | None = None) -> ManagedStore:
        return open_store(location, config or self.config(), backend=self.backend())

    def new_job(self, dest: str, *, job_id: str = JOB_ID, config: CommitterConfig | None = None,
                store: ManagedStore | None = None, **kwargs: Any) -> JobCommitter:
        config = config or self.config()
        job = JobCommitter(dest, job_id, config=config,
                           store=store or self.managed(dest, config), **kwargs)
        job.setup()
        return job

    def task_attempt(self, dest: str, task: int, attempt: int, files: Mapping[str, bytes], *,
                     job_id: str = JOB_ID, config: CommitterConfig | None = None,
                     store: ManagedStore | None = None) -> TaskAttemptCommitter:
        """A task attempt that has set up and written ``files`` (not yet committed)."""
        config = config or self.config()
        task_id, attempt_id = task_ids(job_id, task, attempt)
        ta = TaskAttemptCommitter(dest, job_id, task_id, attempt_id, config=config,
                                  store=store or self.managed(dest, config))
        ta.setup()
        self.write_output(ta, files)
        return ta

    # -- the test's own access (no faults) -----------------------------------------------------

    def write_output(self, ta: TaskAttemptCommitter, files: Mapping[str, bytes]) -> None:
        for rel, data in files.items():
            self.write(ta.output_path(rel), data)

    def write(self, location: str, data: bytes) -> None:
        _again(lambda: self.backend().write_bytes(location, data))

    def read(self, location: str) -> bytes:
        return _again(lambda: self.backend().read_bytes(location))

    def mkdirs(self, location: str) -> None:
        _again(lambda: self.backend().mkdirs(location))

    def exists(self, location: str) -> bool:
        return _again(lambda: self.backend().exists(location))

    def is_dir(self, location: str) -> bool:
        try:
            return _again(lambda: self.backend().stat(location)).is_dir
        except PathNotFoundError:
            return False

    def delete_tree(self, location: str) -> None:
        _again(lambda: self.backend().delete_tree(location))

    def tree(self, root: str) -> dict[str, bytes | None]:
        """Like :func:`tree`: every file (bytes) and directory (``None``, key ending in "/")
        below ``root``, by relative path; ``{}`` when ``root`` is absent.

        Files come from the store's whole-prefix listing (on an object store, every object
        there is, even one a directory of the same name would shadow in a directory listing);
        directories from a walk of directory listings."""
        store = self.backend()
        root = root.rstrip("/")
        out: dict[str, bytes | None] = {}
        pending = [root]
        while pending:
            here = pending.pop()
            try:
                children = _again(partial(store.list_dir, here))
            except PathNotFoundError:
                continue
            for status in children:
                if status.is_dir:
                    out[status.path[len(root) + 1:] + "/"] = None
                    pending.append(status.path)
        for status in _again(lambda: list(store.walk_files(root))):
            out[status.path[len(root) + 1:]] = _again(partial(store.read_bytes, status.path))
        return out

    def visible_files(self, root: str) -> dict[str, bytes]:
        return visible_of(self.tree(root))

    # -- property tests ------------------------------------------------------------------------

    def settings(self, max_examples: int, *, emulator_examples: int) -> settings:
        """Hypothesis settings for a property test: ``max_examples`` random examples on local
        disk; an emulator runs ``emulator_examples`` (``EmulatorTarget.settings``)."""
        return settings(max_examples=max_examples, deadline=None,
                        suppress_health_check=[HealthCheck.too_slow])

    def close(self) -> None:
        """Release what the target opened (connections)."""


class LocalTarget(StoreTarget):
    """Local disk under ``base``, read and written with plain filesystem calls."""

    kind = "local"

    def __init__(self, base: Path | None = None) -> None:
        self.base = base  # None: the system's temporary directory

    def new_root(self) -> str:
        return tempfile.mkdtemp(prefix="root-", dir=self.base)

    def discard(self, root: str) -> None:
        shutil.rmtree(root, ignore_errors=True)

    def backend(self) -> Store:
        return LocalStore()

    def managed(self, location: str, config: CommitterConfig | None = None) -> ManagedStore:
        return open_store(location, config or self.config())

    def write(self, location: str, data: bytes) -> None:
        path = Path(location)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)

    def read(self, location: str) -> bytes:
        return Path(location).read_bytes()

    def mkdirs(self, location: str) -> None:
        Path(location).mkdir(parents=True, exist_ok=True)

    def exists(self, location: str) -> bool:
        return Path(location).exists()

    def is_dir(self, location: str) -> bool:
        return Path(location).is_dir()

    def delete_tree(self, location: str) -> None:
        shutil.rmtree(location)

    def tree(self, root: str) -> dict[str, bytes | None]:
        return tree(Path(root))


def write_files(ta: TaskAttemptCommitter, files: Mapping[str, bytes]) -> None:
    """Write a task's output files on local disk, as the application's writer would."""
    LOCAL.write_output(ta, files)




#: the local store the module-level helpers below use (temporary roots in the system's default)
LOCAL = LocalTarget()


def task_attempt(
    dest: Path | str,
    task: int,
    attempt: int,
    files: Mapping[str, bytes],
    *,
    job_id: str = JOB_ID,
    config: CommitterConfig | None = None,
    store: ManagedStore | None = None,
) -> TaskAttemptCommitter:
    """A task attempt on local disk that has set up and written ``files`` (not committed)."""
    return LOCAL.task_attempt(str(dest), task, attempt, files, job_id=job_id, config=config,
                              store=store)


def new_job(dest: Path | str, *, job_id: str = JOB_ID, config: CommitterConfig | None = None,
            store: ManagedStore | None = None, **kwargs: Any) -> JobCommitter:
    return LOCAL.new_job(str(dest), job_id=job_id, config=config, store=store, **kwargs)


def strip_identities(manifests_dir: Path | str) -> int:
    """Rewrite every committed manifest under ``manifests_dir`` without the file entries'
    identity (``e``), as Hadoop's own task committer writes them on local disk, HDFS and most
    stores. Returns how many identities were removed."""
    import orjson

    removed = 0
    for path in sorted(Path(manifests_dir).glob("*-manifest.json")):
        doc = orjson.loads(path.read_bytes())
        for entry in doc.get("files", []):
            removed += entry.pop("e", None) is not None
        path.write_bytes(orjson.dumps(doc))
    return removed
