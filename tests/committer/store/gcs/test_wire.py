"""The times GCS answers with, read alike on every Python the package supports (3.10's
``datetime.fromisoformat`` takes neither "Z" nor every length of a fraction of a second)."""

from __future__ import annotations

import pytest

from committer.store.gcs.wire import _ts

EPOCH_2024_05_01_10H = 1714557600.0


@pytest.mark.parametrize(("text", "seconds"), [
    ("2024-05-01T10:00:00Z", EPOCH_2024_05_01_10H),
    ("2024-05-01T10:00:00.123Z", EPOCH_2024_05_01_10H + 0.123),
    ("2024-05-01T10:00:00.12Z", EPOCH_2024_05_01_10H + 0.12),  # Go's RFC3339Nano trims zeros
    ("2024-05-01T10:00:00.123456789Z", EPOCH_2024_05_01_10H + 0.123456),  # past micros: cut
    ("2024-05-01t10:00:00.5z", EPOCH_2024_05_01_10H + 0.5),
    ("2024-05-01T12:00:00.250+02:00", EPOCH_2024_05_01_10H + 0.25),
    ("2024-05-01T07:30:00-02:30", EPOCH_2024_05_01_10H),
])
def test_rfc3339_times(text: str, seconds: float) -> None:
    assert _ts(text) == pytest.approx(seconds, abs=1e-6)


@pytest.mark.parametrize("text", [None, "", "junk", "2024-13-01T10:00:00Z",
                                  "2024-05-01T10:00:00.Z", "2024-05-01T10:00:00Zjunk"])
def test_no_time_is_none(text: str | None) -> None:
    assert _ts(text) is None
