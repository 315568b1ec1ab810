"""What every subcommand shares: its registration record, the exit codes, the usage error."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

# Documented exit statuses (docs/cli.md): scripts rely on these, so never renumber them.
EXIT_OK = 0
EXIT_PROBLEMS = 1  # the command ran and found problems (validate), or the operation failed
EXIT_USAGE = 2  # bad arguments, or input that cannot be read or is not what it must be


class CliError(Exception):
    """Ends the command with one line on stderr and ``code`` as the exit status.

    Raised for input the command cannot work with (a path that does not exist, a file of another
    format, a directory that holds no job). Nothing may have been changed when it is raised.
    """

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Command:
    """One subcommand: its name, help, how it adds its arguments, and what it runs.

    ``run`` returns the exit status. The common options (``--json``, ``--debug``,
    ``--storage-option``, ``--conf``) are added by ``main.py`` to every subcommand.
    """

    name: str
    help: str
    description: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
