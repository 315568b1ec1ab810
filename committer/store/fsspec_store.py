"""Any fsspec filesystem, one request per call: the generic path for non-local URLs.

Cloud-specific backends (``abfs``, ``gs``) refine this with their stores' own rename and
conditional-create semantics; everything here holds for any fsspec implementation.
"""

from __future__ import annotations

from typing import Any, BinaryIO

from committer.errors import PathExistsError, PathNotFoundError, StoreError, TransientStoreError
from committer.store.base import FileStatus, Store

_TRANSIENT_NAMES = ("Timeout", "ServerBusy", "Throttl", "ServiceUnavailable", "TooManyRequests",
                    "ConnectionReset", "ClientConnector", "ServerDisconnected")


def classify(e: BaseException, path: str) -> StoreError:
    """Map a backend exception to the engine's families; unknown errors stay non-transient."""
    if isinstance(e, StoreError):
        return e
    if isinstance(e, FileNotFoundError):
        return PathNotFoundError(f"not found: {path}", path)
    if isinstance(e, FileExistsError):
        return PathExistsError(f"already exists: {path}", path)
    status = (getattr(e, "status", None) or getattr(e, "status_code", None)
              or getattr(e, "code", None))
    if status in (408, 429, 500, 502, 503, 504) or isinstance(e, TimeoutError | ConnectionError):
        return TransientStoreError(f"{type(e).__name__} ({status}) on {path}: {e}", path)
    if any(n in type(e).__name__ for n in _TRANSIENT_NAMES):
        return TransientStoreError(f"{type(e).__name__} on {path}: {e}", path)
    return StoreError(f"{type(e).__name__} on {path}: {e}", path)


def _etag(info: dict[str, Any]) -> str | None:
    for key in ("etag", "ETag", "e_tag"):
        v = info.get(key)
        if v:
            return str(v).strip('"')
    return None


class FsspecStore(Store):
    """A store over an ``fsspec.AbstractFileSystem``; locations keep their URL scheme."""

    def __init__(self, fs: Any, scheme: str) -> None:
        self.fs = fs
        self.scheme = scheme
        self.name = scheme
        self.supports_etags = True

    def _url(self, path: str) -> str:
        return path if "://" in path else f"{self.scheme}://{path.lstrip('/')}"

    def _status(self, info: dict[str, Any]) -> FileStatus:
        is_dir = info.get("type") == "directory"
        mtime = info.get("mtime") or info.get("last_modified")
        return FileStatus(
            self._url(str(info["name"])),
            0 if is_dir else int(info.get("size") or 0),
            is_dir,
            None if is_dir else _etag(info),
            float(mtime.timestamp()) if mtime is not None and hasattr(mtime, "timestamp")
            else None,
        )

    def stat(self, path: str) -> FileStatus:
        try:
            return self._status(self.fs.info(path))
        except Exception as e:
            raise classify(e, path) from e

    def list_dir(self, path: str) -> list[FileStatus]:
        try:
            infos = self.fs.ls(path, detail=True)
        except Exception as e:
            raise classify(e, path) from e
        own = path.rstrip("/")
        return [self._status(i) for i in infos if self._url(str(i["name"])).rstrip("/") != own]

    def mkdirs(self, path: str) -> None:
        try:
            if self.fs.isfile(path):
                raise PathExistsError(f"a file exists where a directory must be: {path}", path)
            self.fs.makedirs(path, exist_ok=True)
        except Exception as e:
            raise classify(e, path) from e

    def rename_file(self, src: str, dst: str) -> None:
        if self.exists(dst):
            raise PathExistsError(f"rename destination exists: {dst}", dst)
        self.replace_file(src, dst)

    def replace_file(self, src: str, dst: str) -> None:
        try:
            self.fs.mv(src, dst)
        except FileNotFoundError:
            raise PathNotFoundError(f"rename source not found: {src}", src) from None
        except Exception as e:
            raise classify(e, f"{src} -> {dst}") from e

    def delete_file(self, path: str) -> bool:
        try:
            self.fs.rm_file(path)
        except FileNotFoundError:
            return False
        except Exception as e:
            raise classify(e, path) from e
        return True

    def delete_tree(self, path: str) -> bool:
        try:
            if not self.fs.exists(path):
                return False
            self.fs.rm(path, recursive=True)
        except FileNotFoundError:
            return False
        except Exception as e:
            raise classify(e, path) from e
        return True

    def read_bytes(self, path: str, limit: int | None = None) -> bytes:
        try:
            if limit is not None:
                size = self.fs.size(path)
                if size is not None and size > limit:
                    raise StoreError(f"file is larger than the limit of {limit} bytes: {path}",
                                     path)
            data: bytes = self.fs.cat_file(path)
        except Exception as e:
            raise classify(e, path) from e
        return data

    def open_write(self, path: str) -> BinaryIO:
        try:
            stream: BinaryIO = self.fs.open(path, "wb")
        except Exception as e:
            raise classify(e, path) from e
        return stream

    def write_bytes(self, path: str, data: bytes, *, exclusive: bool = False) -> None:
        try:
            self.fs.pipe_file(path, data, mode="create" if exclusive else "overwrite")
        except FileExistsError:
            raise PathExistsError(f"file exists: {path}", path) from None
        except TypeError:
            # an fsspec implementation without the ``mode`` argument: check, then write
            if exclusive and self.exists(path):
                raise PathExistsError(f"file exists: {path}", path) from None
            try:
                self.fs.pipe_file(path, data)
            except Exception as e:
                raise classify(e, path) from e
        except Exception as e:
            raise classify(e, path) from e
