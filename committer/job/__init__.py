"""The job side of the protocol, by role:

    stages/       the data path, one module per stage in the order job commit runs them:
                  setup -> load_manifests -> create_directories -> rename_files
                  -> [validate_output] -> save_success -> cleanup
    durability/   what makes a commit crash-safe around the stages: journal, transaction,
                  move-aside, destination lock, history, interrupted commits, rollback
    committer.py  JobCommitter: setup, commit (the stages inside a transaction), abort
    resume.py     finish an interrupted commit (the commit, run again)

Imports only go down this list: the stages know nothing of durability; durability uses the
stages (rollback loads manifests, cleanup ends it); the committer and resume use both.
"""

from committer.job.committer import JobCommitter
from committer.job.durability.rollback import rollback
from committer.job.resume import resume

__all__ = ["JobCommitter", "resume", "rollback"]
