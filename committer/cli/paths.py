"""Locations on the command line, and the stores behind them.

Every subcommand takes the same forms: a local path (relative ones are made absolute), a
``file:`` URI (URI-escaped, as Hadoop writes them), or a cloud URL (``abfs://``, ``abfss://``,
``az://``, ``gs://``; any other scheme fsspec knows also works). Credentials come the way the
engine takes them: ``--storage-option key=value`` goes straight into fsspec's storage options,
``--conf key=value`` takes Hadoop/Spark keys (``fs.azure.account.key.<account>...``,
``google.cloud.auth.service.account.json.keyfile``, ``mapreduce.manifest.committer.*``) and is
turned into storage options and committer settings by :mod:`committer.store.credentials`.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Sequence
from typing import Any

from committer.cli.command import CliError
from committer.config import CommitterConfig
from committer.errors import ConfigError
from committer.store import ManagedStore, open_store
from committer.store.credentials import config_for_location
from manifest_schema.uris import split_scheme, uri_to_location

# gcsfs (2026.x) probes every bucket over gRPC+TLS unless this is off; against an emulator or a
# private plain-http endpoint each probe retries for a minute and every command seems to hang
# (spec/emulators.md). It must be set before gcsfs is imported; a user's own setting wins.
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")


def add_store_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-o", "--storage-option", action="append", default=[], metavar="KEY=VALUE",
        help="fsspec storage option for the store (repeatable), e.g. "
             "connection_string=..., endpoint_url=http://127.0.0.1:4443, token=anon; "
             "true/false and integers are converted",
    )
    parser.add_argument(
        "-c", "--conf", action="append", default=[], metavar="KEY=VALUE",
        help="Hadoop/Spark configuration key (repeatable): credentials such as "
             "fs.azure.account.key.<account>.dfs.core.windows.net, and committer settings "
             "such as mapreduce.manifest.committer.io.threads",
    )


def parse_pairs(items: Sequence[str], option: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CliError(f"{option} expects KEY=VALUE, got {item!r}")
        out[key.strip()] = value
    return out


def _option_value(text: str) -> Any:
    # fsspec constructors want real booleans and integers (anon=false, committer_concurrency=16);
    # everything else, keys and tokens included, stays a string exactly as typed.
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if text.isdigit() and len(text) < 19:
        return int(text)
    return text


def normalise_location(text: str) -> str:
    """A location the store layer takes: an absolute OS path, or ``scheme://...``."""
    if not text.strip():
        raise CliError("an empty path was given")
    scheme, _ = split_scheme(text)
    if scheme == "file":
        try:
            loc = uri_to_location(text)
        except ValueError as e:
            raise CliError(str(e)) from None
    elif scheme == "":
        loc = os.path.abspath(os.path.expanduser(text))
    else:
        if "://" not in text:
            raise CliError(f"{text!r}: a {scheme} URL needs '//' (e.g. {scheme}://bucket/path)")
        loc = text
    stripped = loc.rstrip("/")
    if not stripped or stripped.endswith(":/"):
        return loc  # "/" or "gs://" itself: nothing to strip
    return stripped


def config_for(args: argparse.Namespace, location: str) -> CommitterConfig:
    """Committer settings and storage options for ``location`` from the common options."""
    conf = parse_pairs(args.conf, "--conf")
    options = {k: _option_value(v) for k, v in parse_pairs(args.storage_option, "--storage-option")
               .items()}
    try:
        base = CommitterConfig.from_hadoop_conf(conf)
        base = dataclasses.replace(base, storage_options=options)
        return config_for_location(base, conf, location)
    except ConfigError as e:
        raise CliError(str(e)) from None


def open_location(args: argparse.Namespace, text: str) -> tuple[str, ManagedStore]:
    """``(location, store)`` for a PATH argument; an unusable URL or option is a CliError."""
    location = normalise_location(text)
    config = config_for(args, location)
    try:
        return location, open_store(location, config)
    except ConfigError as e:
        raise CliError(str(e)) from None
    except ImportError as e:
        scheme, _ = split_scheme(location)
        raise CliError(f"{scheme}:// needs an optional dependency ({e}); "
                       "install spark-manifest-committer[cloud]") from None
