"""Task commit, step 1: scan the task attempt directory into manifest entries.

Every file under the working directory maps to the same relative path under the destination.
Checksum side files (``.name.crc``, left by Hadoop's local filesystem) are not output. Every
directory holding output is recorded once, with its depth, so job commit can create the
aggregate set of directories without listing anything.
"""

from __future__ import annotations

from dataclasses import dataclass

from committer.store.managed import ManagedStore
from manifest_schema import DirEntry, DirStatus, FileEntry
from manifest_schema.uris import location_to_uri


def is_checksum_file(name: str) -> bool:
    return name.startswith(".") and name.endswith(".crc")


@dataclass(frozen=True)
class ScanResult:
    files: tuple[FileEntry, ...]
    directories: tuple[DirEntry, ...]

    @property
    def total_size(self) -> int:
        return sum(f.size for f in self.files)


def scan_task_directory(store: ManagedStore, working_dir: str, dest: str) -> ScanResult:
    root = working_dir.rstrip("/")
    dest = dest.rstrip("/")
    files: list[FileEntry] = []
    dirs: dict[str, int] = {}
    for status in store.walk_files(root):
        rel = status.path[len(root) + 1 :]
        name = rel.rsplit("/", 1)[-1]
        if is_checksum_file(name):
            continue
        # identity(): the etag where renames keep it, else the content checksum a copy keeps,
        # so job commit (and its resume and rollback) can prove a destination is this file.
        files.append(FileEntry(location_to_uri(status.path), location_to_uri(f"{dest}/{rel}"),
                               status.size, store.identity(status)))
        parts = rel.split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            dirs.setdefault("/".join(parts[:depth]), depth)
    directories = tuple(
        DirEntry(location_to_uri(f"{dest}/{d}"), DirStatus.UNKNOWN, level)
        for d, level in sorted(dirs.items())
    )
    files.sort(key=lambda f: f.dest)
    return ScanResult(tuple(files), directories)
