"""The simulator's in-memory storage: buckets (containers, filesystems) of objects, flat or with
a hierarchical namespace, listed in lexicographic order with markers.

Objects live in a tree of :class:`Dir` nodes keyed by path segment (``a/b/c`` is file ``c``
in directory ``b`` in directory ``a``), so a listing of one directory never scans the bucket,
a lookup is one dictionary probe per segment, full key strings are never stored, and a
directory rename is one move of a subtree. The tree is the same in both modes; what differs:

- **flat** (Blob without namespace, GCS): a directory node is only a grouping of keys; it is
  created by the first key below it and pruned when its last key goes. A name can be both an
  object and a prefix (``a/b`` and ``a/b/c``), and a key may end with ``/`` (GCS's ``dir/``
  placeholder is the file named ``""`` in directory ``dir``).
- **hierarchical** (ADLS Gen2): directories are real entries with their own record (etag,
  times, metadata ``hdi_isfolder=true``), created explicitly or as parents of a new path, and
  kept when empty; a name is a file or a directory, never both.
- a GCS bucket **with a hierarchical namespace** (``Bucket.hns``, in a flat namespace): keys
  as flat (``a/b`` and a folder ``a/b/`` may both exist, ``dir/`` is an object in folder
  ``dir/``), but its directories are folders: real, with a record, made as parents of a new
  key, kept when empty (``gcs_folders.py``).

Records are compact (``__slots__``): a version number ``seq`` (the Azure etag and the GCS
generation both derive from it), size, modification time, a 20-byte ``sums`` (MD5 then
CRC32C, big-endian), the bytes when the object has any (``None`` for a *content-less* object
from ``populate``, which reads as ``size`` zero bytes while reporting its random MD5 and
CRC32C as if they were its content's), and rarely-used properties in ``extra``.

Not thread-safe: the server runs every request on one event loop thread.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import hashlib
import random
import time
from collections.abc import Iterator
from typing import Final

__all__ = [
    "GENERATION_BASE",
    "Bucket",
    "Dir",
    "Entry",
    "Extra",
    "Namespace",
    "Obj",
    "PathConflict",
    "content_sums",
    "crc32c",
    "page_token",
    "token_name",
]

try:
    import google_crc32c as _crc_c

    def crc32c(data: bytes) -> int:
        """CRC32C (Castagnoli) of ``data``."""
        return int(_crc_c.value(data))
except ImportError:  # pragma: no cover - google-crc32c comes with gcsfs
    def _table() -> list[int]:
        out = []
        for i in range(256):
            c = i
            for _ in range(8):
                c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
            out.append(c)
        return out

    _CRC_TABLE: Final = _table()

    def crc32c(data: bytes) -> int:
        """CRC32C (Castagnoli) of ``data`` (table-driven, slow: google-crc32c is missing)."""
        c = 0xFFFFFFFF
        for b in data:
            c = _CRC_TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
        return c ^ 0xFFFFFFFF


#: GCS generations are this plus the record's ``seq``: they look like the service's
#: (microseconds since the epoch at the simulator's start) and only grow.
GENERATION_BASE: Final = int(time.time() * 1_000_000)


def content_sums(data: bytes) -> bytes:
    """The 20-byte ``sums`` of real content: its MD5, then its CRC32C."""
    return hashlib.md5(data).digest() + crc32c(data).to_bytes(4, "big")


class PathConflict(Exception):
    """A file is where a directory must be (hierarchical namespace)."""


class Extra:
    """The properties few objects have: user metadata, content type, creation time (when it
    differs from the modification time), and for a copy, its source's URL (the rest of a
    copy's ``x-ms-copy-*`` record derives from the record: its id from ``seq``, its completion
    time from ``mtime``; a copy here is always complete)."""

    __slots__ = ("content_type", "copy_source", "created", "metadata")

    def __init__(self, metadata: dict[str, str] | None = None, content_type: str | None = None,
                 created: float | None = None, copy_source: str | None = None) -> None:
        self.metadata = metadata
        self.content_type = content_type
        self.created = created
        self.copy_source = copy_source


class Obj:
    """One stored version of a file (or, on a hierarchical namespace, a directory's own
    record). Renames move the record; copies make a new one."""

    __slots__ = ("data", "extra", "mtime", "seq", "size", "sums")

    def __init__(self, seq: int, size: int, mtime: float, sums: bytes | None,
                 data: bytes | None, extra: Extra | None) -> None:
        self.seq = seq
        self.size = size
        self.mtime = mtime
        self.sums = sums
        self.data = data
        self.extra = extra

    @property
    def created(self) -> float:
        extra = self.extra
        return extra.created if extra is not None and extra.created is not None else self.mtime

    @property
    def metadata(self) -> dict[str, str]:
        extra = self.extra
        return extra.metadata if extra is not None and extra.metadata is not None else {}

    @property
    def content_type(self) -> str | None:
        return self.extra.content_type if self.extra is not None else None

    def content(self) -> bytes:
        """The bytes (``size`` zero bytes for a content-less object)."""
        return self.data if self.data is not None else bytes(self.size)


# Kinds of listing entries, in the order of ``Dir.entries``.
FILE: Final = 0  # a file (object)
SELF: Final = 1  # a hierarchical directory's own record (a blob with hdi_isfolder)
TREE: Final = 2  # what lies below a directory: its children, or a prefix with a delimiter


class Dir:
    """A directory node: files and subdirectories by segment name."""

    __slots__ = ("dirs", "files", "listing", "obj")

    def __init__(self, obj: Obj | None = None) -> None:
        self.files: dict[str, Obj] = {}
        self.dirs: dict[str, Dir] = {}
        self.obj = obj  # hierarchical: the directory's own record
        #: the sorted entries and their keys, cached for listings; whoever changes ``files``
        #: or ``dirs`` sets it to None
        self.listing: tuple[list[tuple[str, str, int]], list[str]] | None = None

    def changed(self) -> None:
        self.listing = None

    def empty(self) -> bool:
        return not self.files and not self.dirs

    def entries(self) -> tuple[list[tuple[str, str, int]], list[str]]:
        """``(sort key, name, kind)`` of every entry in lexicographic order of the keys they
        contribute: a file ``n`` as ``n``, a directory's subtree as ``n/`` (everything in it
        starts so), a hierarchical directory's own record as ``n``; and the sort keys alone
        (for bisection). Cached until the directory changes."""
        if self.listing is None:
            items = [(name, name, FILE) for name in self.files]
            for name, sub in self.dirs.items():
                items.append((name + "/", name, TREE))
                if sub.obj is not None:
                    items.append((name, name, SELF))
            items.sort()
            self.listing = items, [k for k, _, _ in items]
        return self.listing

    def count(self) -> tuple[int, int]:
        """``(files, directories)`` in this subtree (directories below, not this one)."""
        files, dirs = len(self.files), 0
        for sub in self.dirs.values():
            f, d = sub.count()
            files += f
            dirs += d + 1
        return files, dirs


def page_token(name: str) -> str:
    """The opaque continuation token of a listing that goes on at ``name``."""
    return base64.urlsafe_b64encode(name.encode("utf-8")).decode("ascii")


def token_name(token: str) -> str:
    """The name a :func:`page_token` continues at; ``ValueError`` if it is not one."""
    try:
        return base64.urlsafe_b64decode(token.encode("ascii")).decode("utf-8")
    except (binascii.Error, UnicodeError) as e:
        raise ValueError(f"not a continuation token: {token[:100]!r}") from e


class Entry:
    """One listing entry: an object (``obj`` set) or, with a delimiter, a prefix."""

    __slots__ = ("is_dir", "name", "obj")

    def __init__(self, name: str, obj: Obj | None, is_dir: bool) -> None:
        self.name = name
        self.obj = obj  # None: a prefix (BlobPrefix / GCS "prefixes")
        self.is_dir = is_dir  # a hierarchical directory's own record, or a prefix


class Bucket:
    """A container / filesystem / bucket (``hns``: a GCS bucket with folders)."""

    __slots__ = ("created", "hns", "name", "root", "seq")

    def __init__(self, name: str, seq: int, created: float, hns: bool = False) -> None:
        self.name = name
        self.root = Dir()
        self.seq = seq
        self.created = created
        self.hns = hns


class Namespace:
    """Every bucket of the account, and the counters records draw from."""

    def __init__(self, *, hierarchical: bool, seed: int | None = None) -> None:
        self.hierarchical = hierarchical
        self.buckets: dict[str, Bucket] = {}
        self._seq = 0
        self.files = 0  # objects stored (files; directories counted apart)
        self.dirs = 0  # hierarchical directories stored
        self._rng = random.Random(seed)
        #: Data Lake appends not yet flushed, by the ``seq`` of the file's record: position ->
        #: bytes (a flush makes a new record; a record renamed keeps its uncommitted data)
        self.uncommitted: dict[int, dict[int, bytes]] = {}
        #: Blob blocks staged (Put Block) by (container, name), block id -> bytes; and the
        #: committed block list of a blob's record, by its ``seq``
        self.blocks: dict[tuple[str, str], dict[str, bytes]] = {}
        self.committed_blocks: dict[int, list[tuple[str, bytes]]] = {}
        #: GCS: buckets are made with a hierarchical namespace unless asked otherwise
        self.hns_buckets = False

    # -- records ---------------------------------------------------------------------------

    def next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def random_sums(self) -> bytes:
        """A random MD5 and CRC32C for a content-less object."""
        return self._rng.getrandbits(160).to_bytes(20, "big")

    def new_file(self, data: bytes | None, size: int, *, sums: bytes | None = None,
                 now: float | None = None, extra: Extra | None = None) -> Obj:
        if sums is None:
            sums = content_sums(data) if data is not None else self.random_sums()
        return Obj(self.next_seq(), size, time.time() if now is None else now, sums, data,
                   extra)

    def new_dir_record(self, now: float | None = None) -> Obj:
        return Obj(self.next_seq(), 0, time.time() if now is None else now, None, None,
                   Extra(metadata={"hdi_isfolder": "true"}))

    # -- buckets ---------------------------------------------------------------------------

    def bucket(self, name: str) -> Bucket | None:
        return self.buckets.get(name)

    def create_bucket(self, name: str, hns: bool | None = None) -> Bucket | None:
        """The new bucket; ``None`` if it exists. ``hns``: with folders (GCS; default
        ``hns_buckets``)."""
        if name in self.buckets:
            return None
        bucket = Bucket(name, self.next_seq(), time.time(),
                        self.hns_buckets if hns is None else hns)
        self.buckets[name] = bucket
        return bucket

    def ensure_bucket(self, name: str) -> Bucket:
        found = self.buckets.get(name)
        if found is not None:
            return found
        created = self.create_bucket(name)
        assert created is not None
        return created

    def reset(self) -> None:
        self.buckets.clear()
        self.uncommitted.clear()
        self.blocks.clear()
        self.committed_blocks.clear()
        self.files = self.dirs = 0

    # -- paths -----------------------------------------------------------------------------

    def normalize(self, key: str) -> str:
        """The stored form of a key: a namespace's paths have no leading or trailing '/'."""
        return key.strip("/") if self.hierarchical else key

    @staticmethod
    def parent_dir(bucket: Bucket, parts: list[str]) -> Dir | None:
        """The directory holding the last segment of ``parts`` (``None``: not there)."""
        d = bucket.root
        for p in parts[:-1]:
            sub = d.dirs.get(p)
            if sub is None:
                return None
            d = sub
        return d

    @staticmethod
    def locate(bucket: Bucket, key: str) -> tuple[Dir | None, str]:
        """The directory that holds ``key``'s last segment (``None``: missing), and that
        segment."""
        d: Dir | None = bucket.root
        cut = key.rfind("/")
        if cut >= 0:
            for p in key[:cut].split("/"):
                d = d.dirs.get(p)  # type: ignore[union-attr]
                if d is None:
                    return None, ""
        return d, key[cut + 1:]

    def get(self, bucket: Bucket, key: str) -> Obj | None:
        """The file stored at ``key`` (not a directory)."""
        parent, leaf = self.locate(bucket, key)
        return None if parent is None else parent.files.get(leaf)

    def lookup(self, bucket: Bucket, key: str) -> tuple[Obj | None, Dir | None]:
        """What a hierarchical path names: ``(file, None)``, ``(None, directory)`` or
        ``(None, None)``. On a flat namespace, only files."""
        parts = key.split("/")
        parent = self.parent_dir(bucket, parts)
        if parent is None:
            return None, None
        leaf = parts[-1]
        found = parent.files.get(leaf)
        if found is not None:
            return found, None
        if self.hierarchical:
            sub = parent.dirs.get(leaf)
            if sub is not None:
                return None, sub
        return None, None

    def find_dir(self, bucket: Bucket, key: str) -> Dir | None:
        """The directory node at ``key`` (``""``: the root)."""
        if not key:
            return bucket.root
        d = bucket.root
        for p in key.split("/"):
            sub = d.dirs.get(p)
            if sub is None:
                return None
            d = sub
        return d

    def make_parents(self, bucket: Bucket, parts: list[str], *, create: bool = True,
                     now: float | None = None) -> Dir | None:
        """The directory that will hold the last segment of ``parts``, created (with its
        ancestors) when ``create``; ``None`` when missing and not created. On a namespace, a
        file in the way raises :class:`PathConflict`."""
        d = bucket.root
        real = self.hierarchical or bucket.hns
        for p in parts[:-1]:
            sub = d.dirs.get(p)
            if sub is None:
                if self.hierarchical and p in d.files:
                    raise PathConflict(p)
                if not create:
                    return None
                sub = Dir(self.new_dir_record(now) if real else None)
                if real:
                    self.dirs += 1
                d.dirs[p] = sub
                d.changed()
            d = sub
        return d

    def put(self, bucket: Bucket, key: str, obj: Obj) -> Obj | None:
        """Store ``obj`` at ``key`` (parents created); returns what it replaced. The caller
        has checked that no directory is at ``key`` on a namespace."""
        parts = key.split("/")
        parent = self.make_parents(bucket, parts)
        assert parent is not None
        leaf = parts[-1]
        old = parent.files.get(leaf)
        parent.files[leaf] = obj
        if old is None:
            self.files += 1
            parent.changed()
        return old

    def remove(self, bucket: Bucket, key: str) -> Obj | None:
        """Remove the file at ``key``; returns it (``None`` if there was none). On a flat
        namespace, directories left empty are pruned."""
        parts = key.split("/")
        chain = [bucket.root]
        d = bucket.root
        for p in parts[:-1]:
            sub = d.dirs.get(p)
            if sub is None:
                return None
            chain.append(sub)
            d = sub
        old = d.files.pop(parts[-1], None)
        if old is None:
            return None
        self.files -= 1
        d.listing = None
        if not self.hierarchical and not bucket.hns:
            for i in range(len(chain) - 1, 0, -1):
                if not chain[i].empty():
                    break
                del chain[i - 1].dirs[parts[i - 1]]
                chain[i - 1].changed()
        return old

    def detach_dir(self, bucket: Bucket, key: str) -> Dir | None:
        """Unlink the directory at ``key`` (hierarchical) and return it, subtree included."""
        parts = key.split("/")
        parent = self.parent_dir(bucket, parts)
        if parent is None:
            return None
        sub = parent.dirs.pop(parts[-1], None)
        if sub is not None:
            parent.changed()
        return sub

    def delete_dir(self, bucket: Bucket, key: str) -> None:
        """Remove a hierarchical directory and everything below it."""
        sub = self.detach_dir(bucket, key)
        if sub is not None:
            files, dirs = sub.count()
            self.files -= files
            self.dirs -= dirs + 1

    # -- listing ---------------------------------------------------------------------------

    def iterate(self, bucket: Bucket, prefix: str, *, delimiter: str = "",
                start: str = "") -> Iterator[Entry]:
        """Every entry whose name starts with ``prefix``, in lexicographic order, from the
        first name ``>= start``. With delimiter ``/``, what lies below a further ``/`` is one
        prefix entry (``a/b/``); a hierarchical directory shows as its own record (``a/b``)
        and, when not empty, as that prefix. Other delimiters are rolled up from the full
        listing."""
        if delimiter and delimiter != "/":
            yield from self._rolled_up(bucket, prefix, delimiter, start)
            return
        cut = prefix.rfind("/")
        base = prefix[:cut + 1]
        d = self.find_dir(bucket, base[:-1]) if base else bucket.root
        if d is None:
            return
        yield from self._walk(d, base, prefix[cut + 1:], bool(delimiter), start)

    def _walk(self, d: Dir, base: str, partial: str, delimited: bool,
              start: str) -> Iterator[Entry]:
        entries, keys = d.entries()
        i = bisect.bisect_left(keys, partial) if partial else 0
        rel = ""
        if start:
            if start.startswith(base):
                rel = start[len(base):]
            elif start > base:
                return  # every name here sorts before the start
        if rel > partial:
            j = bisect.bisect_left(keys, rel)
            # the subtree before j may hold the start (its key "n/" is a prefix of it)
            if j > 0 and entries[j - 1][2] == TREE and rel.startswith(keys[j - 1]):
                j -= 1
            i = max(i, j)
        for k in range(i, len(entries)):
            key, name, kind = entries[k]
            if partial and not key.startswith(partial):
                return
            if kind == FILE:
                full = base + name
                if full >= start:
                    yield Entry(full, d.files[name], False)
                continue
            sub = d.dirs[name]
            if kind == SELF:
                full = base + name
                if full >= start:
                    yield Entry(full, sub.obj, True)
                continue
            below = base + key
            if delimited:
                if not sub.empty() and below >= start:
                    yield Entry(below, None, True)
                continue
            yield from self._walk(sub, below, "", False,
                                  start if start > below else "")

    def _rolled_up(self, bucket: Bucket, prefix: str, delimiter: str,
                   start: str) -> Iterator[Entry]:
        last = None
        for entry in self.iterate(bucket, prefix):
            rest = entry.name[len(prefix):]
            at = rest.find(delimiter)
            if at < 0:
                if entry.name >= start:
                    yield entry
                continue
            rolled = prefix + rest[:at + len(delimiter)]
            if rolled != last and rolled >= start:
                yield Entry(rolled, None, True)
            last = rolled

    def page(self, bucket: Bucket, prefix: str, *, delimiter: str = "", start: str = "",
             limit: int) -> tuple[list[Entry], str | None]:
        """Up to ``limit`` entries of :meth:`iterate`, and the name the next page starts at
        (``None``: no more)."""
        out: list[Entry] = []
        for entry in self.iterate(bucket, prefix, delimiter=delimiter, start=start):
            if len(out) == limit:
                return out, entry.name
            out.append(entry)
        return out, None
