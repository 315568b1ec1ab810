"""The ``manifest-committer`` command: inspect, validate, commit and tidy up committed jobs.

One module per subcommand, each exporting a :class:`~committer.cli.command.Command` (or several);
``main.py`` lists them in ``COMMANDS``. Adding a subcommand is one new module and one line there.

Shared pieces:

    command.py    the Command record, exit codes, CliError
    paths.py      URL handling, --storage-option / --conf, opening stores
    documents.py  recognising what a PATH is and reading manifests one at a time
    units.py      human sizes and durations, and parsing durations such as ``7d``
    render.py     rich tables, JSON output, progress bars
"""
