"""The whole-manifest check (``plain_files`` / ``plain_directories``) against the entry-by-entry
one: it may decline anything, but what it accepts the entry-by-entry check accepts too, with the
same locations, and it does accept ordinary manifests (else the fast path would never run)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as hs

from committer.job.untrusted import EntryChecker
from manifest_schema.uris import location_to_uri

DEST = "/data/out table"  # a space: URIs of it are escaped, so the fast path must decline
PLAIN_DEST = "/data/out"
TASKS = "/data/out/_temporary/manifest_j/00/tasks"
ATTEMPT = "attempt_j_m_000001_0"

# segments: ordinary ones, and every kind of thing the checks must notice
SEGMENTS = hs.one_of(
    hs.sampled_from(["p=1", "part-0.parquet", "a", "year=2024", "x.csv", "data"]),
    hs.sampled_from(["", ".", "..", ".hidden", "%2e%2e", "a%2Fb", "_temporary", "_SUCCESS",
                     "with space", "hash#", "naïve", "a\x00b", "100%", "/"]),
    hs.text(min_size=1, max_size=6),
)
RELS = hs.lists(SEGMENTS, min_size=1, max_size=4).map("/".join)


def _checker(dest: str) -> EntryChecker:
    return EntryChecker(dest, TASKS.replace(PLAIN_DEST, dest, 1))


def _uri(prefix: str, rel: str, raw: bool) -> str:
    # raw: the relative part written into the URI as it is (possibly invalid); else escaped
    return location_to_uri(prefix) + rel if raw else location_to_uri(prefix + rel)


@hs.composite
def manifests(draw: hs.DrawFn) -> tuple[str, list[Any]]:
    dest = draw(hs.sampled_from([PLAIN_DEST, DEST]))
    own = f"{TASKS.replace(PLAIN_DEST, dest, 1)}/{draw(hs.sampled_from([ATTEMPT, 'other']))}/"
    n = draw(hs.integers(1, 5))
    files: list[Any] = []
    for _ in range(n):
        rel_s, rel_d = draw(RELS), draw(RELS)
        raw = draw(hs.booleans())
        entry: dict[str, Any] = {
            "s": _uri(draw(hs.sampled_from([own, dest + "/"])), rel_s, raw),
            "d": _uri(draw(hs.sampled_from([dest + "/", dest + "2/", "/elsewhere/"])), rel_d,
                      raw),
            "z": draw(hs.one_of(hs.integers(-1, 10), hs.sampled_from([True, "5", 1.0]))),
        }
        if draw(hs.booleans()):
            entry["e"] = draw(hs.one_of(hs.text(max_size=4), hs.integers()))
        files.append(draw(hs.sampled_from([entry, entry, entry, dict(entry, s=None), [1]])))
    if n > 1 and draw(hs.booleans()):
        files.append(files[0])  # a duplicate entry
    return dest, files


@settings(max_examples=400, deadline=None)
@given(manifests())
def test_accepted_files_are_accepted_entry_by_entry(case: tuple[str, list[Any]]) -> None:
    dest, files = case
    checker = _checker(dest)
    fast = checker.plain_files(files, ATTEMPT)
    if fast is None:
        return
    assert len(fast) == len(files)
    sources: set[str] = set()
    dests: set[str] = set()
    for entry, (src, dst, size, etag) in zip(files, fast, strict=True):
        assert checker.source(entry["s"], ATTEMPT) == (src, "")
        assert checker.destination(entry["d"]) == (dst, "")
        assert type(size) is int and size >= 0 and size == entry["z"]
        assert etag is None or type(etag) is str
        sources.add(src)
        dests.add(dst)
    assert len(sources) == len(dests) == len(files)


@settings(max_examples=300, deadline=None)
@given(dest=hs.sampled_from([PLAIN_DEST, DEST]),
       rels=hs.lists(RELS, max_size=5),
       levels=hs.lists(hs.one_of(hs.integers(-1, 4), hs.just(True)), min_size=5, max_size=5),
       raw=hs.booleans(), with_root=hs.booleans())
def test_accepted_directories_are_accepted_entry_by_entry(
        dest: str, rels: list[str], levels: list[Any], raw: bool, with_root: bool) -> None:
    checker = _checker(dest)
    dirs: list[dict[str, Any]] = [{"d": _uri(dest + "/", r, raw), "t": 0, "l": lvl}
                                  for r, lvl in zip(rels, levels, strict=False)]
    if with_root:
        dirs.append({"d": location_to_uri(dest), "t": 3, "l": 0})
    fast = checker.plain_directories(dirs)
    if fast is None:
        return
    expected: dict[str, int] = {}
    for entry in dirs:
        loc, why = checker.directory(entry["d"])
        assert loc is not None, why
        assert type(entry["l"]) is int and entry["l"] >= 0
        if not checker.is_root(loc):
            expected.setdefault(loc, entry["l"])
    assert fast == expected


def test_ordinary_manifests_take_the_fast_path() -> None:
    checker = _checker(PLAIN_DEST)
    own = f"{TASKS}/{ATTEMPT}"
    files = [{"s": location_to_uri(f"{own}/p={k}/part-{k}.parquet"),
              "d": location_to_uri(f"{PLAIN_DEST}/p={k}/part-{k}.parquet"), "z": k, "e": None}
             for k in range(50)]
    fast = checker.plain_files(files, ATTEMPT)
    assert fast == [(f"{own}/p={k}/part-{k}.parquet", f"{PLAIN_DEST}/p={k}/part-{k}.parquet", k,
                     None) for k in range(50)]
    dirs = [{"d": location_to_uri(f"{PLAIN_DEST}/p={k}"), "t": 0, "l": 1} for k in range(50)]
    dirs.append({"d": location_to_uri(PLAIN_DEST), "t": 3, "l": 0})
    assert checker.plain_directories(dirs) == {f"{PLAIN_DEST}/p={k}": 1 for k in range(50)}


def test_cloud_locations_take_the_fast_path() -> None:
    dest = "abfs://data@account.dfs.core.windows.net/table"
    checker = EntryChecker(dest, dest + "/_temporary/manifest_j/00/tasks")
    own = f"{dest}/_temporary/manifest_j/00/tasks/{ATTEMPT}"
    files = [{"s": f"{own}/p=1/f{k}", "d": f"{dest}/p=1/f{k}", "z": 1} for k in range(3)]
    assert checker.plain_files(files, ATTEMPT) == [
        (f"{own}/p=1/f{k}", f"{dest}/p=1/f{k}", 1, None) for k in range(3)]


def test_unusual_manifests_are_left_to_the_entry_by_entry_check() -> None:
    checker = _checker(PLAIN_DEST)
    own = location_to_uri(f"{TASKS}/{ATTEMPT}")
    dest = location_to_uri(PLAIN_DEST)
    for src_rel, dst_rel in [("a%20b", "a b"), ("_SUCCESS", "x/_SUCCESS"), (".x", "x"),
                             ("x", "_temporary/x"), ("x", "a/../b"), ("x", "a//b"), ("x", "")]:
        files = [{"s": f"{own}/{src_rel}", "d": f"{dest}/{dst_rel}", "z": 0}]
        assert checker.plain_files(files, ATTEMPT) is None, (src_rel, dst_rel)
    assert checker.plain_files([], ATTEMPT) is None
    assert checker.plain_files(None, ATTEMPT) is None
