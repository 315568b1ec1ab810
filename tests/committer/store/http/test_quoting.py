"""The fast percent-encoding is byte for byte ``urllib.parse.quote``'s (signatures cover it)."""

from __future__ import annotations

from urllib.parse import quote

from hypothesis import given
from hypothesis import strategies as st

from committer.store.http.quoting import quote_name, quote_path

ODD = ["p=a b%3Ac/part-0.parquet", "#?&+;,=@:$!'()*[]{}|\\^`\"<>", "ü/ß/日本", "~._-", "",
       "\t\n\x00\x7f", "a//b/"]


def test_odd_names() -> None:
    for text in ODD:
        assert quote_path(text) == quote(text, safe="/~")
        assert quote_name(text) == quote(text, safe="")


@given(st.text(max_size=40))
def test_any_text(text: str) -> None:
    assert quote_path(text) == quote(text, safe="/~")
    assert quote_name(text) == quote(text, safe="")


@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=60))
def test_any_ascii(text: str) -> None:
    assert quote_path(text) == quote(text, safe="/~")
    assert quote_name(text) == quote(text, safe="")
