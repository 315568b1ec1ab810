"""Task commit, step 1: scan the task attempt directory into manifest entries.

The task-commit contract, which the Spark shim's Java scan (``TaskManifestWriter``) keeps too:

- every file under the working directory maps to the same relative path under the destination,
  except files under ``_custom_locations/<n>/``, which map into the n-th directory the attempt
  asked for with ``output_path_at`` (Spark's custom partition locations);
- checksum side files (``.name.crc``, left by Hadoop's local filesystem) are not output;
- every directory under the destination that holds output (a file, at any depth) is recorded
  once, with its depth and status UNKNOWN; empty directories are not output. Job commit probes
  and creates directories when it runs; a state seen now would be stale by then.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from committer.errors import ConfigError
from committer.layout import CUSTOM_LOCATIONS_DIR, is_checksum_side_file
from committer.store.managed import ManagedStore
from manifest_schema import DirEntry, DirStatus, FileEntry
from manifest_schema.uris import location_to_uri


@dataclass(frozen=True)
class ScanResult:
    files: tuple[FileEntry, ...]
    directories: tuple[DirEntry, ...]

    @property
    def total_size(self) -> int:
        return sum(f.size for f in self.files)


def scan_task_directory(
    store: ManagedStore, working_dir: str, dest: str, custom_locations: Sequence[str] = ()
) -> ScanResult:
    root = working_dir.rstrip("/")
    dest = dest.rstrip("/")
    files: list[FileEntry] = []
    dirs: dict[str, int] = {}
    for status in store.walk_files(root):
        rel = status.path[len(root) + 1 :]
        parts = rel.split("/")
        if len(parts) > 1 and parts[0] == CUSTOM_LOCATIONS_DIR:
            target = f"{_custom_location(status.path, parts, custom_locations)}/{parts[-1]}"
            parents: list[str] = []  # no directory entries: levels count from the destination
        else:
            target = f"{dest}/{rel}"
            parents = parts[:-1]
        if is_checksum_side_file(parts[-1]):
            continue
        # identity(): the etag where renames keep it, else the content checksum a copy keeps,
        # so job commit (and its resume and rollback) can prove a destination is this file.
        files.append(FileEntry(location_to_uri(status.path), location_to_uri(target),
                               status.size, store.identity(status)))
        for depth in range(1, len(parents) + 1):
            dirs.setdefault("/".join(parents[:depth]), depth)
    directories = tuple(
        DirEntry(location_to_uri(f"{dest}/{d}"), DirStatus.UNKNOWN, level)
        for d, level in sorted(dirs.items())
    )
    files.sort(key=lambda f: f.dest)
    return ScanResult(tuple(files), directories)


def _custom_location(path: str, parts: list[str], custom_locations: Sequence[str]) -> str:
    """The directory a file under ``_custom_locations/<n>/`` goes to; refuses anything else
    there, since a file with no recorded location has no destination."""
    index = parts[1]
    if len(parts) != 3:
        raise ConfigError(f"{path}: a custom-location file must sit directly in "
                          f"{CUSTOM_LOCATIONS_DIR}/<n>/")
    if not (index.isascii() and index.isdigit()) or int(index) >= len(custom_locations):
        raise ConfigError(f"{path}: no custom location recorded for "
                          f"{CUSTOM_LOCATIONS_DIR}/{index} ({len(custom_locations)} recorded)")
    return custom_locations[int(index)].rstrip("/")
