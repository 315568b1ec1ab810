"""LocalStore opened for a destination: renames and directory creation stay beneath it.

Every test runs on both builds of the rename loop (C module, ctypes fallback) and both ways of
resolving a directory (``openat2`` in the kernel, and the ``O_NOFOLLOW`` walk used where the
kernel lacks it), which must give the same results."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from committer.config import CommitterConfig
from committer.errors import PathExistsError, PathNotFoundError, StoreError, UnsafePathError
from committer.store import open_store
from committer.store.local import LocalStore
from committer.store.local import beneath as beneath_module


@pytest.fixture(params=["native loops", "ctypes loops"])
def loops(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    from committer.store.local import store as local_store

    if request.param == "ctypes loops":
        monkeypatch.setattr(local_store, "_native", None)
    else:
        import importlib.util

        built = importlib.util.find_spec("committer.store.local._native") is not None
        assert built, "committer/store/local/_native.c was not built"
    return str(request.param)


@pytest.fixture(params=["openat2", "walk"])
def resolve(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "openat2":
        assert beneath_module.use_openat2(True), "this kernel has no openat2"
    else:
        beneath_module.use_openat2(False)
    yield str(request.param)
    beneath_module.use_openat2(True)


@pytest.fixture
def dest(tmp_path: Path, loops: str, resolve: str) -> Path:
    d = tmp_path / "dest"
    (d / "_temporary" / "task").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    return d


def _store(dest: Path, follow: bool = False) -> LocalStore:
    return LocalStore(str(dest), follow_symlinks=follow)


def _task_file(dest: Path, name: str, data: bytes = b"x") -> str:
    p = dest / "_temporary" / "task" / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
    return str(p)


def _open_under(root: Path) -> list[str]:
    """What this process holds open under ``root`` (its directories the store kept open):
    counting every fd would also count what other threads open and close meanwhile."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # closed since listed
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target == str(root) or target.startswith(f"{root}/"):
                found.append(target)
    return found


def test_mkdirs_refuses_a_link_anywhere_beneath_and_creates_nothing_outside(dest: Path) -> None:
    outside = dest.parent / "outside"
    os.symlink(outside, dest / "p=1")
    store = _store(dest)
    for target in (dest / "p=1", dest / "p=1" / "q=2", dest / "p=1" / "q=2" / "r=3"):
        with pytest.raises(UnsafePathError, match=r"symbolic link.*follow\.symlinks.*p=1$"):
            store.mkdirs(str(target))
    assert list(outside.iterdir()) == []
    # a link to a directory beneath the destination is refused too: it is still a link
    (dest / "real").mkdir()
    os.symlink(dest / "real", dest / "alias")
    with pytest.raises(UnsafePathError, match="alias"):
        store.mkdirs(str(dest / "alias" / "x"))
    assert list((dest / "real").iterdir()) == []


def test_mkdirs_beneath_creates_and_reports_files_in_the_way(dest: Path) -> None:
    store = _store(dest)
    store.mkdirs(str(dest / "a" / "b" / "c"))
    store.mkdirs(str(dest / "a" / "b" / "c"))  # existing is fine
    store.mkdirs(str(dest))
    assert (dest / "a" / "b" / "c").is_dir()
    (dest / "f").write_bytes(b"f")
    with pytest.raises(PathExistsError, match="where a directory must be"):
        store.mkdirs(str(dest / "f"))
    with pytest.raises(PathExistsError, match="above directory"):
        store.mkdirs(str(dest / "f" / "g"))
    with pytest.raises(UnsafePathError, match=r"'\.\.'"):
        store.mkdirs(str(dest) + "/a/../../escaped")
    assert not (dest.parent / "escaped").exists()
    store.mkdirs(str(dest) + "/a/../d/./e")  # '..' that stays beneath is fine
    assert (dest / "d" / "e").is_dir()


def test_rename_file_and_replace_file_refuse_a_linked_directory(dest: Path) -> None:
    outside = dest.parent / "outside"
    os.symlink(outside, dest / "p=1")
    store = _store(dest)
    src = _task_file(dest, "p=1/a")
    with pytest.raises(UnsafePathError, match="p=1"):
        store.rename_file(src, str(dest / "p=1" / "a"))
    with pytest.raises(UnsafePathError, match="p=1"):
        store.replace_file(src, str(dest / "p=1" / "a"))
    assert Path(src).read_bytes() == b"x" and list(outside.iterdir()) == []
    with pytest.raises(PathNotFoundError, match="parent"):
        store.rename_file(src, str(dest / "none" / "a"))
    (dest / "file").write_bytes(b"f")
    with pytest.raises(StoreError, match="parent is not a directory") as info:
        store.rename_file(src, str(dest / "file" / "a"))
    assert not isinstance(info.value, PathExistsError)  # which would mean "destination exists"


def test_rename_batch_stops_at_the_first_entry_under_a_link(dest: Path) -> None:
    outside = dest.parent / "outside"
    for k in (1, 3):
        (dest / f"p={k}").mkdir()
    os.symlink(outside, dest / "p=2")
    entries = [(_task_file(dest, f"p={k}/f"), str(dest / f"p={k}" / "f"), 1, None)
               for k in (1, 2, 3)]
    store = _store(dest)
    reached, failures = store.rename_batch(entries, 0)
    assert reached == 2 and [i for i, _ in failures] == [1]
    assert isinstance(failures[0][1], UnsafePathError) and "p=2" in str(failures[0][1])
    assert (dest / "p=1" / "f").exists()
    assert list(outside.iterdir()) == []
    assert Path(entries[1][0]).exists() and Path(entries[2][0]).exists()
    # the caller goes on after the failed entry
    assert store.rename_batch(entries, 2) == (3, [])
    assert (dest / "p=3" / "f").exists() and list(outside.iterdir()) == []
    store.close()


def test_following_links_is_the_users_choice(dest: Path) -> None:
    outside = dest.parent / "outside"
    os.symlink(outside, dest / "p=1")
    store = _store(dest, follow=True)
    store.mkdirs(str(dest / "p=1" / "q"))
    store.rename_file(_task_file(dest, "a"), str(dest / "p=1" / "q" / "a"))
    entries = [(_task_file(dest, "b"), str(dest / "p=1" / "b"), 1, None)]
    assert store.rename_batch(entries, 0) == (1, [])
    assert sorted(p.name for p in outside.rglob("*")) == ["a", "b", "q"]
    store.close()


def test_the_root_itself_may_be_a_link(tmp_path: Path, dest: Path) -> None:
    os.symlink(dest, tmp_path / "via-link")
    root = tmp_path / "via-link"
    store = _store(root)
    store.mkdirs(str(root / "p=1"))
    src = str(root / "_temporary" / "task" / "a")
    Path(src).write_bytes(b"a")
    store.rename_file(src, str(root / "p=1" / "a"))
    assert (dest / "p=1" / "a").read_bytes() == b"a"


def test_paths_outside_the_root_are_used_as_given(tmp_path: Path, dest: Path) -> None:
    # a custom partition location elsewhere, reached through a link the user made
    elsewhere = tmp_path / "custom"
    (tmp_path / "outside" / "real").mkdir()
    os.symlink(tmp_path / "outside" / "real", elsewhere)
    store = _store(dest)
    store.mkdirs(str(elsewhere / "x"))
    entries = [(_task_file(dest, "a"), str(elsewhere / "x" / "a"), 1, None)]
    assert store.rename_batch(entries, 0) == (1, [])
    assert (tmp_path / "outside" / "real" / "x" / "a").exists()
    store.close()


def test_open_store_checks_beneath_the_location_unless_configured(dest: Path) -> None:
    outside = dest.parent / "outside"
    os.symlink(outside, dest / "p=1")
    with pytest.raises(UnsafePathError):
        open_store(str(dest)).mkdirs(str(dest / "p=1" / "q"))
    with pytest.raises(UnsafePathError):
        open_store(f"file://{dest}").mkdirs(str(dest / "p=1" / "q"))
    conf = CommitterConfig.from_hadoop_conf(
        {"spark.hadoop.mapreduce.manifest.committer.destination.follow.symlinks": "true"})
    assert conf.destination_follow_symlinks
    open_store(str(dest), conf).mkdirs(str(dest / "p=1" / "q"))
    assert (outside / "q").is_dir()


def test_a_directory_moved_away_is_not_renamed_into_later(dest: Path) -> None:
    # The rename loop keeps directories open across batches; moving or removing one through
    # the store must drop it, or later renames would follow the moved directory.
    store = _store(dest)
    (dest / "p=1").mkdir()
    first = [(_task_file(dest, "a"), str(dest / "p=1" / "a"), 1, None)]
    assert store.rename_batch(first, 0) == (1, [])
    aside = dest / "_temporary" / "aside"
    store.rename_file(str(dest / "p=1"), str(aside))  # a partition moved aside
    store.mkdirs(str(dest / "p=1"))
    second = [(_task_file(dest, "b"), str(dest / "p=1" / "b"), 1, None)]
    assert store.rename_batch(second, 0) == (1, [])
    assert sorted(p.name for p in aside.iterdir()) == ["a"]
    assert sorted(p.name for p in (dest / "p=1").iterdir()) == ["b"]
    # removed and made again: same
    assert store.delete_tree(str(dest / "p=1"))
    store.mkdirs(str(dest / "p=1"))
    third = [(_task_file(dest, "c"), str(dest / "p=1" / "c"), 1, None)]
    assert store.rename_batch(third, 0) == (1, [])
    assert sorted(p.name for p in (dest / "p=1").iterdir()) == ["c"]
    # swapped for a link by someone else after the store dropped it: refused
    assert store.remove_dir_if_empty(str(dest / "p=1")) is False
    os.rename(dest / "p=1", dest / "_temporary" / "old")
    os.symlink(dest.parent / "outside", dest / "p=1")
    fourth = [(_task_file(dest, "d"), str(dest / "p=1" / "d"), 1, None)]
    reached, failures = store.rename_batch(fourth, 0)
    assert reached == 1 and [i for i, _ in failures] == [0]
    assert isinstance(failures[0][1], UnsafePathError)
    store.close()


def test_many_directories_with_a_small_cache(dest: Path) -> None:
    # More destination directories than the cache holds and than one run may pin: every
    # file still lands, and closing the store closes every directory it kept open.
    store = _store(dest)
    store._dirs.capacity = 5
    store._pins_per_run = 3
    entries = []
    for k in range(40):
        (dest / f"p={k % 13}").mkdir(exist_ok=True)
        entries.append((_task_file(dest, f"t/{k}"), str(dest / f"p={k % 13}" / f"f{k}"), 1,
                        None))
    assert store.rename_batch(entries, 0) == (40, [])
    assert all((dest / f"p={k % 13}" / f"f{k}").exists() for k in range(40))
    assert len(store._dirs) <= 5
    assert _open_under(dest)
    store.close()
    assert _open_under(dest) == []


def test_writes_go_through_no_link_beneath_either(dest: Path) -> None:
    # _SUCCESS, the journal, history records: written beneath the destination, parents made
    outside = dest.parent / "outside"
    os.symlink(outside, dest / "_manifest_committer")
    store = _store(dest)
    with pytest.raises(UnsafePathError, match="_manifest_committer"):
        store.write_bytes(str(dest / "_manifest_committer" / "history" / "j.json"), b"{}")
    os.symlink(outside / "target", dest / "_SUCCESS")
    for exclusive in (False, True):
        with pytest.raises(StoreError, match="_SUCCESS"):
            store.write_bytes(str(dest / "_SUCCESS"), b"{}", exclusive=exclusive)
    with pytest.raises(UnsafePathError, match="_SUCCESS"):
        store.open_write(str(dest / "_SUCCESS"))
    assert list(outside.iterdir()) == []
    store.write_bytes(str(dest / "a" / "b" / "new.json"), b"{}", exclusive=True)
    with pytest.raises(PathExistsError):
        store.write_bytes(str(dest / "a" / "b" / "new.json"), b"{}", exclusive=True)
    with store.open_write(str(dest / "a" / "c" / "out.bin")) as f:
        f.write(b"data")
    assert (dest / "a" / "c" / "out.bin").read_bytes() == b"data"


def test_a_root_that_does_not_exist_yet_is_made(tmp_path: Path, dest: Path) -> None:
    root = tmp_path / "new" / "table"
    store = _store(root)
    store.write_bytes(str(root / "_temporary" / "j" / "_job.json"), b"{}")
    assert (root / "_temporary" / "j" / "_job.json").read_bytes() == b"{}"
    other = _store(tmp_path / "new2" / "table")
    other.mkdirs(str(tmp_path / "new2" / "table"))
    assert (tmp_path / "new2" / "table").is_dir()
    (tmp_path / "file").write_bytes(b"f")
    with pytest.raises(PathExistsError, match="above directory"):
        _store(tmp_path / "file" / "t").mkdirs(str(tmp_path / "file" / "t" / "x"))


def test_a_store_dropped_without_close_closes_its_directories(dest: Path) -> None:
    # recovery and the CLI open stores and drop them: the fds the rename loop kept open must
    # go with the store (nothing may keep it alive), not accumulate in the process
    import gc

    for k in range(20):
        store = _store(dest)
        (dest / f"p={k}").mkdir()
        entries = [(_task_file(dest, f"t{k}"), str(dest / f"p={k}" / "f"), 1, None)]
        assert store.rename_batch(entries, 0) == (1, [])
        assert len(store._dirs) == 1
        assert _open_under(dest)
        del store
    gc.collect()
    assert _open_under(dest) == []
