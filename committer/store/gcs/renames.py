"""The renames of GCS: the move API, else a rewrite then a delete, and their recovery.

Renames:
- the objects **move** API (``moveTo``, destination ``ifGenerationMatch=0``): one request,
  atomic (the API documents the move as one transaction);
- where the store does not support it (answers 400/501, as fake-gcs-server does; remembered per
  store), **rewrite then delete**: ``rewriteTo`` with ``ifGenerationMatch=0`` (never replaces),
  then ``DELETE`` of the source (pinned with ``ifGenerationMatch`` to the generation read when
  a conflict check read it). Not atomic: both names exist between the two requests. A batch
  of renames sends its rewrites and deletes in batch requests; a part's answer is settled as
  the single request's would be (a rewrite that is not done in one call goes on alone with its
  token; a destination found is proven to be an earlier attempt's copy or is a conflict), and
  deletes the service refused are sent again before the renames are reported.
A rewrite gives the destination a new generation, and on the real service a new etag (the etag
encodes the generation; fake-gcs-server keeps it), so an ambiguous rename is proven by the MD5
(or CRC32C for composite objects) and size, which a rewrite keeps.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from committer.errors import PathExistsError, PathNotFoundError, StoreError
from committer.store._aio import map_bounded
from committer.store.gcs.api import GcsApi
from committer.store.gcs.wire import GcsHttpError, _checksum
from committer.store.http.limiter import Place
from committer.store.http.quoting import quote_name

_REWRITE_ROUNDS_LIMIT = 10_000  # a rewrite of a huge object takes several calls; bounded
_CHECK_LISTING_LIMIT = 10_000  # entries of one directory listed to check destinations


class GcsRenames(GcsApi):
    """One rename at a time: move, or rewrite (and its rounds) then delete; a destination found
    proven to be an earlier attempt's copy, or a conflict."""

    async def _move(self, bucket: str, sk: str, dk: str, replace: bool) -> bool:
        """Try the objects move API; ``False`` if this store does not support it."""
        if self._move_supported is False:
            return False
        params = {} if replace else {"ifGenerationMatch": "0"}
        url = f"{self._api}/{self._obj(bucket, sk)}/moveTo/o/{quote_name(dk)}"
        try:
            await self._request("rename_file", "POST", url, params=params,
                                headers={"X-Goog-GCS-Idempotency-Token": str(uuid.uuid4())})
        except GcsHttpError as e:
            # not True: concurrent first attempts may all be refused before one records it
            if e.status in (400, 501) and self._move_supported is not True:
                self._move_supported = False
                return False
            raise
        self._move_supported = True
        return True

    async def _complete_half_done(self, bucket: str, sk: str, dk: str, src: str, dst: str,
                                  found: dict[str, Any] | None = None) -> None:
        """The destination exists: if it holds exactly the source's bytes (an earlier attempt
        of this rename copied it and lost the answer), delete the source and succeed; else it
        is a genuine conflict."""
        if found is None:  # both at once: one round trip (a raced rewrite's tail is here)
            s, d = await asyncio.gather(self._get_object(bucket, sk),
                                        self._get_object(bucket, dk))
        else:
            s, d = await self._get_object(bucket, sk), found
        if s is None:
            # the source is gone as well: ambiguous; the managed store decides on identity
            raise PathNotFoundError(f"rename source not found: {src}", src)
        if d is None or _checksum(d) is None or _checksum(d) != _checksum(s) or d.get(
                "size") != s.get("size"):
            raise PathExistsError(f"rename destination exists: {dst} (not proven to hold the "
                                  f"bytes of {src}: nothing deleted)", dst)
        await self._delete_object(bucket, sk, s.get("generation"))

    async def _rewrite(self, pair: tuple[str, str], replace: bool,
                       known_absent: frozenset[str] = frozenset(), hedge: bool = False,
                       place: Place | None = None) -> tuple[str, str] | None:
        """A rename but for the source's delete: the move (done), or the rewrite. Returns
        ``(bucket, key)`` of the source to delete next, or ``None`` when nothing is left to do
        (moved; or an earlier attempt finished the rename). ``hedge``: a slow rewrite that
        never replaces is raced by a copy; the later of the two is refused (412) and settled
        as any refusal is, the destination proven the source's copy by checksum and size.
        ``place``: the caller's place in the limit, for the rewrite; given back first if
        anything else is sent before it (it must not wait, holding a place, for another)."""
        src, dst = pair
        sb, sk = self._split(src)
        db, dk = self._split(dst)
        if not sk or not dk:
            raise StoreError(f"cannot rename a bucket: {src} -> {dst}", src)
        try:
            if sb == db and self._move_supported is not False:
                if place is not None:
                    place.give_back()
                if await self._move(sb, sk, dk, replace):
                    return None
            if not replace and not self.trust_preconditions and dst not in known_absent:
                if place is not None:
                    place.give_back()
                found = await self._get_object(db, dk)
                if found is not None:  # the endpoint ignores ifGenerationMatch on rewrite
                    await self._complete_half_done(sb, sk, dk, src, dst, found)
                    return None
            params: dict[str, str] = {} if replace else {"ifGenerationMatch": "0"}
            url = self._rewrite_url(sb, sk, db, dk)
            out = await self._json("copy", "POST", url, params=params,
                                   headers={"Content-Type": "application/json"},
                                   hedge=hedge and not replace, place=place)
            await self._rewrite_rounds(url, params, out, src, dst)
        except GcsHttpError as e:
            await self._rewrite_refused(e, pair, replace)
            return None
        # The source lives in a task attempt directory only its own attempt writes, and the
        # rewrite answer does not name the generation it copied, so its delete is unconditioned;
        # the destination side, where other writers can be, is the one the precondition guards.
        return sb, sk

    async def _rewrite_refused(self, error: GcsHttpError, pair: tuple[str, str],
                               replace: bool) -> None:
        """What a rewrite's error answer means: 404, the source is missing; 409/412 (never
        replacing), the destination exists: an earlier attempt's copy of this very file
        completes the rename, anything else is a conflict; any other status is raised."""
        src, dst = pair
        if error.status == 404:
            raise PathNotFoundError(f"rename source not found: {src}", src) from None
        if error.status not in (409, 412) or replace:
            raise error
        (sb, sk), (_, dk) = self._split(src), self._split(dst)
        await self._complete_half_done(sb, sk, dk, src, dst)

    def _rewrite_url(self, sb: str, sk: str, db: str, dk: str) -> str:
        return f"{self._api}/{self._obj(sb, sk)}/rewriteTo/{self._obj(db, dk)}"

    async def _rewrite_rounds(self, url: str, params: Mapping[str, str], out: dict[str, Any],
                              src: str, dst: str) -> None:
        """Go on with a rewrite whose answer ``out`` says it is not done (a large object, or
        one changing location or class): the calls go on with the token until it is."""
        rounds = 0
        while not out.get("done", True):
            rounds += 1
            if rounds > _REWRITE_ROUNDS_LIMIT:
                raise StoreError(f"rewrite did not finish: {src} -> {dst}", dst)
            out = await self._json("copy", "POST", url,
                                   params={**params, "rewriteToken": out["rewriteToken"]},
                                   headers={"Content-Type": "application/json"})

    async def _rename(self, pair: tuple[str, str], replace: bool = False,
                      known_absent: frozenset[str] = frozenset()) -> None:
        source = await self._rewrite(pair, replace, known_absent)
        if source is not None:
            await self._delete_object(*source)
        self._lose("rename_file")

    async def _absent_destinations(self, pairs: Sequence[tuple[str, str]]) -> frozenset[str]:
        """Destinations of ``pairs`` that a listing of their parent directories shows absent.

        Only for endpoints that ignore ``ifGenerationMatch`` on rewrite (emulators): one
        listing per destination directory replaces one existence check per file. It is as racy
        as the per-file check it replaces (both are; the real service needs neither). A
        directory with more than ``_CHECK_LISTING_LIMIT`` entries is not listed: its files keep
        the per-file check."""
        groups: dict[tuple[str, str], list[str]] = {}
        for _, dst in pairs:
            bucket, key = self._split(dst)
            parent = key.rsplit("/", 1)[0] + "/" if "/" in key else ""
            groups.setdefault((bucket, parent), []).append(dst)
        absent: set[str] = set()

        async def check(group: tuple[str, str]) -> None:
            bucket, parent = group
            existing: set[str] = set()
            params = {"prefix": parent, "delimiter": "/", "fields": "items(name),nextPageToken"}
            while True:  # bounded by _CHECK_LISTING_LIMIT below
                page = await self._json("list_dir", "GET",
                                        f"{self._api}/b/{quote_name(bucket)}/o",
                                        params=params)
                existing.update(str(o["name"]) for o in page.get("items", []))
                token = page.get("nextPageToken")
                if not token:
                    break
                if len(existing) > _CHECK_LISTING_LIMIT:
                    return
                params["pageToken"] = token
            absent.update(d for d in groups[group] if self._split(d)[1] not in existing)

        # a failed listing only means those files get the per-file check
        await map_bounded(check, list(groups), self.concurrency)
        return frozenset(absent)

