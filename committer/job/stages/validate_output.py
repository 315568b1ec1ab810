"""Job commit, optional stage 4: check every destination before ``_SUCCESS`` is written.

Each renamed file must exist with the manifest's size, and, where the store's rename keeps
etags, the manifest's etag. Hadoop runs this after writing ``_SUCCESS``; here a mismatch fails
the commit while ``_SUCCESS`` is still absent, so no reader is told bad output is good.
"""

from __future__ import annotations

from committer.errors import CommitFailedError, PathNotFoundError
from committer.job.stages.context import StageContext
from committer.job.stages.plan import Chunk, JobPlan
from committer.parallel import run_parallel

STAGE = "validate_output"
SHOWN = 20


def validate_output(ctx: StageContext, plan: JobPlan) -> int:
    """Check every planned destination; ``CommitFailedError`` listing what differs."""
    store = ctx.store
    check_etags = store.rename_keeps_etag
    problems: list[str] = []
    done = 0
    ctx.notify(STAGE, 0, plan.files)

    def check(chunk: Chunk) -> list[str]:
        found = []
        for _src, dst, size, etag in chunk.entries:
            try:
                st = store.stat(dst)
            except PathNotFoundError:
                found.append(f"{dst}: missing after rename")
                continue
            if st.is_dir:
                found.append(f"{dst}: is a directory")
            elif st.size != size:
                found.append(f"{dst}: size is {st.size}, manifest says {size}")
            elif check_etags and etag is not None and st.etag != etag:
                found.append(f"{dst}: etag is {st.etag}, manifest says {etag}")
        return found

    def collect(chunk: Chunk, found: list[str]) -> None:
        nonlocal done
        problems.extend(found)
        done += len(chunk.entries)
        ctx.notify(STAGE, done, plan.files)

    run_parallel(ctx.pool, plan.renames, check, window=ctx.window, on_result=collect)
    if problems:
        more = f" (and {len(problems) - SHOWN} more)" if len(problems) > SHOWN else ""
        raise CommitFailedError(
            STAGE, f"{len(problems)} destination file(s) differ from their manifests{more}; "
            "_SUCCESS was not written:\n  " + "\n  ".join(problems[:SHOWN])
        )
    return done
