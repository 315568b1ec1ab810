"""The rename of flat Blob storage (and Azurite): a copy, then the source's delete.

A server-side Copy Blob (destination condition ``If-None-Match: *``) then a Delete of the
source. This is *not* atomic: between the two requests both names exist, and a crash there
leaves both (the copy is complete and identical; a repeated commit, or a rollback renaming the
copy back, finishes the job, see ``_complete_half_done_rename``). The copy gets a new etag, so
an ambiguous rename is proven by the Content-MD5 and size the copy keeps (``Store.identity`` /
``Store.proves_rename``). In a batch, the sources' deletes go out as Blob Batch requests of up
to 256 (one request on the wire for 256 deletes).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from urllib.parse import unquote

from committer.errors import PathExistsError, PathNotFoundError, StoreError, TransientStoreError
from committer.store._aio import map_bounded
from committer.store.azure.account import AzureAccount
from committer.store.azure.wire import azure_error, delete_requests, delete_results, md5_hex
from committer.store.http.hedge import ProvenRace
from committer.store.http.messages import Response
from committer.store.http.multipart import batch_body, new_boundary
from committer.store.http.quoting import quote_name, quote_path

#: sub-requests per Blob Batch request (the service's limit)
BATCH_LIMIT = 256
# Copy Blob of a large source may stay "pending" on real Azure; poll its status, bounded.
_COPY_POLL_INITIAL_S = 0.05
_COPY_POLL_MAX_S = 2.0
_COPY_WAIT_LIMIT_S = 600.0


class FlatBlobRenames(AzureAccount):
    """Copy + delete, the completion of a half-done one, and Blob Batch deletes."""

    async def _copy_pending(self, container: str, key: str, copy: Response, path: str) -> None:
        """Real Azure may leave a large copy pending; wait for it, bounded."""
        status = copy.header("x-ms-copy-status").lower() or None
        delay, waited = _COPY_POLL_INITIAL_S, 0.0
        while status == "pending":
            if waited > _COPY_WAIT_LIMIT_S:
                raise TransientStoreError(f"copy still pending after {waited:.0f}s: {path}", path)
            await asyncio.sleep(delay)
            waited += delay
            delay = min(delay * 2, _COPY_POLL_MAX_S)
            found = await self._properties(container, key, "copy")
            if found is None:
                raise StoreError(f"copy destination vanished while pending: {path}", path)
            status = found.header("x-ms-copy-status").lower() or None
        if status not in (None, "success"):
            raise StoreError(f"server-side copy ended {status!r}: {path}", path)

    def _source_url(self, container: str, key: str) -> str:
        """The copy source: the blob's full URL, with the SAS when that is the credential."""
        endpoint = self._endpoint(False)
        query = self._authority().query
        url = endpoint.url + "/" + quote_name(container) + "/" + quote_path(key)
        return f"{url}?{query}" if query else url

    async def _complete_half_done_rename(self, sc: str, sk: str, dc: str, dk: str) -> bool:
        """After a copy found the destination present: ``True`` (and the source deleted) if
        one of the two is the finished copy of the other, sizes and MD5s equal; else ``False``:
        a genuine conflict. Either way round: the destination is an earlier attempt's copy of
        the source (a rename retried, or resumed after a crash between its copy and its
        delete), or the source is the copy of the destination (a rename being undone, by a
        rollback or a restore of data moved aside, whose forward copy landed and whose delete
        did not). Deleting the source then leaves the bytes where the rename puts them."""
        d, s = await asyncio.gather(self._properties(dc, dk, "copy"),
                                    self._properties(sc, sk, "copy"))
        if d is None or s is None:
            return False

        def copied_from(copy: Response, container: str, key: str) -> bool:
            source = unquote(copy.header("x-ms-copy-source").split("?", 1)[0])
            return (copy.header("x-ms-copy-status") == "success"
                    and source == unquote(self._source_url(container, key).split("?", 1)[0]))

        d_md5 = md5_hex(d.header("content-md5"))
        same_content = (d.header("content-length") == s.header("content-length")
                        and d_md5 is not None and d_md5 == md5_hex(s.header("content-md5")))
        if not (same_content and (copied_from(d, sc, sk) or copied_from(s, dc, dk))):
            return False
        await self._delete_key(sc, sk, "delete_file")
        return True

    async def _copy(self, src: str, dst: str, replace: bool,
                    proof: Callable[[], Awaitable[bool]] | None = None
                    ) -> tuple[str, str] | None:
        """The copy half of a flat rename: ``(container, key)`` of the source to delete next,
        or ``None`` when an earlier attempt finished this rename (source already deleted).
        With ``proof`` (the destination provably the file: its MD5), a slow copy is raced by
        a copy of the request, as a Data Lake rename is (``datalake.py``); never replacing,
        the later one is refused (409), and that settles the race once ``proof`` holds."""
        sc, sk = self._split(src)
        dc, dk = self._split(dst)
        headers = {"x-ms-copy-source": self._source_url(sc, sk)}
        if not replace:
            headers["if-none-match"] = "*"
        race = None if proof is None or replace else ProvenRace(
            proof, lambda r: r.status in (409, 412))
        response = await self._send("rename_file", "PUT", dc, dk, headers=headers, whole=False,
                                    hedge=race is not None,
                                    settles=race.settles if race is not None else None)
        if race is not None and race.proven(response):
            self._count_proven_race()
            return sc, sk
        if response.status in (409, 412):
            if await self._complete_half_done_rename(sc, sk, dc, dk):
                return None
            raise PathExistsError(f"rename destination exists: {dst} (not proven a copy of "
                                  f"{src}, nor {src} a copy of it: nothing deleted)", dst)
        if response.status == 404:
            raise PathNotFoundError(f"rename source not found: {src}", src)
        if response.status not in (200, 201, 202):
            raise azure_error(response, dst, "copy to")
        await self._copy_pending(dc, dk, response, dst)
        return sc, sk

    async def _delete_many(self, blobs: Sequence[tuple[str, str]]) -> list[BaseException | None]:
        """Delete blobs (a missing one is fine), ``BATCH_LIMIT`` to a Blob Batch request; one
        result per blob: ``None`` or its error. A single blob goes as a plain Delete."""
        if self._each_alone and len(blobs) > 1:  # a small commit's: no batch to wait for
            return await self._delete_each(blobs)
        results: list[BaseException | None] = [None] * len(blobs)
        if len(blobs) == 1:
            try:
                await self._delete_key(*blobs[0], "delete_file")
            except StoreError as e:
                results[0] = e
            return results
        groups = [list(range(i, min(i + BATCH_LIMIT, len(blobs))))
                  for i in range(0, len(blobs), BATCH_LIMIT)]

        async def one_batch(group: list[int]) -> None:
            try:
                answers = await self._batch_delete([blobs[i] for i in group])
            except Exception as e:  # a store's error or not: none of the group known deleted
                for i in group:
                    results[i] = e
                return
            for i, error in zip(group, answers, strict=True):
                results[i] = error

        await map_bounded(one_batch, groups, self.concurrency)
        return results

    async def _delete_each(self, blobs: Sequence[tuple[str, str]]) -> list[BaseException | None]:
        """Deletes, one request each, raced in their latency tail (sent twice, a delete
        removes nothing more: a renamed source lives in its task attempt's directory, which
        nothing else writes; a tree is being deleted whole)."""
        async def one(blob: tuple[str, str]) -> None:
            response = await self._send("delete_file", "DELETE", *blob, idempotent=True,
                                        hedge=True)
            if response.status not in (200, 202, 404):
                raise azure_error(response, self._url(*blob), "delete")

        return await map_bounded(one, blobs, self.concurrency)

    async def _batch_delete(self, blobs: Sequence[tuple[str, str]]) -> list[StoreError | None]:
        """One Blob Batch request deleting ``blobs`` (all in one container); a result per
        blob."""
        boundary = new_boundary()
        body = batch_body(boundary, await delete_requests(self._endpoint(False),
                                                          self._authority(), blobs))
        epoch = self._limit.epoch
        response = await self._send(
            "delete_file", "POST", blobs[0][0], query=(("restype", "container"), ("comp", "batch")),
            headers={"content-type": f"multipart/mixed; boundary={boundary}"}, body=body,
            # deletes only: sending it twice deletes nothing more, so a slow one is raced
            # where the renames are
            idempotent=True, hedge=self._races, parts=len(blobs))
        if response.status != 202:
            raise azure_error(response, "(batch of deletes)", "batch")
        out, throttled = delete_results(response, [self._url(*b) for b in blobs])
        if throttled:  # throttled sub-requests steer the limit as their share of a request
            self._limit.throttled_answer(epoch, throttled, len(blobs))
        return out

