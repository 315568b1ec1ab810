"""``commit-job`` against a job tree or destination that is hostile at the filesystem level:
something that is not a regular file where a manifest should be (issue 14, part 2), and a
symbolic link inside the destination (part 3). Each must fail at once, with exit status 1 and
one clear line on stderr (no traceback), and move nothing."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from committer.layout import JobLayout
from tests.cli.conftest import run
from tests.cli.jobs import standard_tasks, write_job

TASK = "task_job1_m_000001"


def _tree(root: Path) -> dict[str, bytes]:
    """Every file below ``root`` (not following links) and its bytes; what is not a regular
    file is recorded by its kind (reading a FIFO would block)."""
    out: dict[str, bytes] = {}
    for here, _dirs, files in os.walk(root):
        for name in files:
            p = Path(here, name)
            mode = p.lstat().st_mode
            key = str(p.relative_to(root))
            out[key] = p.read_bytes() if stat.S_ISREG(mode) else f"<{stat.S_IFMT(mode)}>".encode()
    return out


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _directory(path: Path) -> None:
    path.mkdir()
    (path / "inside").write_bytes(b"{}")


def _device(path: Path) -> None:
    """A character device node (the null device's numbers) where the manifest was; where
    this process may not create device nodes, a symbolic link to ``/dev/zero`` instead (a
    device that never ends, reached through a name in the job tree)."""
    try:
        os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        os.symlink("/dev/zero", path)


def _socket(path: Path) -> None:
    import socket

    s = socket.socket(socket.AF_UNIX)
    # A socket's address is limited to 107 bytes: bound by its name from its directory
    # (contextlib.chdir is 3.11+).
    here = os.getcwd()
    os.chdir(path.parent)
    try:
        s.bind(path.name)
    finally:
        os.chdir(here)
    s.close()


@pytest.mark.parametrize(("make", "kind"), [
    (_fifo, "FIFO"), (_directory, "directory"), (_device, "device"), (_socket, "socket"),
], ids=["fifo", "directory", "device", "socket"])
def test_a_manifest_that_is_not_a_regular_file_is_refused_at_once(
        tmp: Path, make: Callable[[Path], None], kind: str) -> None:
    layout = write_job(tmp / "dest", "job1", standard_tasks())
    manifest = Path(layout.manifest_path(TASK))
    manifest.unlink()
    make(manifest)
    before = _tree(tmp)
    # Opening a FIFO (or reading a device) blocks for ever: an answer at all is the proof that
    # nothing blocked, whatever the time the machine takes to give it.
    r = run("commit-job", layout.dest, "--job-id", "job1")
    assert r.code == 1, (r.code, r.out, r.err)
    assert "Traceback" not in r.err and "Traceback" not in r.out
    assert "no file was moved" in r.err
    # the problem line names the file and says what it is
    assert str(manifest) in r.out and kind in r.out and "not a regular file" in r.out
    assert _tree(tmp) == before  # nothing moved, nothing written
    assert not (tmp / "dest" / "_SUCCESS").exists()


def test_a_symlinked_partition_directory_is_refused_and_nothing_is_written_outside(
        tmp: Path) -> None:
    outside = tmp / "elsewhere"
    outside.mkdir()
    (outside / "kept.csv").write_bytes(b"theirs")
    dest = tmp / "dest"
    layout = write_job(dest, "job1", standard_tasks())
    os.symlink(outside, dest / "year=2024")  # the partition two of the tasks write into
    before = _tree(tmp)
    r = run("commit-job", layout.dest, "--job-id", "job1")
    assert r.code == 1, (r.code, r.out, r.err)
    assert "Traceback" not in r.err and "Traceback" not in r.out
    assert "symbolic link" in r.err and str(dest / "year=2024") in r.err
    assert _tree(outside) == {"kept.csv": b"theirs"}  # nothing written outside
    # Nothing moved: every task file is still in its task directory; all that is new is the
    # commit's journal, which abort (or rollback) needs.
    after = _tree(tmp)
    assert {k: after[k] for k in before} == before
    assert all(k.endswith("_journal.json") for k in set(after) - set(before))
    assert not (dest / "_SUCCESS").exists()
    # abort-job undoes the failed commit: the destination is as it was, the link included
    assert run("abort-job", layout.dest, "--job-id", "job1").code == 0
    assert (dest / "year=2024").is_symlink() and _tree(outside) == {"kept.csv": b"theirs"}
    assert not Path(JobLayout(str(dest), "job1").job_dir).exists()


def test_a_symlinked_partition_directory_is_followed_when_the_user_says_so(tmp: Path) -> None:
    outside = tmp / "elsewhere"
    outside.mkdir()
    dest = tmp / "dest"
    layout = write_job(dest, "job1", standard_tasks())
    os.symlink(outside, dest / "year=2024")
    r = run("commit-job", layout.dest, "--job-id", "job1", "--conf",
            "mapreduce.manifest.committer.destination.follow.symlinks=true")
    assert r.code == 0, r.err
    assert sorted(_tree(outside)) == ["part-00000.csv", "part-00001.csv"]


def test_a_symlinked_destination_root_is_the_users_choice(tmp: Path) -> None:
    real = tmp / "real-dest"
    real.mkdir()
    os.symlink(real, tmp / "dest")  # only what is beneath the destination is checked
    layout = write_job(tmp / "dest", "job1", standard_tasks())
    r = run("commit-job", layout.dest, "--job-id", "job1")
    assert r.code == 0, r.err
    assert (real / "year=2024" / "part-00001.csv").read_bytes() == b"c" * 2000
    assert not (real / "_temporary").exists()
