"""LocalStore: the store contract on local disk."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from committer.errors import PathExistsError, PathNotFoundError, StoreError
from committer.store.local import LocalStore
from manifest_schema.uris import local_path


@pytest.fixture(params=["native loops", "ctypes loops"])
def store(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> LocalStore:
    """Every test on both builds of the local loops: the C module, and the ctypes fallback
    of a machine that had no compiler."""
    from committer.store.local import store as local_store

    if request.param == "ctypes loops":
        monkeypatch.setattr(local_store, "_native", None)
    else:
        assert _native_built(), "committer/store/local/_native.c was not built"
    return LocalStore()


def _native_built() -> bool:
    import importlib.util

    return importlib.util.find_spec("committer.store.local._native") is not None


def test_local_path_accepts_file_uris() -> None:
    assert local_path("file:///a/b") == "/a/b"
    assert local_path("file://localhost/a") == "/a"
    assert local_path("file:/a") == "/a"
    assert local_path("/a") == "/a"


def test_rename_never_replaces(store: LocalStore, tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"a")
    (tmp_path / "b").write_bytes(b"b")
    with pytest.raises(PathExistsError):
        store.rename_file(str(tmp_path / "a"), str(tmp_path / "b"))
    assert (tmp_path / "a").read_bytes() == b"a" and (tmp_path / "b").read_bytes() == b"b"


def test_rename_missing_source_and_missing_parent(store: LocalStore, tmp_path: Path) -> None:
    with pytest.raises(PathNotFoundError, match="source"):
        store.rename_file(str(tmp_path / "none"), str(tmp_path / "x"))
    (tmp_path / "a").write_bytes(b"a")
    with pytest.raises(PathNotFoundError, match="parent"):
        store.rename_file(str(tmp_path / "a"), str(tmp_path / "no" / "x"))
    assert (tmp_path / "a").exists()


def test_rename_keeps_the_etag(store: LocalStore, tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"abc")
    before = store.stat(str(tmp_path / "a"))
    store.rename_file(str(tmp_path / "a"), f"file://{tmp_path}/b")
    after = store.stat(str(tmp_path / "b"))
    assert before.etag == after.etag and after.size == 3 and not after.is_dir
    assert store.proves_rename(after, 3, before.etag)
    assert not store.proves_rename(after, 4, before.etag)
    (tmp_path / "b").unlink()
    (tmp_path / "b").write_bytes(b"xyz")  # same size, a different file
    assert not store.proves_rename(store.stat(str(tmp_path / "b")), 3, before.etag)


def test_replace_file_overwrites(store: LocalStore, tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"new")
    (tmp_path / "b").write_bytes(b"old")
    store.replace_file(str(tmp_path / "a"), str(tmp_path / "b"))
    assert (tmp_path / "b").read_bytes() == b"new" and not (tmp_path / "a").exists()


def test_delete(store: LocalStore, tmp_path: Path) -> None:
    (tmp_path / "d" / "e").mkdir(parents=True)
    (tmp_path / "d" / "e" / "f").write_bytes(b"")
    (tmp_path / "g").write_bytes(b"")
    assert store.delete_file(str(tmp_path / "g")) is True
    assert store.delete_file(str(tmp_path / "g")) is False
    assert store.delete_tree(str(tmp_path / "d")) is True
    assert store.delete_tree(str(tmp_path / "d")) is False


def test_delete_tree_goes_on_when_part_of_it_is_removed_underneath(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A job's cleanup deletes its directory while late task attempts' aborts remove their own
    # attempt directories inside it: the rest of the tree must still go (the walk used to stop
    # at the vanished entry, say "nothing there", and leave the job directory behind).
    job = tmp_path / "job"
    attempts = [job / "tasks" / name for name in ("a", "b", "c")]
    for attempt in attempts:
        attempt.mkdir(parents=True)
        (attempt / "part-0").write_bytes(b"x")
    (job / "_journal.json").write_bytes(b"{}")
    real_unlink = os.unlink
    aborted: list[Path] = []

    def unlink(name: Any, *args: Any, **kwargs: Any) -> None:
        if os.path.basename(name) == "part-0" and not aborted:
            # The walk is inside one attempt directory, the others listed: every attempt aborts.
            for attempt in attempts:
                real_unlink(attempt / "part-0")
                attempt.rmdir()
                aborted.append(attempt)
        real_unlink(name, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", unlink)
    assert LocalStore().delete_tree(str(job)) is True
    assert aborted and not job.exists()


def test_remove_dir_if_empty(store: LocalStore, tmp_path: Path) -> None:
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_bytes(b"")
    (tmp_path / "empty").mkdir()
    assert store.remove_dir_if_empty(str(tmp_path / "full")) is False
    assert store.remove_dir_if_empty(str(tmp_path / "empty")) is True
    assert store.remove_dir_if_empty(str(tmp_path / "absent")) is True
    assert (tmp_path / "full" / "x").exists()


def test_mkdirs(store: LocalStore, tmp_path: Path) -> None:
    store.mkdirs(str(tmp_path / "a" / "b"))
    store.mkdirs(str(tmp_path / "a" / "b"))  # existing is fine
    (tmp_path / "f").write_bytes(b"")
    with pytest.raises(PathExistsError):
        store.mkdirs(str(tmp_path / "f"))
    with pytest.raises(PathExistsError):
        store.mkdirs(str(tmp_path / "f" / "below"))


def test_read_and_write(store: LocalStore, tmp_path: Path) -> None:
    path = str(tmp_path / "deep" / "x.json")
    store.write_bytes(path, b"12345")  # parents created
    assert store.read_bytes(path) == b"12345"
    assert store.read_bytes(path, limit=5) == b"12345"
    with pytest.raises(StoreError, match="larger than the limit"):
        store.read_bytes(path, limit=4)
    with pytest.raises(PathExistsError):
        store.write_bytes(path, b"x", exclusive=True)
    with pytest.raises(PathNotFoundError):
        store.read_bytes(str(tmp_path / "none"))
    with pytest.raises(StoreError, match="directory"):
        store.read_bytes(str(tmp_path / "deep"))
    store.write_bytes(path, b"")
    assert store.read_bytes(path, limit=0) == b""


@pytest.mark.parametrize("size,limit,fits", [(3 << 20, 4 << 20, True), (3 << 20, 2 << 20, False),
                                             (3 << 20, 3 << 20, True)])
def test_read_limit_holds_for_a_file_larger_than_its_size_said(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: int, limit: int,
        fits: bool) -> None:
    # A file that says it is empty and then delivers megabytes, like a file that grows while
    # it is read: the read goes on past the size it was told, and still stops at the limit.
    path = tmp_path / "growing"
    data = os.urandom(size)
    path.write_bytes(data)
    real_fstat = os.fstat

    def says_empty(fd: int) -> os.stat_result:
        st = real_fstat(fd)
        return os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, st.st_uid,
                               st.st_gid, 0, int(st.st_atime), int(st.st_mtime),
                               int(st.st_ctime)))

    monkeypatch.setattr(os, "fstat", says_empty)
    if fits:
        assert LocalStore().read_bytes(str(path), limit=limit) == data
    else:
        with pytest.raises(StoreError, match="larger than the limit"):
            LocalStore().read_bytes(str(path), limit=limit)


@pytest.mark.parametrize("kind", ["fifo", "directory", "device", "socket"])
def test_read_refuses_what_is_not_a_regular_file_without_blocking(
        tmp_path: Path, kind: str) -> None:
    import socket
    import stat
    import threading

    path = tmp_path / "x-manifest.json"
    if kind == "fifo":
        os.mkfifo(path)  # no writer: opening it for reading would block for ever
    elif kind == "directory":
        path.mkdir()
    elif kind == "device":
        try:
            os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 5))  # the zero device
        except PermissionError:
            os.symlink("/dev/zero", path)  # a device that never ends, through a link
    else:
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        sock.close()
    what = {"fifo": "FIFO", "directory": "directory", "device": "character device",
            "socket": "socket"}[kind]
    errors: list[BaseException] = []

    def read_both() -> None:
        try:
            with pytest.raises(StoreError,
                               match=rf"{what}.*not a regular file: .*x-manifest\.json"):
                LocalStore().read_bytes(str(path), limit=1 << 20)
            with pytest.raises(StoreError, match="not a regular file"):
                LocalStore().read_bytes(str(path))
        except BaseException as e:  # reported below
            errors.append(e)

    # On a thread, so that a read that blocks (a FIFO's open, /dev/zero read for ever) fails
    # the test instead of hanging it; the join's bound is for a hang, not a speed.
    reader = threading.Thread(target=read_both, daemon=True)
    reader.start()
    reader.join(60)
    assert not reader.is_alive(), "the read blocked"
    if errors:
        raise errors[0]


def test_read_refuses_a_file_swapped_for_a_fifo_after_the_check(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The path is a regular file when looked at, a FIFO when opened: the open does not block
    # and the open file is checked again.
    path = tmp_path / "m"
    path.write_bytes(b"{}")
    real_open = os.open

    def swap_then_open(p: str, flags: int, *args: object, **kwargs: object) -> int:
        if p == str(path):
            os.unlink(path)
            os.mkfifo(path)
        return real_open(p, flags, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", swap_then_open)
    with pytest.raises(StoreError, match=r"FIFO.*not a regular file"):
        LocalStore().read_bytes(str(path))


def test_stat_list_and_walk(store: LocalStore, tmp_path: Path) -> None:
    (tmp_path / "a b" / "c").mkdir(parents=True)
    (tmp_path / "a b" / "c" / "f1").write_bytes(b"1")
    (tmp_path / "a b" / "f2").write_bytes(b"22")
    assert store.stat(str(tmp_path / "a b")).is_dir
    with pytest.raises(PathNotFoundError):
        store.stat(str(tmp_path / "nothing"))
    listing = {Path(s.path).name: s for s in store.list_dir(str(tmp_path / "a b"))}
    assert listing["c"].is_dir and listing["f2"].size == 2
    walked = sorted((Path(s.path).relative_to(tmp_path).as_posix(), s.size)
                    for s in store.walk_files(str(tmp_path)))
    assert walked == [("a b/c/f1", 1), ("a b/f2", 2)]
    assert store.exists(str(tmp_path / "a b" / "f2"))
    assert not store.exists(str(tmp_path / "zz"))
    with pytest.raises(PathNotFoundError):
        store.list_dir(str(tmp_path / "zz"))
    assert store.list_dir_or_empty(str(tmp_path / "zz")) == []
    assert [Path(s.path).name for s in store.list_dir_or_empty(str(tmp_path / "a b" / "c"))] \
        == ["f1"]


def test_rename_batch_reports_each_failure_with_its_index(store: LocalStore,
                                                          tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"a")
    (tmp_path / "taken").write_bytes(b"t")
    (tmp_path / "c").write_bytes(b"c")
    entries = [(str(tmp_path / "a"), str(tmp_path / "a2"), 1, None),
               (str(tmp_path / "c"), str(tmp_path / "taken"), 1, None),
               (str(tmp_path / "none"), str(tmp_path / "n2"), 1, None)]
    reached, failures = store.rename_batch(entries)
    assert reached == 2 and [i for i, _ in failures] == [1]
    assert isinstance(failures[0][1], PathExistsError)
    reached, failures = store.rename_batch(entries, reached)
    assert reached == 3 and [i for i, _ in failures] == [2]
    assert isinstance(failures[0][1], PathNotFoundError)


def test_rename_batch_stops_at_the_first_failure(store: LocalStore, tmp_path: Path) -> None:
    src, dst = tmp_path / "task" / "p=1", tmp_path / "out" / "p=1"
    src.mkdir(parents=True)
    dst.mkdir(parents=True)
    for name in ("a", "b", "c"):
        (src / name).write_bytes(name.encode())
    (dst / "b").write_bytes(b"older")
    entries = [(str(src / n), str(dst / n), 1, None) for n in ("a", "b", "c")]
    reached, failures = store.rename_batch(entries, 0)
    assert reached == 2 and len(failures) == 1 and failures[0][0] == 1
    assert isinstance(failures[0][1], PathExistsError)
    assert (dst / "a").read_bytes() == b"a" and (dst / "b").read_bytes() == b"older"
    assert (src / "b").exists() and (src / "c").exists()  # nothing after the failure moved
    assert store.rename_batch(entries, 2) == (3, [])  # the caller goes on from ``reached``
    assert (dst / "c").read_bytes() == b"c"


def test_rename_batch_reports_a_missing_source_or_parent(store: LocalStore, tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"a")
    def only_failure(entries: list[tuple[str, str, int, None]]) -> StoreError:
        reached, failures = store.rename_batch(entries, 0)
        assert reached == 1 and len(failures) == 1 and failures[0][0] == 0
        return failures[0][1]

    error = only_failure([(str(tmp_path / "none"), str(tmp_path / "x"), 0, None)])
    assert isinstance(error, PathNotFoundError) and "source" in str(error)
    error = only_failure([(str(tmp_path / "a"), str(tmp_path / "no" / "x"), 0, None)])
    assert isinstance(error, PathNotFoundError) and "parent" in str(error)
    error = only_failure([(str(tmp_path / "a"), str(tmp_path / "x\0y"), 0, None)])
    assert isinstance(error, StoreError)
    assert (tmp_path / "a").exists()


def test_rename_batch_with_unrelated_paths_and_file_uris(store: LocalStore, tmp_path: Path) -> None:
    (tmp_path / "x").mkdir()
    (tmp_path / "a").write_bytes(b"a")
    (tmp_path / "x" / "b").write_bytes(b"b")
    entries = [(str(tmp_path / "a"), f"file://{tmp_path}/x/a2", 0, None),
               (f"file:{tmp_path}/x/b", str(tmp_path / "b2"), 0, None)]
    assert store.rename_batch(entries, 0) == (2, [])
    assert (tmp_path / "x" / "a2").read_bytes() == b"a" and (tmp_path / "b2").read_bytes() == b"b"


def test_rename_batch_falls_back_where_the_filesystem_lacks_the_no_replace_flag(
        store: LocalStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    from committer.store.local import store as local_store

    for name in ("a", "b", "c"):
        (tmp_path / name).write_bytes(name.encode())
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "c").write_bytes(b"older")
    real = local_store._rename_loop

    def first_then_einval(sfd: int, srcs: list[bytes], dfds: list[int],
                          names: list[bytes]) -> tuple[int, int]:
        done, err = real(sfd, srcs[:1], dfds[:1], names[:1])
        return (done, err) if err else (1, errno.EINVAL)

    monkeypatch.setattr(local_store, "_rename_loop", first_then_einval)
    entries = [(str(tmp_path / n), str(tmp_path / "out" / n), 1, None) for n in ("a", "b", "c")]
    reached, failures = store.rename_batch(entries, 0)
    # the rest went through rename_file (link + unlink never replaces either)
    assert reached == 3 and [i for i, _ in failures] == [2]
    assert isinstance(failures[0][1], PathExistsError)
    assert [(tmp_path / "out" / n).read_bytes() for n in ("a", "b", "c")] == [b"a", b"b", b"older"]
    assert (tmp_path / "c").exists()


def test_native_loops_refuse_what_they_cannot_pass_to_the_kernel(tmp_path: Path) -> None:
    assert _native_built(), "committer/store/local/_native.c was not built"
    from committer.store.local import _native as native

    (tmp_path / "a").write_bytes(b"a")
    fd = os.open(tmp_path, os.O_PATH | os.O_DIRECTORY)
    try:
        cut = len(str(tmp_path)) + 1
        good = (str(tmp_path / "a"), str(tmp_path / "b"), 0, None)
        for entries in ([(str(tmp_path / "a\0b"), str(tmp_path / "c"), 0, None)],
                        [good, (str(tmp_path / "x"), str(tmp_path / "y\0"), 0, None)],
                        [good, (str(tmp_path / "é\0"), str(tmp_path / "c"), 0, None)]):
            with pytest.raises(ValueError, match="NUL"):
                native.rename_into(entries, 0, len(entries), fd, cut, [fd] * len(entries), 1)
        assert (tmp_path / "a").exists()  # refused before anything was renamed
        with pytest.raises(TypeError):
            native.rename_into([(b"a", "c")], 0, 1, fd, 0, [fd], 1)
        with pytest.raises(TypeError):
            native.rename_into([("a",)], 0, 1, fd, 0, [fd], 1)
        with pytest.raises(TypeError):
            native.rename_into([("a", "b")], 0, 1, fd, 0, ["3"], 1)  # type: ignore[list-item]
        with pytest.raises(ValueError, match="shorter"):
            native.rename_into([("a", "b")], 0, 1, fd, 2, [fd], 1)
        with pytest.raises(ValueError, match="within"):
            native.rename_into([("a", "b")], 2, 2, fd, 0, [], 1)
        with pytest.raises(ValueError, match="within"):
            native.rename_into([("a", "b")], 1, 0, fd, 0, [], 1)
        with pytest.raises(ValueError, match="one directory fd"):
            native.rename_into([("a", "b")], 0, 1, fd, 0, [], 1)
        with pytest.raises(ValueError, match="NUL"):
            native.rmdir_paths(fd, ["x\0"], 0)
        with pytest.raises(TypeError):
            native.rmdir_paths(fd, [b"x"], 0)  # type: ignore[list-item]
        assert native.rename_into([], 0, 0, fd, 0, [], 1) == (0, 0)
        assert native.rename_into([good], 1, 1, fd, cut, [], 1) == (1, 0)  # from the end
        # a negative directory fd (one the caller could not open) stops the loop there
        assert native.rename_into([good], 0, 1, fd, cut, [-1], 1) == (0, -1)
        assert (tmp_path / "a").exists()
        assert native.rmdir_paths(fd, [], 0) == 0
        with pytest.raises(ValueError, match="NUL"):
            native.regular_files(fd, ["a", "b\0"], [0, 0])
        with pytest.raises(ValueError, match="one size"):
            native.regular_files(fd, ["a"], [])
        assert native.regular_files(fd, ["a", "a"], [1, 2]) == 1
        with pytest.raises(NotADirectoryError):
            file_fd = os.open(tmp_path / "a", os.O_PATH)
            try:
                native.count_entries(file_fd)
            finally:
                os.close(file_fd)
    finally:
        os.close(fd)


def test_rmdir_run_with_names_that_are_not_ascii_or_hold_a_nul(
        store: LocalStore, tmp_path: Path) -> None:
    for name in ("naïve", "é", "plain"):
        (tmp_path / "t" / name).mkdir(parents=True)
    paths = [str(tmp_path / "t" / n) for n in ("naïve", "é", "plain")]
    assert store.rmdir_run(paths) == 3
    (tmp_path / "t" / "kept").mkdir()
    # one path the kernel cannot be given: the others are still removed, one by one
    assert store.rmdir_run([str(tmp_path / "t" / "kept"), str(tmp_path / "t" / "x\0")]) == 1
    assert list((tmp_path / "t").iterdir()) == []


def test_rmdir_run_removes_only_empty_directories(store: LocalStore, tmp_path: Path) -> None:
    attempt = tmp_path / "tasks" / "attempt_1"
    for k in range(3):
        (attempt / f"p={k}").mkdir(parents=True)
    (attempt / "p=2" / "left").write_bytes(b"x")
    paths = [str(attempt / f"p={k}") for k in range(3)] + [str(attempt), str(tmp_path / "gone")]
    assert store.rmdir_run(paths) == 2
    assert sorted(p.name for p in attempt.iterdir()) == ["p=2"]
    assert store.rmdir_run([str(attempt / "p=2" / "left")]) == 0  # a file: left alone
    assert store.rmdir_run([]) == 0


def test_filesystem_type_takes_the_deepest_mount_above_the_path(tmp_path: Path) -> None:
    mounts = tmp_path / "mounts"
    mounts.write_text(
        "/dev/sda1 / ext4 rw 0 0\n"
        "server:/export /mnt/shared nfs4 rw 0 0\n"
        "tmpfs /mnt/shared/scratch\\040space tmpfs rw 0 0\n"
        "garbage\n"
    )
    from committer.store.local import filesystem_type

    def fs(path: str) -> str | None:
        return filesystem_type(path, str(mounts))

    assert fs("/home/x") == "ext4"
    assert fs("/mnt/shared/out/_temporary") == "nfs4"
    assert fs("/mnt/sharedother") == "ext4"  # a prefix of the name is not a mount above it
    assert fs("/mnt/shared/scratch space/x") == "tmpfs"
    assert filesystem_type("/x", str(tmp_path / "no such table")) is None


def test_reads_wait_on_network_filesystems_only(store: LocalStore, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from committer.store.local import files as local_files

    for kind, waits in (("ext4", False), ("tmpfs", False), ("nfs4", True),
                        ("fuse.sshfs", True), (None, True)):
        monkeypatch.setattr(local_files, "filesystem_type", lambda path, kind=kind: kind)
        assert store.reads_wait(str(tmp_path)) is waits, kind


def _side(name: str) -> str:
    return f".{name}.crc"


def test_directory_holds_exactly_the_named_files(store: LocalStore, tmp_path: Path) -> None:
    d = tmp_path / "p=1"
    d.mkdir()
    for name, data in {"a": b"aa", "naïve": b"n", "c": b""}.items():
        (d / name).write_bytes(data)
    want: dict[str, int | None] = {"a": 2, "naïve": 1, "c": 0}
    assert store.directory_holds(str(d), want) == 3
    assert store.directory_holds(str(d), {**want, "a": None}) == 3  # any size
    assert store.directory_holds(str(d), {**want, "a": 3}) is None  # another size
    assert store.directory_holds(str(d), {"a": 2, "c": 0}) is None  # one more than named
    assert store.directory_holds(str(d), {**want, "gone": 0}) is None  # one missing
    assert store.directory_holds(str(d), {**want, "a": 2**70}) is None  # no file is that big
    assert store.directory_holds(str(tmp_path / "absent"), want) is None
    assert store.count_children(str(d)) == 3
    with pytest.raises(PathNotFoundError):
        store.count_children(str(tmp_path / "absent"))


def test_directory_holds_side_files_only_of_named_files(store: LocalStore, tmp_path: Path) -> None:
    d = tmp_path / "p=1"
    d.mkdir()
    for name in ("a", "b", _side("a")):
        (d / name).write_bytes(b"x")
    want: dict[str, int | None] = {"a": 1, "b": 1}
    assert store.directory_holds(str(d), want) is None  # side files not allowed
    assert store.directory_holds(str(d), want, _side) == 3
    (d / _side("stray")).write_bytes(b"x")  # the side file of no named file
    assert store.directory_holds(str(d), want, _side) is None
    (d / _side("stray")).unlink()
    (d / _side("b")).mkdir()  # a directory with a side file's name
    assert store.directory_holds(str(d), want, _side) is None


def test_directory_holds_no_link_or_directory_in_place_of_a_file(
        store: LocalStore, tmp_path: Path) -> None:
    d = tmp_path / "p=1"
    d.mkdir()
    (tmp_path / "elsewhere").write_bytes(b"x")
    (d / "a").symlink_to(tmp_path / "elsewhere")
    (d / "b").mkdir()
    assert store.directory_holds(str(d), {"a": 1}) is None
    assert store.directory_holds(str(d), {"b": None}) is None
    (d / "b").rmdir()
    (d / "a").unlink()
    (tmp_path / "link").symlink_to(d)
    (d / "a").write_bytes(b"x")
    # a link as the directory itself is not followed below a store's root
    beneath = LocalStore(str(tmp_path))
    assert beneath.directory_holds(str(tmp_path / "p=1"), {"a": 1}) == 1
    assert beneath.directory_holds(str(tmp_path / "link"), {"a": 1}) is None


def _sources(tmp_path: Path) -> tuple[Path, list[tuple[str, str, int, str | None]]]:
    """A tasks directory with two attempts' files, and plan entries for them (no identity)."""
    root = tmp_path / "tasks ü"
    for rel, data in {"a1/p=1/a": b"aa", "a1/p=1/naïve": b"n", "a1/p=1/c": b"",
                      "a1/top": b"ttt", "a2/p=1/a": b"xyz"}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    entries: list[tuple[str, str, int, str | None]] = [
        (str(root / rel), f"/dest/{rel}", size, None)
        for rel, size in (("a1/p=1/a", 2), ("a1/p=1/naïve", 1), ("a1/p=1/c", 0), ("a1/top", 3),
                          ("a2/p=1/a", 3))]
    return root, entries


def test_identify_sources_gives_each_source_its_identity(store: LocalStore,
                                                         tmp_path: Path) -> None:
    from committer.store.local import file_etag

    root, entries = _sources(tmp_path)
    given = (str(root / "gone"), "/dest/gone", 5, "kept")  # has one: not examined
    out, mismatches = store.identify_sources(str(root), [*entries, given])
    assert mismatches == []
    assert out[-1] is given
    for (src, dst, size, ident), before in zip(out, entries, strict=False):
        assert (src, dst, size) == before[:3]
        assert ident == file_etag(os.stat(src))
    assert store.identify_sources(str(root), []) == ([], [])


def test_identify_sources_names_what_is_not_a_file_of_its_size(store: LocalStore,
                                                               tmp_path: Path) -> None:
    root, entries = _sources(tmp_path)
    (root / "a1/p=1/c").write_bytes(b"grown")  # resized
    (root / "a1/top").unlink()  # missing
    (root / "a2/p=1/a").unlink()
    (root / "a2/p=1/a").symlink_to(root / "a1/p=1/a")  # a link in its place
    (root / "a1/dir").mkdir()
    outside = (str(tmp_path / "elsewhere"), "/dest/x", 0, None)  # not below the root
    dirs = (str(root / "a1/dir"), "/dest/dir", 0, None)
    out, mismatches = store.identify_sources(str(root), [*entries, dirs, outside])
    assert sorted(mismatches) == [(2, 5), (3, None), (4, None), (5, None), (6, None)]
    assert [e[3] is None for e in out] == [False, False, True, True, True, True, True]
    out, mismatches = store.identify_sources(str(tmp_path / "absent"), entries)
    assert out == entries and sorted(mismatches) == [(i, None) for i in range(5)]


def test_directory_holds_names_without_a_stat_per_file(store: LocalStore,
                                                       tmp_path: Path) -> None:
    d = tmp_path / "p=1"
    d.mkdir()
    for name in ("a", "naïve", _side("a")):
        (d / name).write_bytes(b"xx")
    assert store.directory_holds_names(str(d), ["a", "naïve"], _side) == 3
    assert store.directory_holds_names(str(d), ["a", "naïve"]) is None  # the side file
    assert store.directory_holds_names(str(d), ["a"], _side) is None  # one more than named
    assert store.directory_holds_names(str(d), ["a", "naïve", "gone"], _side) is None
    assert store.directory_holds_names(str(tmp_path / "absent"), ["a"]) is None
    (d / _side("stray")).write_bytes(b"x")  # the side file of no named file
    assert store.directory_holds_names(str(d), ["a", "naïve"], _side) is None
    (d / _side("stray")).unlink()
    (d / "naïve").unlink()
    (d / "naïve").symlink_to(d / "a")  # a link in place of a file
    assert store.directory_holds_names(str(d), ["a", "naïve"], _side) is None
    (d / "naïve").unlink()
    (d / "naïve").mkdir()  # a directory in place of a file
    assert store.directory_holds_names(str(d), ["a", "naïve"], _side) is None
    (d / "naïve").rmdir()
    (d / "naïve").write_bytes(b"n")
    (d / "A~").write_bytes(b"x")  # a side file named by another rule than prefix + name + suffix
    assert store.directory_holds_names(str(d), ["a", "naïve"], lambda n: n.upper() + "~") is None
    (d / _side("a")).unlink()
    assert store.directory_holds_names(str(d), ["a", "naïve"], lambda n: n.upper() + "~") == 3
    (d / "A~").unlink()
    (d / "naïve").unlink()
    (d / _side("a")).write_bytes(b"x")
    (tmp_path / "link").symlink_to(d)
    beneath = LocalStore(str(tmp_path))
    assert beneath.directory_holds_names(str(d), ["a"], _side) == 2
    assert beneath.directory_holds_names(str(tmp_path / "link"), ["a"], _side) is None
