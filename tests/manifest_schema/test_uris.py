"""The Hadoop URI <-> location codec: Hadoop's escaping exactly, and a lossless round trip."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from manifest_schema.uris import is_local, location_to_uri, split_scheme, uri_to_location


@pytest.mark.parametrize(("location", "uri"), [
    ("/data/x", "file:/data/x"),
    ("/a b/c", "file:/a%20b/c"),
    ("/p=a b%3Ac/f", "file:/p=a%20b%253Ac/f"),  # Hive-escaped value: the % itself is escaped
    ("/p=ü #/f", "file:/p=ü%20%23/f"),  # non-ASCII letters stay; # is escaped
    ("/q?x", "file:/q%3Fx"),
    ("/tab\there", "file:/tab%09here"),
    ("/nbsp\u00a0x", "file:/nbsp%C2%A0x"),  # a non-ASCII space is escaped
    ("/keep-_.!~*'(),;:$&+=@", "file:/keep-_.!~*'(),;:$&+=@"),
    ("gs://bucket/a b/c%d", "gs://bucket/a%20b/c%25d"),
    ("abfs://c@acct.dfs.core.windows.net/p=ü #", "abfs://c@acct.dfs.core.windows.net/p=ü%20%23"),
])
def test_location_to_uri_escapes_as_hadoop(location: str, uri: str) -> None:
    assert location_to_uri(location) == uri
    assert uri_to_location(uri) == location


@pytest.mark.parametrize("uri", ["file:///a%20b", "file:/a%20b", "file://localhost/a%20b"])
def test_every_hadoop_spelling_of_a_local_file_reads_the_same(uri: str) -> None:
    assert uri_to_location(uri) == "/a b"


def test_decoding_happens_exactly_once() -> None:
    assert uri_to_location("file:/p=a%20b%253Ac") == "/p=a b%3Ac"  # not "/p=a b:c"


@pytest.mark.parametrize("uri", ["relative/path", "file://remotehost/x", "file:relative",
                                 "gs:bucket/x"])
def test_malformed_uris_are_refused(uri: str) -> None:
    with pytest.raises(ValueError):
        uri_to_location(uri)


def test_scheme_helpers() -> None:
    assert split_scheme("gs://b/k") == ("gs", "//b/k")
    assert split_scheme("C:/windows") == ("", "C:/windows")
    assert split_scheme("/plain") == ("", "/plain")
    assert is_local("/x") and is_local("file:/x") and not is_local("abfs://c@a/x")


def test_hadoop_fixture_uris_round_trip(hadoop_fixtures: Path) -> None:
    """Every URI Hadoop wrote decodes to a path and encodes back to exactly Hadoop's string."""
    checked = 0
    for n in range(3):
        doc = orjson.loads((hadoop_fixtures / f"task_20240101000000_0001_m_00000{n}-manifest.json"
                            ).read_bytes())
        uris = [f["d"] for f in doc["files"]] + [d["d"] for d in doc["directories"]]
        uris.append(doc["taskAttemptDir"])
        for uri in uris:
            assert location_to_uri(uri_to_location(uri)) == uri
            checked += 1
        for f in doc["files"]:  # sources are file:///...: the same path, one-slash form
            assert location_to_uri(uri_to_location(f["s"])) == "file:" + f["s"][len("file://"):]
    listing = orjson.loads((hadoop_fixtures / "destination-listing.json").read_bytes())
    base = location_to_uri(listing["dest"])
    assert base == "file:/tmp/manifest-committer-fixtures/dest%20dir%20ü%20%23%25/table"
    assert checked == 11  # 4 files, 4 directories, 3 task attempt directories


_segment = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="/\x00"),
                   min_size=1, max_size=12)


@settings(max_examples=300, deadline=None)
@given(st.lists(_segment, min_size=1, max_size=5))
def test_local_locations_round_trip(segments: list[str]) -> None:
    location = "/" + "/".join(segments)
    uri = location_to_uri(location)
    assert uri.startswith("file:/") and not uri.startswith("file://")
    assert " " not in uri and "#" not in uri and "?" not in uri
    assert uri_to_location(uri) == location
    assert uri_to_location("file://" + uri[len("file:"):]) == location  # Hadoop's source form


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["gs", "abfs", "s3a"]), st.lists(_segment, min_size=1, max_size=4))
def test_cloud_locations_round_trip(scheme: str, segments: list[str]) -> None:
    location = f"{scheme}://bucket/" + "/".join(segments)
    assert uri_to_location(location_to_uri(location)) == location
