"""Random protocol histories through the public API, checked against the protocol's properties.

A history is a job of a few tasks, each with one or more attempts. Every attempt sets up and
writes its files; then it commits, commits twice (a duplicated commit message), aborts, fails
silently, or is a *zombie* that commits late: after another attempt of its task was committed
but before job commit, or after the job was committed. The driver, as Spark's does, decides
which attempt of each task is committed (the last one whose commit succeeded) and passes that
as ``committed_tasks``. The job is then committed or aborted. All storage goes through a
:class:`FaultInjectingStore` under the :class:`ManagedStore` (throttling at some rate, renames
that happen and then time out).

Properties checked on every history:
- complete: every committed task's files are in the destination, with that attempt's bytes;
- exclusive: no other file is (nothing from uncommitted, aborted or zombie attempts);
- concurrent: running the task side in parallel threads gives the same result as serially;
- abortable: an aborted job leaves nothing in the destination and its job directory is gone;
- continuity: after job commit, late zombies change nothing a reader of the table can see,
  not even when job commit is run again for the same job id, and cannot recreate the job's
  directory (their setup is refused).
A zombie whose late commit replaced the committed attempt's manifest must make job commit
refuse (``UntrustedManifestError``) with nothing moved; the job can then be aborted cleanly.

The histories run on whatever store the ``store_target`` fixture gives: local disk here, and
the cloud targets (Azurite, fake-gcs-server, the ADLS Gen2 stub, the GCS moveTo proxy; fewer
examples, each in fresh buckets) from
``tests/store/test_core_on_emulators.py``, through the same functions.
"""

from __future__ import annotations

import contextlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from committer import JobCommitter, TaskAttemptCommitter, task_ids
from committer.errors import ManifestCommitterError, UntrustedManifestError
from committer.store import ManagedStore, open_store
from committer.store.faults import FaultInjectingStore, FaultPlan
from manifest_schema import SuccessData
from tests.committer.helpers import JOB_ID, LocalTarget, StoreTarget

PARTITIONS = ("", "p=a b", "p=a b%3Ac", "p=ü #", "year=2026/month=01")
ACTIONS = ("commit", "commit", "commit", "commit_twice", "abort", "fail", "zombie_late",
           "zombie_after_job")


@dataclass(frozen=True)
class Attempt:
    files: tuple[str, ...]
    action: str


@dataclass(frozen=True)
class History:
    tasks: tuple[tuple[Attempt, ...], ...]
    abort_job: bool
    fault_rate: float
    after_rate: float
    seed: int


@st.composite
def attempts(draw: st.DrawFn, task: int) -> Attempt:
    # "own=<task>" is written by this task alone: a new single-writer partition, which job
    # commit moves whole where the store renames directories; the shared ones file by file
    own = (f"own={task}", f"own={task}/sub")
    picks = draw(st.lists(st.tuples(st.sampled_from(PARTITIONS + own), st.integers(0, 2)),
                          max_size=4, unique=True))
    names = tuple(sorted(f"{p}/part-{task:05d}-{k}.csv".lstrip("/") for p, k in picks))
    return Attempt(names, draw(st.sampled_from(ACTIONS)))


@st.composite
def histories(draw: st.DrawFn, max_tasks: int = 4, max_attempts: int = 3) -> History:
    n = draw(st.integers(1, max_tasks))
    tasks = tuple(
        tuple(draw(st.lists(attempts(t), min_size=1, max_size=max_attempts))) for t in range(n)
    )
    return History(
        tasks=tasks,
        abort_job=draw(st.integers(0, 3)) == 0,
        fault_rate=draw(st.sampled_from((0.0, 0.0, 0.03, 0.1))),
        after_rate=draw(st.sampled_from((0.0, 0.1, 0.3))),
        seed=draw(st.integers(0, 2**16)),
    )


def content(attempt_id: str, rel: str) -> bytes:
    return f"{attempt_id}:{rel}\n".encode()


@dataclass
class Outcome:
    visible: dict[str, bytes]
    committed: dict[str, str]
    refused: bool
    after_zombies: dict[str, bytes] = field(default_factory=dict)
    zombies_left_job_dir: bool = False


class Driver:
    """Runs one history at ``root`` of ``target``; the task side serially or in parallel
    threads. The committers' store is the target's backend under a fault injector; the task
    output is written, and the outcome read, by the test without faults."""

    def __init__(self, history: History, target: StoreTarget, root: str) -> None:
        self.history = history
        self.target = target
        self.dest = f"{root}/dest dir ü"
        target.mkdirs(self.dest)
        self.config = target.config()
        backend = target.backend()
        if history.fault_rate or history.after_rate:
            backend = FaultInjectingStore(backend, FaultPlan(
                rate=history.fault_rate, after_rate=history.after_rate, seed=history.seed))
        # else the bare backend: the paths production takes, which the wrapper hides (the
        # managed store sees a plain Store): local disk's directory pruning, the cloud
        # backends' native rename batches and flat listings
        self.store: ManagedStore = open_store(self.dest, self.config, backend=backend)
        self.committed: dict[str, str] = {}
        self.manifest_owner: dict[str, str] = {}

    @property
    def job_dir(self) -> str:
        return f"{self.dest}/_temporary/manifest_{JOB_ID}"

    def attempt(self, task: int, number: int) -> TaskAttemptCommitter:
        task_id, attempt_id = task_ids(JOB_ID, task, number)
        return TaskAttemptCommitter(self.dest, JOB_ID, task_id, attempt_id,
                                    config=self.config, store=self.store)

    def write(self, task: int, number: int) -> None:
        ta = self.attempt(task, number)
        ta.setup()
        files = self.history.tasks[task][number].files
        self.target.write_output(ta, {rel: content(ta.task_attempt_id, rel) for rel in files})

    def commit_attempt(self, task: int, number: int, *, authorised: bool) -> None:
        ta = self.attempt(task, number)
        # Transient store faults at these rates must be cured by the store's retries: a task
        # commit that fails here is a finding, not a history.
        ta.commit()
        self.manifest_owner[ta.task_id] = ta.task_attempt_id
        if authorised:
            self.committed[ta.task_id] = ta.task_attempt_id

    def run_task(self, task: int) -> None:
        """The driver's view of one task's attempts, in order (never concurrent commits)."""
        for number, attempt in enumerate(self.history.tasks[task]):
            if attempt.action in ("commit", "commit_twice"):
                self.commit_attempt(task, number, authorised=True)
                if attempt.action == "commit_twice":
                    self.commit_attempt(task, number, authorised=True)
            elif attempt.action == "abort":
                ta = self.attempt(task, number)
                ta.abort()
                assert not self.target.exists(ta.working_dir), "task abort left its directory"

    def run(self, parallel: bool) -> Outcome:
        h = self.history
        job = JobCommitter(self.dest, JOB_ID, config=self.config, store=self.store)
        job.setup()
        writers = [(t, n) for t, attempts_ in enumerate(h.tasks) for n in range(len(attempts_))
                   if attempts_[n].action != "zombie_after_job"]
        if parallel:  # speculative attempts write at the same time; tasks commit concurrently
            with ThreadPoolExecutor(4) as pool:
                list(pool.map(lambda tn: self.write(*tn), writers))
            with ThreadPoolExecutor(4) as pool:
                list(pool.map(self.run_task, range(len(h.tasks))))
        else:
            for t, n in writers:
                self.write(t, n)
            for t in range(len(h.tasks)):
                self.run_task(t)
        # zombies that were told not to commit, committing anyway before job commit
        for t, attempts_ in enumerate(h.tasks):
            for n, attempt in enumerate(attempts_):
                if attempt.action == "zombie_late":
                    self.commit_attempt(t, n, authorised=False)

        committed = dict(self.committed)
        hijacked = any(self.manifest_owner.get(t) != a for t, a in committed.items())
        if h.abort_job:
            job.abort()
            return Outcome(self.target.visible_files(self.dest), committed, refused=False)
        try:
            job.commit(committed)
        except UntrustedManifestError as e:
            assert hijacked, f"job commit refused a consistent history: {e}"
            outcome = Outcome(self.target.visible_files(self.dest), committed, refused=True)
            job.abort()
            return outcome
        assert not hijacked, "job commit accepted a manifest the driver did not commit"
        outcome = Outcome(self.target.visible_files(self.dest), committed, refused=False)
        success = SuccessData.loads(self.target.read(f"{self.dest}/_SUCCESS"))
        assert success.success
        assert success.metrics["committer_files_committed"] == len(outcome.visible)
        # zombies committing after the job was committed
        for t, attempts_ in enumerate(h.tasks):
            for n, attempt in enumerate(attempts_):
                if attempt.action == "zombie_after_job":
                    with contextlib.suppress(ManifestCommitterError):
                        self.write(t, n)
                        self.commit_attempt(t, n, authorised=False)
        outcome.zombies_left_job_dir = self.target.exists(self.job_dir)
        # a re-run of job commit for this id (as `manifest-committer commit-job` would do,
        # committing every manifest present) must not pick up the zombies' late manifests
        with contextlib.suppress(ManifestCommitterError):  # refusing is fine; changing isn't
            JobCommitter(self.dest, JOB_ID, config=self.config, store=self.store).commit()
        outcome.after_zombies = self.target.visible_files(self.dest)
        return outcome

    def expected_output(self, committed: dict[str, str]) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        for t, attempts_ in enumerate(self.history.tasks):
            for n, attempt in enumerate(attempts_):
                task_id, attempt_id = task_ids(JOB_ID, t, n)
                if committed.get(task_id) == attempt_id:
                    out.update({rel: content(attempt_id, rel) for rel in attempt.files})
        return out


def check_history(history: History, target: StoreTarget) -> None:
    """Run ``history`` serially and in parallel, each at a fresh root of ``target``, and check
    the protocol's properties on both outcomes."""
    roots = [target.new_root(), target.new_root()]
    try:
        serial_driver = Driver(history, target, f"{roots[0]}/serial")
        serial = serial_driver.run(parallel=False)
        parallel_driver = Driver(history, target, f"{roots[1]}/parallel")
        parallel = parallel_driver.run(parallel=True)

        for driver, outcome in ((serial_driver, serial), (parallel_driver, parallel)):
            if history.abort_job or outcome.refused:
                # abortable (and a refused commit moved nothing before the abort)
                assert outcome.visible == {}
                assert not target.exists(driver.job_dir)
                assert not target.exists(f"{driver.dest}/_SUCCESS")
                continue
            expected = driver.expected_output(outcome.committed)
            # complete and exclusive
            assert outcome.visible == expected
            # continuity of correctness: late zombies changed nothing a reader sees, and could
            # not even recreate the finished job's directory
            assert outcome.after_zombies == outcome.visible
            assert not outcome.zombies_left_job_dir
        # concurrent: the parallel task side produced exactly what the serial one did
        assert parallel.committed == serial.committed
        assert parallel.refused == serial.refused
        assert parallel.visible == serial.visible
    finally:
        for root in roots:
            target.discard(root)


def check_histories(target: StoreTarget, strategy: st.SearchStrategy[History], *,
                    max_examples: int, emulator_examples: int) -> None:
    """:func:`check_history` on histories drawn from ``strategy``: ``max_examples`` random
    ones on local disk, ``emulator_examples`` on an emulator (see
    ``StoreTarget.settings``). Hypothesis runs inside the test, so that the ``store_target``
    fixture chooses the store and with it the settings."""

    @target.settings(max_examples, emulator_examples=emulator_examples)
    @given(strategy)
    def check(history: History) -> None:
        check_history(history, target)

    check()


@pytest.fixture
def store_target(tmp_path: Path) -> LocalTarget:
    """Local disk (``tests/store/test_core_on_emulators.py`` supplies the emulators)."""
    return LocalTarget(tmp_path)


def test_protocol_properties_hold_on_random_histories(store_target: StoreTarget) -> None:
    check_histories(store_target, histories(), max_examples=40, emulator_examples=30)


@pytest.mark.slow
def test_protocol_properties_hold_on_random_histories_at_scale(
    store_target: StoreTarget,
) -> None:
    check_histories(store_target, histories(max_tasks=8, max_attempts=4), max_examples=400,
                    emulator_examples=10)


_FILES = ("p=a b/part-00000-0.csv", "part-00000-1.csv")
#: one fixed history with each behaviour, so a regression shows up without shrinking
KNOWN_HISTORY = History(
    tasks=(
        (Attempt(_FILES, "fail"), Attempt(_FILES, "commit"), Attempt(_FILES, "zombie_after_job")),
        (Attempt(("p=ü #/part-00001-0.csv",), "commit"), Attempt((), "abort")),
        (Attempt(("p=a b%3Ac/part-00002-2.csv",), "commit_twice"),),
    ),
    abort_job=False, fault_rate=0.05, after_rate=0.3, seed=7,
)


def test_a_known_history_with_every_kind_of_attempt(store_target: StoreTarget) -> None:
    check_history(KNOWN_HISTORY, store_target)
