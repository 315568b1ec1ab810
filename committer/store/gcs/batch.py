"""Renames and deletes through the JSON API's batch endpoint.

In a batch of renames the rewrites, then the sources' deletes, go out through the batch
endpoint, up to 100 to a request (each still counts against the bucket's rate; Apache Beam's GCS
client batches rewrites so too): the client sends, waits for and parses one request per hundred
files. A part's answer is settled as the single request's would be (``renames.py``).

A batch the service refuses as a whole (400, or 404/405/501 from an endpoint without the batch
API, 413) or answers with a multipart body that cannot be read falls back to single rewrites
and deletes for that batch's entries, counted (``store_batch_fallbacks``, calls in
``store_batch_fallback_calls``). After an unreadable answer the sub-requests may have been
carried out: a single rewrite then finds its own copy at the destination and completes the
rename as after a lost answer (proven by checksum and size), and a delete finds nothing.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

import orjson

from committer.errors import StoreError, TransientStoreError
from committer.store._aio import map_bounded
from committer.store.base import Identity
from committer.store.gcs.renames import GcsRenames
from committer.store.gcs.wire import (
    _THROTTLE_STATUS,
    GcsHttpError,
    _error_message,
    _retry_after,
    classify_gcs,
)
from committer.store.http.messages import Response
from committer.store.http.multipart import batch_body, new_boundary, parse_batch_response

#: calls in one request to the batch endpoint (the service's limit)
BATCH_LIMIT = 100
#: statuses by which the batch endpoint refuses a batch as a whole, with nothing carried out:
#: the batch itself was refused (400, 413), or there is no batch endpoint (404, 405, 501)
_REFUSED_WHOLE = frozenset({400, 404, 405, 413, 501})
#: statistics of the fallback (``take_counters``)
BATCH_FALLBACKS = "store_batch_fallbacks"
BATCH_FALLBACK_CALLS = "store_batch_fallback_calls"


class BatchRefused(StoreError):
    """The batch endpoint refused a batch as a whole, or its answer could not be read: its
    calls go one by one instead."""


class GcsBatches(GcsRenames):
    """A chunk's renames and deletes, a hundred calls to a request of the batch endpoint."""

    _counts_lock = threading.Lock()
    _counts: dict[str, int] | None = None
    #: the endpoint has no batch API (it said 404, 405 or 501): calls go one by one at once
    _no_batch_endpoint = False

    def _count_fallback(self, calls: int) -> None:
        with self._counts_lock:
            counts = self._counts if self._counts is not None else {}
            counts[BATCH_FALLBACKS] = counts.get(BATCH_FALLBACKS, 0) + 1
            counts[BATCH_FALLBACK_CALLS] = counts.get(BATCH_FALLBACK_CALLS, 0) + calls
            self._counts = counts

    def take_counters(self) -> dict[str, int]:
        with self._counts_lock:
            counts, self._counts = self._counts or {}, None
        return counts

    async def _rewrite_batched(self, pairs: Sequence[tuple[str, str]], indexes: Sequence[int],
                               known_absent: frozenset[str],
                               sources: list[tuple[str, str] | None]
                               ) -> list[BaseException | None]:
        """The rewrites of ``pairs[i]`` for ``i`` in ``indexes``, ``BATCH_LIMIT`` to a
        request of the batch endpoint (each call still counts against the bucket's rate, but
        the client sends, waits for and reads one request per hundred files). As
        :meth:`_rewrite` but for the move: ``sources[i]`` is set to the source to delete; one
        result per index, in order. A pair the destination check must read first (an endpoint
        that ignores the precondition) or that names a bucket goes alone through
        :meth:`_rewrite`."""
        results: dict[int, BaseException | None] = {}
        alone: list[int] = []
        batched: list[tuple[int, str, str, str, str]] = []
        for i in indexes:
            src, dst = pairs[i]
            try:
                (sb, sk), (db, dk) = self._split(src), self._split(dst)
            except StoreError as e:
                results[i] = e
                continue
            if sk and dk and (self.trust_preconditions or dst in known_absent):
                batched.append((i, sb, sk, db, dk))
            else:
                alone.append(i)
        # answers that need more: a rewrite to go on with (its answer and URL), or an error
        # answer, settled as a single rewrite's would be
        later: list[tuple[int, dict[str, Any] | GcsHttpError, str]] = []

        async def one_batch(group: Sequence[tuple[int, str, str, str, str]]) -> None:
            host = self._origin.host_header
            calls = [(f"POST {self._rewrite_url(sb, sk, db, dk)}?ifGenerationMatch=0 HTTP/1.1"
                      f"\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                      "Content-Length: 0\r\n\r\n").encode() for _, sb, sk, db, dk in group]
            try:
                # not idempotent: a batch sent twice would find its own destinations (412)
                answers = await self._batch_call(
                    "copy", calls, [pairs[i][1] for i, *_ in group], idempotent=False)
            except BatchRefused:
                self._count_fallback(len(group))
                alone.extend(i for i, *_ in group)  # one by one, below
                return
            except Exception as e:  # every call's outcome is that of the whole request
                for i, *_ in group:
                    results[i] = e
                return
            for (i, sb, sk, db, dk), answer in zip(group, answers, strict=True):
                if isinstance(answer, BaseException):
                    results[i] = answer
                elif answer.status == 200:
                    if self.faults is not None and self.faults.after("copy"):
                        results[i] = GcsHttpError(self.faults.status, "injected: answer lost "
                                                  "after the request", lost=True)
                        continue
                    try:
                        out = orjson.loads(answer.body) if answer.body else {}
                    except orjson.JSONDecodeError:
                        out = None
                    if not isinstance(out, dict):
                        results[i] = StoreError(f"unreadable rewrite answer for {pairs[i][0]} "
                                                f"-> {pairs[i][1]}", pairs[i][1])
                        continue
                    if not out.get("done", True):
                        later.append((i, out, self._rewrite_url(sb, sk, db, dk)))
                        continue
                    sources[i] = (sb, sk)
                    results[i] = None
                else:
                    later.append((i, GcsHttpError(answer.status, _error_message(answer.body),
                                                  retry_after=_retry_after(answer)), ""))

        groups = [batched[k:k + BATCH_LIMIT] for k in range(0, len(batched), BATCH_LIMIT)]
        await map_bounded(one_batch, groups, self.concurrency)

        async def follow_up(item: tuple[int, dict[str, Any] | GcsHttpError, str]) -> None:
            i, out, url = item
            if isinstance(out, GcsHttpError):
                await self._rewrite_refused(out, pairs[i], False)
                return
            src, dst = pairs[i]
            await self._rewrite_rounds(url, {"ifGenerationMatch": "0"}, out, src, dst)
            sources[i] = self._split(src)

        async def rewrite(i: int) -> None:
            sources[i] = await self._rewrite(pairs[i], False, known_absent)

        for (i, *_), error in zip(later, await map_bounded(follow_up, later,
                                                          self._batch_workers), strict=True):
            results[i] = error
        for i, error in zip(alone, await map_bounded(rewrite, alone, self._batch_workers),
                            strict=True):
            results[i] = error
        return [results[i] for i in indexes]

    async def _rename_batch(self, pairs: Sequence[tuple[str, str]],
                            identities: Sequence[Identity] = ()) -> list[BaseException | None]:
        sources: list[tuple[str, str] | None] = [None] * len(pairs)
        absent: frozenset[str] = frozenset()
        if not self.trust_preconditions:
            absent = await self._absent_destinations(pairs)

        async def rewrite(i: int) -> None:
            # raced in its tail where the renames are (``expect_requests``, ``tail_begins``)
            sources[i] = await self._rewrite(pairs[i], False, absent, hedge=self._races)

        indexes = range(len(pairs))
        first: list[BaseException | None] = []
        if self._move_supported is None and pairs:
            # Learn whether the move API exists with one move before starting hundreds: on a
            # store that refuses it every request in flight would be refused once. Only the
            # move waits: refused, the first pair goes with the others.
            if self._probe_lock is None:
                self._probe_lock = asyncio.Lock()
            async with self._probe_lock:
                if self._move_supported is None:
                    try:  # moved: the first pair is done; refused: it goes with the others
                        first = [None] if await self._move_probe(pairs[0]) else []
                    except Exception as e:  # the first pair's outcome, as for any other
                        first = [e]
        rest = indexes[len(first):]
        if self._move_supported is not False:  # moves: one request a file anyway
            results = first + await map_bounded(rewrite, rest, self._batch_workers)
        elif self._race_tail and not self._limit.strain_lasts:
            # a small commit's rewrites alone, each raced in its tail, where a batch waits
            # for its slowest part; unless the service's strain has lasted
            results = first + await self._rewrite_each(pairs, rest, absent, sources)
        else:
            # a large commit's rewrites, or any while the service's strain lasts: through
            # the batch endpoint
            results = first + await self._rewrite_batched(pairs, rest, absent, sources)
        # then the rewritten sources' deletes (those not deleted already), in batches
        to_delete = [i for i, r in enumerate(results) if r is None and sources[i] is not None]
        doomed = [s for i in to_delete if (s := sources[i]) is not None]
        deleted = await self._delete_sources(doomed, self._delete_many)
        for i, error in zip(to_delete, deleted, strict=True):
            results[i] = error
        for i, r in enumerate(results):
            if r is None:
                try:
                    self._lose("rename_file")
                except GcsHttpError as e:
                    results[i] = e
        return [None if r is None else classify_gcs(r, f"{p[0]} -> {p[1]}")
                for p, r in zip(pairs, results, strict=True)]

    async def _rewrite_each(self, pairs: Sequence[tuple[str, str]], indexes: Sequence[int],
                            known_absent: frozenset[str],
                            sources: list[tuple[str, str] | None]
                            ) -> list[BaseException | None]:
        """The rewrites of ``pairs[i]`` for ``i`` in ``indexes`` one request each, raced in
        their tail, where a batch waits for its slowest part; as :meth:`_rewrite_batched`,
        one result per index. Each is chosen once it has a place in the limit: one that gets
        its place while the service's strain lasts (refusing, or slowed for a while: a request
        more only queues) goes through the batch endpoint with the others that did. In the
        smallest commits (``ONE_BY_ONE``), while the service is not strained, the source is
        deleted as soon as its rewrite is done, where a batch would wait for its slowest
        rewrite and then for its slowest delete (requests a file, not a hundred files: only
        a small commit spends that); else its delete waits for the batch of deletes after
        them, or for a later file's rewrite done once the strain is gone, whose delete takes
        it along. The batch goes as soon as every file has chosen, beside the rewrites still
        answering."""
        batched: list[int] = []
        # rewritten while the service was strained, their deletes not sent yet; and the
        # outcomes of those a later file took (below)
        held: list[tuple[int, tuple[str, str]]] = []
        held_deleted: dict[int, BaseException | None] = {}
        undecided = len(indexes)
        batch: list[asyncio.Task[list[BaseException | None]]] = []

        def chosen(alone: bool, i: int) -> None:
            nonlocal undecided
            undecided -= 1
            if not alone:
                batched.append(i)
            if not undecided and batched:
                batch.append(asyncio.ensure_future(self._rewrite_batched(
                    pairs, list(batched), known_absent, sources)))

        async def one(i: int) -> None:
            place = await self._limit.place()
            try:
                alone = not self._limit.strain_lasts
                chosen(alone, i)
                if not alone:
                    return
                sources[i] = await self._rewrite(pairs[i], False, known_absent,
                                                 hedge=self._races, place=place)
            finally:
                place.give_back()
            source = sources[i]
            if source is None:
                return
            if not self._each_alone:  # deleted after the rewrites (``sources[i]``)
                held.append((i, source))
                return
            # with those rewritten while the service was strained
            for j, _ in ((i, source), *held):
                sources[j] = None
            error, late = await self._delete_taking_along(source, held, self._delete_each)
            held_deleted.update(late)
            if error is not None:
                raise error

        try:
            outcome = dict(zip(indexes, await map_bounded(one, indexes, self._batch_workers),
                               strict=True))
        except BaseException:
            for task in batch:
                task.cancel()
            raise
        for j, error in held_deleted.items():  # their rewrites succeeded
            outcome[j] = error
        if batched:  # sent once every file had chosen (not, if a file failed to get a place)
            answers = await (batch[0] if batch else self._rewrite_batched(
                pairs, batched, known_absent, sources))
            outcome.update(zip(batched, answers, strict=True))
        return [outcome[i] for i in indexes]

    async def _move_probe(self, pair: tuple[str, str]) -> bool:
        """Whether the move API renamed ``pair`` (then it exists); ``False``: the store has no
        move API, or the pair is not one move can rename. A refusal of the move is settled as
        a rewrite's would be (done, or the rename's error raised)."""
        (sb, sk), (db, dk) = self._split(pair[0]), self._split(pair[1])
        if sb != db or not sk or not dk:
            return False
        try:
            return await self._move(sb, sk, dk, False)
        except GcsHttpError as e:
            await self._rewrite_refused(e, pair, False)
            return True

    # -- deleting ------------------------------------------------------------------------------

    async def _delete_many(self, objects: Sequence[tuple[str, str]]
                           ) -> list[BaseException | None]:
        """Delete objects (a missing one is fine), ``BATCH_LIMIT`` to a request of the batch
        endpoint; one result per object. A single object goes as a plain DELETE."""
        if self._each_alone and len(objects) > 1:  # a small commit's: no batch to wait for
            return await self._delete_each(objects)
        results: list[BaseException | None] = [None] * len(objects)
        if len(objects) == 1:
            try:
                await self._delete_object(*objects[0])
            except (GcsHttpError, StoreError) as e:
                results[0] = e
            return results
        groups = [list(range(i, min(i + BATCH_LIMIT, len(objects))))
                  for i in range(0, len(objects), BATCH_LIMIT)]

        async def one_batch(group: list[int]) -> None:
            try:
                answers = await self._batch_delete([objects[i] for i in group])
            except BatchRefused:
                self._count_fallback(len(group))

                async def delete_one(i: int) -> None:
                    await self._delete_object(*objects[i])

                answers = await map_bounded(delete_one, group, self._batch_workers)
            except Exception as e:  # a store's error or not: none of the group known deleted
                for i in group:
                    results[i] = e
                return
            for i, error in zip(group, answers, strict=True):
                results[i] = error

        await map_bounded(one_batch, groups, self.concurrency)
        return results

    async def _delete_each(self, objects: Sequence[tuple[str, str]]
                           ) -> list[BaseException | None]:
        """Deletes, one request each, raced in their latency tail (sent twice, a delete
        removes nothing more: a renamed source lives in its task attempt's directory, which
        nothing else writes; a tree is being deleted whole)."""
        async def one(obj: tuple[str, str]) -> None:
            await self._delete_object(*obj, hedge=True)

        return await map_bounded(one, objects, self.concurrency)

    async def _batch_delete(self, objects: Sequence[tuple[str, str]]
                            ) -> list[BaseException | None]:
        """One request to the batch endpoint deleting ``objects``; a result per object."""
        host = self._origin.host_header
        calls = [f"DELETE {self._api}/{self._obj(b, k)} HTTP/1.1\r\nHost: {host}\r\n\r\n"
                 .encode() for b, k in objects]
        # deletes only: sending the batch twice deletes nothing more
        answers = await self._batch_call("delete_file", calls,
                                         [self._url(*o) for o in objects], idempotent=True,
                                         hedge=self._races)
        out: list[BaseException | None] = []
        for answer in answers:
            if isinstance(answer, BaseException):
                out.append(answer)
            elif 200 <= answer.status < 300 or answer.status == 404:  # 404: already gone
                out.append(None)
            else:
                out.append(GcsHttpError(answer.status, _error_message(answer.body),
                                        retry_after=_retry_after(answer)))
        return out

    async def _batch_call(self, op: str, calls: Sequence[bytes], names: Sequence[str], *,
                          idempotent: bool, hedge: bool = False
                          ) -> list[Response | BaseException]:
        """One request to the batch endpoint carrying ``calls`` (each a whole HTTP request;
        ``names``: the object each is about, for errors); in order, each call's answer
        (whatever its status), or a ``TransientStoreError`` where the batch's answer holds
        none for it (its outcome unknown). A failure of the whole request raises. ``hedge``:
        a slow batch may be raced by a copy (deletes: sent twice, they delete nothing more)."""
        if self.faults is not None and self.faults.before(op):
            raise GcsHttpError(self.faults.status, "injected: backend busy")
        if self._no_batch_endpoint:
            raise BatchRefused("the endpoint has no batch API")
        boundary = new_boundary("batch_")
        body = batch_body(boundary, calls, angle_ids=True, binary=False)
        epoch = self._limit.epoch
        response = await self._send(
            "POST", self._batch, None, body,
            {"Content-Type": f"multipart/mixed; boundary={boundary}"}, None, op,
            idempotent=idempotent, hedge=hedge, parts=len(calls))
        if response.status in _REFUSED_WHOLE:
            if response.status in (404, 405, 501):
                self._no_batch_endpoint = True
            raise BatchRefused(f"batch of {len(calls)} refused whole (HTTP {response.status}: "
                               f"{_error_message(response.body)})")
        if response.status >= 300:
            raise GcsHttpError(response.status, _error_message(response.body),
                               retry_after=_retry_after(response))
        try:
            parts = parse_batch_response(response.header("content-type"), response.body)
        except ValueError as e:
            raise BatchRefused(f"unreadable answer to a batch of {len(calls)}: {e}") from None
        answered: list[Response | None] = [None] * len(calls)
        throttled = 0
        for part in parts:
            try:
                i = int(part.content_id)
            except ValueError:
                continue
            if 0 <= i < len(calls):
                answered[i] = part.response
                throttled += part.status in _THROTTLE_STATUS
        # an error made only for a call left without an answer (one per call, every batch,
        # was CPU spent for nothing)
        out: list[Response | BaseException] = [
            r if r is not None else TransientStoreError(
                f"no answer in the batch for {name}", name)
            for r, name in zip(answered, names, strict=True)]
        if throttled:  # throttled calls steer the limit as their share of a request
            self._limit.throttled_answer(epoch, throttled, len(calls))
        return out

