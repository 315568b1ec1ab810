"""Job side of the protocol, one module per stage, in the order job commit runs them:

    setup.py               create the job attempt directory (refuse a job id already in use)
    load_manifests.py      list + load manifests in parallel, check them (untrusted.py) -> plan.py
    create_directories.py  [replace partitions,] create the aggregate set of directories
    rename_files.py        rename every file, in parallel
    validate_output.py     optionally check every destination, before _SUCCESS
    summary.py             _SUCCESS and the summary report
    cleanup.py             remove this job's directory only
    commit.py              JobCommitter: the stages, top to bottom
"""

from committer.job.commit import JobCommitter

__all__ = ["JobCommitter"]
