"""What makes a job commit crash-safe, concurrent and replayable, around the stages.

    journal.py      what the commit is about to do and how far it got (_journal.json)
    transaction.py  the journal's states around the stages; the hooks JobCommitter calls
    move_aside.py   overwrite by moving data into the job directory, not deleting it
    lock.py         the destination lock: a lease serialising commits on one destination
    history.py      one record per committed job: a repeated commit of a job id is a no-op
    interrupted.py  find unfinished commits under a destination (what status shows)
    rollback.py     undo an interrupted commit; resume is the commit run again
                    (``committer.job.resume``)

Everything here works from the store and the job directory alone, so it runs in a new process
(the CLI) long after the driver died.
"""
