"""``manifest-committer``: argument parsing, dispatch, and turning failures into exit codes.

Every subcommand module exports a :class:`Command`; ``COMMANDS`` below is the whole list, so a
new subcommand is one module plus one line here. Errors reach the user as one line on stderr,
``manifest-committer: error: <what>``; the traceback only with ``--debug``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from committer import __version__
from committer.cli import (
    cleanup,
    commit,
    diff,
    history,
    inspect,
    resume,
    rollback,
    status,
    validate,
)
from committer.cli.command import EXIT_OK, EXIT_USAGE, CliError, Command
from committer.cli.paths import add_store_arguments
from committer.errors import ManifestCommitterError
from committer.store.secrets import scrub

PROG = "manifest-committer"

COMMANDS: tuple[Command, ...] = (
    inspect.COMMAND,
    validate.COMMAND,
    status.COMMAND,
    commit.COMMIT_JOB,
    commit.ABORT_JOB,
    cleanup.COMMAND,
    diff.COMMAND,
    resume.COMMAND,
    rollback.COMMAND,
    history.COMMAND,
)

EPILOG = """\
exit status: 0 ok, 1 problems found (or the operation failed), 2 usage error or unreadable input.
Locations: local paths, file: URIs, abfs(s)://, az://, gs:// (see --storage-option, --conf).
Documentation: docs/cli.md."""


class _OneLineFormatter(logging.Formatter):
    """Log records as one line each; tracebacks only when debugging."""

    def __init__(self, debug: bool) -> None:
        super().__init__(f"{PROG}: %(levelname)s: %(message)s")
        self.debug = debug

    def format(self, record: logging.LogRecord) -> str:
        if not self.debug and record.exc_info:
            exc = record.exc_info[1]
            record = logging.makeLogRecord({**record.__dict__, "exc_info": None,
                                            "exc_text": None})
            record.msg = f"{record.getMessage()}: {exc}"
            record.args = ()
        return scrub(super().format(record))


def _common(debug_default: object) -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true",
                        help="print a stable JSON document instead of tables (docs/cli.md)")
    common.add_argument("--debug", action="store_true", default=debug_default,
                        help="show tracebacks and debug logging")
    add_store_arguments(common)
    return common


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Inspect, validate, commit and clean up jobs written with the manifest "
                    "committer (this project's or Hadoop's).")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    # SUPPRESS: a --debug given before the subcommand must survive the subparser's defaults.
    common = _common(argparse.SUPPRESS)
    for cmd in COMMANDS:
        p = sub.add_parser(cmd.name, help=cmd.help, description=cmd.description,
                           parents=[common], epilog=EPILOG,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        cmd.add_arguments(p)
        p.set_defaults(run=cmd.run)
    return parser


def _error(message: str) -> None:
    first = scrub(message).strip().splitlines()[0] if message.strip() else "failed"
    sys.stderr.write(f"{PROG}: error: {first}\n")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    debug = bool(getattr(args, "debug", False))
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_OneLineFormatter(debug))
    logging.basicConfig(level=logging.DEBUG if debug else logging.WARNING, handlers=[handler],
                        force=True)
    if not debug:
        # aiohttp (under gcsfs/adlfs) reports its sessions as "unclosed" when the interpreter
        # exits; the process is ending anyway, and these lines would read as a failure.
        logging.getLogger("asyncio").setLevel(logging.CRITICAL)
    try:
        code: int = args.run(args)
        sys.stdout.flush()
    except CliError as e:
        if debug:
            logging.getLogger(PROG).exception("%s", e)
        _error(str(e))
        return e.code
    except ManifestCommitterError as e:
        # The engine names the file and the reason; anything it raises here means the input
        # or the store could not be used.
        if debug:
            raise
        _error(str(e))
        return EXIT_USAGE
    except KeyboardInterrupt:
        _error("interrupted")
        return 130
    except BrokenPipeError:
        # `manifest-committer inspect ... --files | head`: the reader left; that is fine.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except Exception as e:
        if debug:
            raise
        _error(f"unexpected {type(e).__name__}: {e} (run with --debug for the traceback)")
        return EXIT_USAGE
    return code


if __name__ == "__main__":
    sys.exit(main())
