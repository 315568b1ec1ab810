"""The commit journal: when it is written, and what each state promises.

``<job attempt dir>/_journal.json`` (its format: ``manifest_schema.journal``) is written
(write-then-replace, so it is always whole) at every state change, never per file:

    loading -> planned -> partitions_moved -> renaming -> renamed -> success_written -> cleaning
        [-> cleaned, when cleanup is skipped; otherwise the journal is deleted with the job]

``loading`` is written while the manifests are read (or before, without a pool), so a commit
killed after it leaves the mode and task set it was given; killed before, nothing had moved.
``renaming`` is saved while the directories are created and the first files renamed (nothing
reads it but people: recovery treats ``planned`` and ``renaming`` alike) and ``renamed`` while
``_SUCCESS`` is written (``transaction.py``). ``planned`` is written before
the first rename, delete or directory create, and holds everything resume and rollback need
besides the store itself: the identity of every manifest the plan was built from (resume refuses
manifests that changed), the data moved aside, and the directories that did not exist yet;
before it, the identities of the sources whose manifest entries carry none are saved beside it
(``identities.py``). The rename stage records nothing per file: renames are idempotent given
those identities (a source that is gone and a destination that provably *is* it counts as done),
so resume re-runs the stage and rollback reverses it from the manifests. ``cleaning`` is the
point of no return: moved-aside data is being deleted, so from then on the commit can only be
finished, not undone.
``rolling_back`` marks a rollback in progress; only rollback may continue it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time

import orjson

from committer.errors import JobConflictError
from committer.layout import JobLayout
from committer.store.managed import ManagedStore
from manifest_schema.journal import Journal, State

JOURNAL_LIMIT = 512 * 1024 * 1024


def load_journal(store: ManagedStore, layout: JobLayout) -> Journal | None:
    """The job attempt's journal, or ``None`` if no commit of it ever started; a
    ``FormatError`` naming the file if it cannot be read."""
    data = store.read_if_exists(layout.journal, JOURNAL_LIMIT)
    return None if data is None else Journal.loads(data, layout.journal)


def save_journal(store: ManagedStore, layout: JobLayout, journal: Journal) -> Journal:
    """Save ``journal`` (stamped with the time) whole; returns what was saved."""
    journal = dataclasses.replace(journal, updated_ms=int(time.time() * 1000))
    store.save_atomic(layout.journal, orjson.dumps(journal.to_json()),
                      temp_path=layout.journal_temp)
    return journal


def advance(store: ManagedStore, layout: JobLayout, journal: Journal, state: State) -> Journal:
    """Move the journal forward to ``state`` (never back; a no-op when already there)."""
    if journal.state == State.ROLLING_BACK:
        raise JobConflictError(f"job {journal.job_id} is being rolled back; run rollback again "
                               "to finish it")
    if state <= journal.state:
        return journal
    return save_journal(store, layout, dataclasses.replace(journal, state=state))


def content_identity(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def manifest_identities(store: ManagedStore, layout: JobLayout) -> dict[str, tuple[str, int]]:
    """``manifest path -> (identity, size)`` from one listing of the manifest directory.

    A store's etag changes whenever an object is rewritten (local etags include the inode,
    which the write-then-rename of a task commit changes), so one listing identifies every
    manifest without reading any; a store without etags pays one read per manifest.
    """
    out: dict[str, tuple[str, int]] = {}
    for status in store.list_dir(layout.manifests_dir):
        if status.is_dir:
            continue
        identity = status.etag
        if identity is None:
            identity = content_identity(store.read_bytes(status.path))
        out[status.path] = (identity, status.size)
    return out
