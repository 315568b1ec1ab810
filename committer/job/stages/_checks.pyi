# Types of the C module built from _checks.c (optional; see setup.py).
from typing import Any

def files(files: Any, own_uri: str, dest_uri: str, own: str, dest_prefix: str,
          reserved: tuple[str, ...], /) -> list[tuple[str, str, int, str | None]] | None: ...
def directories(dirs: Any, dest_uri: str, root_uri: str, dest_prefix: str,
                statuses: frozenset[int], reserved: tuple[str, ...],
                /) -> dict[str, int] | None: ...
def note_destinations(entries: list[tuple[str, str, int, str | None]], seen: set[int],
                      suspects: set[int], parents: set[str], /) -> None: ...
