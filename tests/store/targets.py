"""Emulators and stubs as stores under test for the core suites (``tests/committer/helpers.py``).

An :class:`EmulatorTarget` is a :class:`StoreTarget` on one of four rename paths:

- ``azurite``: Azurite (``abfs://``, flat Blob): renames are Copy Blob + Delete Blob;
- ``gcs``: fake-gcs-server (``gs://``), which refuses the move API: rewrite + delete;
- ``adls-hns``: the in-memory ADLS Gen2 stub with a hierarchical namespace
  (``committer.testing.adls_stub``): renames are the Data Lake rename (one DFS request);
- ``gcs-move``: fake-gcs-server behind the move proxy (``committer.testing.gcs_move_proxy``):
  renames are one ``moveTo`` request.

Every new root is a fresh bucket (container), so tests and hypothesis examples never see each
other's objects and the emulators do not slow down as one container fills. One backend serves
the whole test (the committers' stores wrap it, as they would in one process); it is closed with
the target. On the two stub targets a :class:`RenamePath` reads the stub's request log, so the
fixture can check that the special path, and never its fallback, was taken.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, Phase, settings

from committer.config import CommitterConfig
from committer.store import open_backend
from committer.store.base import Store
from committer.testing.emulators import RunningEmulator
from committer.testing.http_stub import RecordedRequest
from tests.committer.helpers import StoreTarget, fast_config


@dataclass(frozen=True)
class RenamePath:
    """Which requests a target's renames must be, read from its stub's request log."""

    #: the requests the stub received so far, in order (``AdlsStub.requests``,
    #: ``GcsMoveProxy.requests``)
    log: Callable[[], list[RecordedRequest]]
    #: the stub's name for the special rename ("dfs_rename", "move")
    rename_op: str
    #: the stub's names for the requests of the fallback (copy / rewrite + delete)
    fallback_ops: frozenset[str]

    def renames(self) -> list[RecordedRequest]:
        """The special renames the stub received so far; fails on any fallback request."""
        log = self.log()
        fallback = sorted({r.op for r in log if r.op in self.fallback_ops})
        assert not fallback, (f"a rename took the fallback path ({fallback} requests), "
                              f"not {self.rename_op}")
        return [r for r in log if r.op == self.rename_op]


class EmulatorTarget(StoreTarget):
    """Fresh buckets (containers) in one endpoint, reached with its storage options."""

    def __init__(self, kind: str, scheme: str, options: Mapping[str, Any], *,
                 rename_path: RenamePath | None = None) -> None:
        self.kind = kind
        self.scheme = scheme
        self.options: dict[str, Any] = dict(options)
        #: None on the emulators, whose requests are not recorded
        self.rename_path = rename_path
        self._backend: Store | None = None

    @classmethod
    def on_emulator(cls, kind: str, emulator: RunningEmulator) -> EmulatorTarget:
        return cls(kind, emulator.scheme, emulator.storage_options)

    def new_root(self) -> str:
        root = f"{self.scheme}://t{uuid.uuid4().hex[:16]}"
        self.backend().mkdirs(root)  # creates the bucket / container
        return root

    def backend(self) -> Store:
        if self._backend is None:
            self._backend = open_backend(f"{self.scheme}://any", self.options)
        return self._backend

    def config(self, **changes: Any) -> CommitterConfig:
        return fast_config(storage_options=self.options, **changes)

    def settings(self, max_examples: int, *, emulator_examples: int) -> settings:
        # Bounded: the test's emulator budget (an example is two whole histories, a few hundred
        # requests, ~0.3-2 s on Azurite). Random like the local run, so CI keeps exploring new
        # histories (a derandomized run here drew two thirds aborted jobs, every run); a
        # failure prints its history and a reproduction blob. No shrinking: at seconds per
        # example it could outlast the test timeout; the printed history replays on local disk
        # (``check_history(history, target)``) in milliseconds.
        return settings(max_examples=emulator_examples, deadline=None, print_blob=True,
                        phases=(Phase.explicit, Phase.reuse, Phase.generate),
                        suppress_health_check=[HealthCheck.too_slow])

    def close(self) -> None:
        if self._backend is not None:
            self._backend.close()
            self._backend = None
