"""The rename of an account with a hierarchical namespace (ADLS Gen2): one Data Lake request.

The Data Lake rename (Path Create with ``x-ms-rename-source``): atomic, O(1), keeps the etag;
the destination condition ``If-None-Match: *`` makes it never replace. A directory moves whole
the same way.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from committer.errors import PathExistsError, PathNotFoundError, StoreError
from committer.store.azure.account import AzureAccount
from committer.store.azure.wire import azure_error
from committer.store.http.hedge import ProvenRace
from committer.store.http.messages import Response
from committer.store.http.quoting import quote_name, quote_path


def _source_missing(response: Response) -> bool:
    return response.status == 404 and response.header(
        "x-ms-error-code") != "RenameDestinationParentPathNotFound"


class DataLakeRenames(AzureAccount):
    """Renames of files and directories through the Data Lake endpoint."""

    async def _datalake_rename(self, src: str, dst: str, replace: bool, op: str,
                               proof: Callable[[], Awaitable[bool]] | None = None) -> None:
        """The Data Lake rename of a file or a directory (Path Create with
        ``x-ms-rename-source``), its refusals in the engine's families: the destination there,
        its parent directory missing (a namespace has real directories: the managed store
        creates it and retries), or the source missing.

        With ``proof`` (whether the destination is provably the renamed file), a slow rename
        that never replaces is raced by a copy (``http/hedge.py``): a success settles the race,
        and so does the source found missing once ``proof`` holds (the other request did it)."""
        sc, sk = self._split(src)
        dc, dk = self._split(dst)
        if not sk or not dk:
            raise StoreError(f"cannot rename a container: {src} -> {dst}", src)
        # quoted once (a literal "%3A" in a name is sent as "%253A"); the service decodes once
        source = f"/{quote_name(sc)}/{quote_path(sk)}"
        sas = self._authority().query
        headers = {"x-ms-rename-source": f"{source}?{sas}" if sas else source}
        if not replace:
            headers["if-none-match"] = "*"
        race = None if proof is None or replace else ProvenRace(proof, _source_missing)
        response = await self._send(op, "PUT", dc, dk, query=(("mode", "legacy"),),
                                    headers=headers, dfs=True, hedge=race is not None,
                                    settles=race.settles if race is not None else None)
        if response.status in (200, 201):
            return
        if race is not None and race.proven(response):
            self._count_proven_race()
            return
        code = response.header("x-ms-error-code")
        if response.status == 409 and code in ("PathAlreadyExists", "PathConflict",
                                               "DestinationPathIsBeingDeleted"):
            raise PathExistsError(f"rename destination exists: {dst}", dst)
        if response.status == 404:
            if code == "RenameDestinationParentPathNotFound":
                raise PathNotFoundError(f"rename destination's directory not found: {dst}", dst)
            raise PathNotFoundError(f"rename source not found: {src}", src)
        raise azure_error(response, f"{src} -> {dst}", "rename")

    def rename_dir(self, src: str, dst: str) -> None:
        self._do(f"{src} -> {dst}", self._rename_dir, src, dst)

    async def _rename_dir(self, src: str, dst: str) -> None:
        if not await self._namespace():
            raise StoreError(f"a flat Blob account cannot rename a directory: {src}", src)
        await self._datalake_rename(src, dst, False, "rename_file")

