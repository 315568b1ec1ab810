"""The data path of a job commit: one module per stage, in the order they run.

    setup.py               job setup: the job attempt directory and its marker (exclusive)
    load_manifests.py      list the committed manifests, read and check them (entry_checks.py)
                           into the plan (plan.py); nothing moves
    create_directories.py  create the plan's destination directories
    rename_files.py        rename every file into place, in parallel
    validate_output.py     optionally check every destination, before _SUCCESS
    save_success.py        the summary, saved as _SUCCESS (and its report copy)
    cleanup.py             remove this job's directory, and nothing else

Every stage takes a ``StageContext`` (``context.py``): the store, the layout, the configuration,
the commit's one thread pool and progress callback. The stages know nothing of crash safety;
``committer.job.durability`` wraps them in a journal, and ``committer.job.committer`` runs both.
"""
