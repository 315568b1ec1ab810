"""The in-memory store: lookups, listings in lexicographic order with markers, directories."""

from __future__ import annotations

import random

import pytest

from committer.testing.cloud_sim.namespace import Bucket, Namespace, PathConflict


def _flat(keys: list[str]) -> tuple[Namespace, Bucket]:
    ns = Namespace(hierarchical=False, seed=1)
    bucket = ns.ensure_bucket("b")
    for key in keys:
        ns.put(bucket, key, ns.new_file(key.encode(), len(key)))
    return ns, bucket


def _names(ns: Namespace, bucket: Bucket, prefix: str = "", delimiter: str = "",
           start: str = "") -> list[str]:
    return [e.name + ("(prefix)" if e.obj is None else "")
            for e in ns.iterate(bucket, prefix, delimiter=delimiter, start=start)]


KEYS = ["a/b", "a/b/c", "a/b-x", "a/b/d/e", "a/ba", "b", "a//x", "dir/", "dir/f", "z"]


def test_full_listing_is_lexicographic_over_whole_keys() -> None:
    ns, bucket = _flat(KEYS)
    # a directory's subtree sorts as "name/": "a/b-x" ('-' < '/') comes before "a/b/c"
    assert _names(ns, bucket) == sorted(KEYS)
    assert ns.files == len(KEYS)


@pytest.mark.parametrize("prefix", ["", "a", "a/", "a/b", "a/b/", "a/b/d", "dir", "dir/", "q"])
def test_prefix_listing_matches_a_filter_of_the_sorted_keys(prefix: str) -> None:
    ns, bucket = _flat(KEYS)
    assert _names(ns, bucket, prefix) == sorted(k for k in KEYS if k.startswith(prefix))


@pytest.mark.parametrize("prefix", ["", "a/", "a/b", "a/b/", "dir/"])
def test_delimiter_rolls_up_what_lies_below(prefix: str) -> None:
    ns, bucket = _flat(KEYS)
    expected: dict[str, str] = {}
    for key in sorted(KEYS):
        if not key.startswith(prefix):
            continue
        rest = key[len(prefix):]
        if "/" in rest:
            cut = prefix + rest[:rest.index("/") + 1]
            expected[cut] = cut + "(prefix)"
        else:
            expected[key] = key
    assert _names(ns, bucket, prefix, "/") == [expected[k] for k in sorted(expected)]


def test_other_delimiters_are_rolled_up_from_the_full_listing() -> None:
    ns, bucket = _flat(["x-1-a", "x-1-b", "x-2", "y"])
    assert _names(ns, bucket, "x-", "-") == ["x-1-(prefix)", "x-2"]


def test_markers_resume_exactly_where_a_page_ended() -> None:
    rng = random.Random(3)
    keys = sorted({"/".join(rng.choice("ab") for _ in range(rng.randint(1, 4)))
                   + rng.choice(["", "-", ".x"]) for _ in range(200)})
    ns, bucket = _flat(keys)
    for delimiter in ("", "/"):
        for prefix in ("", "a/", "b"):
            whole = _names(ns, bucket, prefix, delimiter)
            paged: list[str] = []
            start = ""
            while True:
                page, nxt = ns.page(bucket, prefix, delimiter=delimiter, start=start, limit=3)
                paged += [e.name + ("(prefix)" if e.obj is None else "") for e in page]
                if nxt is None:
                    break
                start = nxt
            assert paged == whole, (delimiter, prefix)


def test_flat_remove_prunes_empty_directories() -> None:
    ns, bucket = _flat(["a/b/c"])
    assert ns.remove(bucket, "a/b/c") is not None
    assert not bucket.root.dirs and ns.files == 0
    assert ns.remove(bucket, "a/b/c") is None


def test_hierarchical_directories_are_real() -> None:
    ns = Namespace(hierarchical=True, seed=1)
    bucket = ns.ensure_bucket("fs")
    ns.put(bucket, "a/b/c", ns.new_file(b"x", 1))
    assert ns.dirs == 2 and ns.files == 1
    # a directory shows as its own record and, not empty, as a prefix
    assert _names(ns, bucket) == ["a", "a/b", "a/b/c"]
    assert _names(ns, bucket, "a/", "/") == ["a/b", "a/b/(prefix)"]
    ns.remove(bucket, "a/b/c")
    assert _names(ns, bucket, "a/", "/") == ["a/b"]  # empty directories stay
    ns.put(bucket, "a/b/c", ns.new_file(b"x", 1))
    with pytest.raises(PathConflict):  # a file is where a directory must be
        ns.put(bucket, "a/b/c/d", ns.new_file(b"y", 1))
    ns.delete_dir(bucket, "a")
    assert ns.files == 0 and ns.dirs == 0 and not bucket.root.dirs


def test_content_less_objects_read_as_zeros_with_random_sums() -> None:
    ns = Namespace(hierarchical=False, seed=5)
    a, b = ns.new_file(None, 4), ns.new_file(None, 4)
    assert a.content() == bytes(4)
    assert a.sums is not None and b.sums is not None and len(a.sums) == 20
    assert a.sums != b.sums
    assert a.seq != b.seq
