"""The whole-manifest check (``plain_files`` / ``plain_directories``) against the entry-by-entry
one: it may decline anything, but what it accepts the entry-by-entry check accepts too, with the
same locations, and it does accept ordinary manifests (else the fast path would never run).

Every test runs twice: with the C module ``_checks`` answering first (as installed), and with
the Python version alone; and the C answers are compared with the Python ones directly."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from committer.job.stages import entry_checks as untrusted
from committer.job.stages.entry_checks import EntryChecker
from manifest_schema.uris import location_to_uri


def _c_built() -> bool:
    return importlib.util.find_spec("committer.job.stages._checks") is not None


@pytest.fixture(autouse=True, params=["c", "python"])
def implementation(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
                   ) -> Iterator[str]:
    if request.param == "python":
        monkeypatch.setattr(untrusted, "_checks", None)
    else:
        assert _c_built(), "committer/job/stages/_checks.c was not built"
        assert vars(untrusted)["_checks"] is not None
    yield request.param

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
            "z": draw(hs.one_of(hs.integers(-1, 10), hs.sampled_from([True, "5", 1.0, None]),
                                hs.integers(2**62, 2**70), hs.integers(-(2**70), -(2**62)))),
        }
        if draw(hs.booleans()):
            entry["e"] = draw(hs.one_of(hs.text(max_size=4), hs.integers()))
        files.append(draw(hs.sampled_from([entry, entry, entry, dict(entry, s=None), [1],
                                           {k: v for k, v in entry.items() if k != "d"}])))
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


@pytest.mark.parametrize("dest,part", [
    ("abfs://data@account.dfs.core.windows.net/table", "p=1"),
    # not ASCII, and object store paths are not escaped: the C module declines, Python decides
    ("gs://bucket/tåble", "p=ø"),
])
def test_cloud_locations_take_the_fast_path(dest: str, part: str) -> None:
    checker = EntryChecker(dest, dest + "/_temporary/manifest_j/00/tasks")
    own = f"{dest}/_temporary/manifest_j/00/tasks/{ATTEMPT}"
    files = [{"s": f"{own}/{part}/f{k}", "d": f"{dest}/{part}/f{k}", "z": 1} for k in range(3)]
    assert checker.plain_files(files, ATTEMPT) == [
        (f"{own}/{part}/f{k}", f"{dest}/{part}/f{k}", 1, None) for k in range(3)]
    assert checker.plain_directories([{"d": f"{dest}/{part}", "l": 1}]) == {f"{dest}/{part}": 1}


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


def _python_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(untrusted, "_checks", None)


@settings(max_examples=400, deadline=None)
@given(manifests())
def test_c_files_answer_as_python_or_decline(case: tuple[str, list[Any]]) -> None:
    # the fixture's parameter does not matter here: both are called directly
    assert _c_built()
    from committer.job.stages import _checks

    dest, files = case
    checker = _checker(dest)
    with pytest.MonkeyPatch.context() as mp:
        _python_only(mp)
        expected = checker.plain_files(files, ATTEMPT)
    own = f"{checker.tasks_prefix}{ATTEMPT}/"
    own_uri, dest_uri = untrusted._uri_prefix(own), checker._dest_uri
    if own_uri is None or dest_uri is None:
        return  # plain_files declines before asking the C module
    got = _checks.files(files, own_uri, dest_uri, own, checker.dest_prefix, untrusted._RESERVED)
    assert got is None or got == expected


@settings(max_examples=300, deadline=None)
@given(dest=hs.sampled_from([PLAIN_DEST, DEST, "abfs://c@a.dfs.core.windows.net/t"]),
       rels=hs.lists(RELS, max_size=5),
       statuses=hs.lists(hs.one_of(hs.integers(-1, 6), hs.just(None)), min_size=5, max_size=5),
       levels=hs.lists(hs.one_of(hs.integers(-1, 4), hs.just(True), hs.integers(2**63)),
                       min_size=5, max_size=5),
       raw=hs.booleans(), with_root=hs.booleans(), missing=hs.sampled_from(["", "t", "l"]))
def test_c_directories_answer_as_python_or_decline(
        dest: str, rels: list[str], statuses: list[Any], levels: list[Any], raw: bool,
        with_root: bool, missing: str) -> None:
    assert _c_built()
    from committer.job.stages import _checks

    checker = EntryChecker(dest, dest + "/_temporary/manifest_j/00/tasks")
    dirs: list[dict[str, Any]] = [
        {k: v for k, v in {"d": _uri(dest + "/", r, raw), "t": t, "l": lvl}.items()
         if k != missing}
        for r, t, lvl in zip(rels, statuses, levels, strict=False)]
    if with_root:
        dirs.append({"d": location_to_uri(dest), "t": 3, "l": 0})
    with pytest.MonkeyPatch.context() as mp:
        _python_only(mp)
        expected = checker.plain_directories(dirs)
    dest_uri, root_uri = checker._dest_uri, checker._root_uri
    if dest_uri is None or root_uri is None:
        return
    got = _checks.directories(dirs, dest_uri, root_uri, checker.dest_prefix,
                              untrusted._DIR_STATUSES, untrusted._RESERVED)
    assert got is None or got == expected


def test_c_checks_answer_for_ordinary_manifests() -> None:
    # else the C module would never be what answers, and the Python version would do the work
    assert _c_built()
    from committer.job.stages import _checks

    checker = _checker(PLAIN_DEST)
    own = f"{TASKS}/{ATTEMPT}/"
    own_uri, dest_uri = location_to_uri(own), location_to_uri(PLAIN_DEST + "/")
    files = [{"s": f"{own_uri}p={k}/f{k}", "d": f"{dest_uri}p={k}/f{k}", "z": k, "e": "x"}
             for k in range(10)]
    assert _checks.files(files, own_uri, dest_uri, own, checker.dest_prefix,
                         untrusted._RESERVED) == [
        (f"{own}p={k}/f{k}", f"{PLAIN_DEST}/p={k}/f{k}", k, "x") for k in range(10)]
    dirs = [{"d": f"{dest_uri}p={k}", "l": 1} for k in range(10)] + [{"d": f"{dest_uri}p=0"}]
    assert _checks.directories(dirs, dest_uri, location_to_uri(PLAIN_DEST), checker.dest_prefix,
                               untrusted._DIR_STATUSES, untrusted._RESERVED) == {
        f"{PLAIN_DEST}/p={k}": 1 for k in range(10)}


def test_c_checks_refuse_wrong_arguments() -> None:
    assert _c_built()
    from committer.job.stages import _checks

    with pytest.raises(TypeError):
        _checks.files([], "a")  # type: ignore[call-arg]
    # arguments that are not ASCII strings: declined, not crashed on
    assert _checks.files([{"s": "a/x", "d": "b/x", "z": 0}], b"a/", "b/", "a/", "b/",  # type: ignore[arg-type]
                         ()) is None
    assert _checks.directories([{"d": "b/x"}], "b/", "b", "b/", {0}, ["_x"]) is None  # type: ignore[arg-type]


def _entries(dests: list[str]) -> list[untrusted.Entry]:
    return [(f"{TASKS}/{ATTEMPT}/f{i}", d, 0, None) for i, d in enumerate(dests)]


def test_destinations_claimed_twice_become_suspects() -> None:
    seen: set[int] = set()
    suspects: set[int] = set()
    parents: set[str] = set()
    untrusted.note_destinations(_entries(["/o/p=1/a", "/o/p=2/b", "/o/p=1/a"]), seen, suspects,
                                parents)  # twice in one manifest
    assert suspects == {hash("/o/p=1/a")}
    untrusted.note_destinations(_entries(["/o/p=2/b", "/o/c", "naïve/d", "bare"]), seen,
                                suspects, parents)  # again in another one
    assert suspects == {hash("/o/p=1/a"), hash("/o/p=2/b")}
    assert seen == {hash(d) for d in ["/o/p=1/a", "/o/p=2/b", "/o/c", "naïve/d", "bare"]}
    assert parents == {"/o/p=1", "/o/p=2", "/o", "naïve", ""}


@settings(max_examples=300, deadline=None)
@given(batches=hs.lists(hs.lists(hs.sampled_from(
    ["/o/a", "/o/p=1/a", "/o/p=1/b", "/o/p=2/a", "x", "/", "//", "/o/naïve/é", "/o/p=1/"]),
    max_size=6), max_size=4))
def test_c_note_destinations_answers_as_python(batches: list[list[str]]) -> None:
    assert _c_built()
    from committer.job.stages import _checks

    c_sets: tuple[set[int], set[int], set[str]] = (set(), set(), set())
    py_sets: tuple[set[int], set[int], set[str]] = (set(), set(), set())
    for dests in batches:
        _checks.note_destinations(_entries(dests), *c_sets)
        with pytest.MonkeyPatch.context() as mp:
            _python_only(mp)
            untrusted.note_destinations(_entries(dests), *py_sets)
    assert c_sets == py_sets


def test_c_note_destinations_refuses_wrong_arguments() -> None:
    assert _c_built()
    from committer.job.stages import _checks

    with pytest.raises(TypeError):
        _checks.note_destinations([("s", b"d", 0, None)], set(), set(), set())  # type: ignore[list-item]
    with pytest.raises(TypeError):
        _checks.note_destinations([("s",)], set(), set(), set())  # type: ignore[list-item]
    with pytest.raises(TypeError):
        _checks.note_destinations([], set(), set(), frozenset())  # type: ignore[arg-type]
