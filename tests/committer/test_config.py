"""Configuration: Hadoop key names, Spark's prefix, defaults, and refusal of bad values."""

from __future__ import annotations

import pytest

from committer import CommitterConfig
from committer.config import KEYS
from committer.errors import ConfigError


def test_defaults_follow_hadoop() -> None:
    c = CommitterConfig()
    assert c.io_threads == 32
    assert c.manifest_save_attempts == 5
    assert c.mark_successful_jobs is True
    assert c.validate_output is False and c.delete_target_files is False
    assert c.cleanup_parallel_delete is True and c.cleanup_skipped is False
    assert c.summary_report_directory is None and c.diagnostics_manifest_directory is None
    assert c.success_file_names == 100


def test_hadoop_keys() -> None:
    c = CommitterConfig.from_hadoop_conf({
        "mapreduce.manifest.committer.io.threads": "7",
        "mapreduce.manifest.committer.summary.report.directory": "/reports",
        "mapreduce.manifest.committer.diagnostics.manifest.directory": " ",
        "mapreduce.manifest.committer.validate.output": "TRUE",
        "mapreduce.manifest.committer.delete.target.files": "true",
        "mapreduce.manifest.committer.cleanup.parallel.delete": "false",
        "mapreduce.manifest.committer.manifest.save.attempts": "2",
        "mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
        "mapreduce.fileoutputcommitter.cleanup.skipped": "true",
        "unrelated.key": "whatever",
    })
    assert c.io_threads == 7
    assert c.summary_report_directory == "/reports"
    assert c.diagnostics_manifest_directory is None  # blank means unset
    assert c.validate_output and c.delete_target_files and c.cleanup_skipped
    assert not c.cleanup_parallel_delete and not c.mark_successful_jobs
    assert c.manifest_save_attempts == 2
    assert c.unrecognised_keys == ()


def test_spark_hadoop_prefix_and_overrides() -> None:
    c = CommitterConfig.from_hadoop_conf(
        {"spark.hadoop.mapreduce.manifest.committer.io.threads": "3",
         "spark.hadoop.mapreduce.manifest.committer.validate.output": "true"},
        validate_output=False,
    )
    assert c.io_threads == 3
    assert c.validate_output is False  # an explicit override wins


def test_unknown_committer_keys_are_kept_not_fatal() -> None:
    c = CommitterConfig.from_hadoop_conf({"mapreduce.manifest.committer.no.such.option": "1",
                                          "spark.hadoop.mapreduce.manifest.committer.zzz": "2"})
    assert c.unrecognised_keys == ("mapreduce.manifest.committer.no.such.option",
                                   "mapreduce.manifest.committer.zzz")


@pytest.mark.parametrize(("key", "value"), [
    ("mapreduce.manifest.committer.io.threads", "many"),
    ("mapreduce.manifest.committer.io.threads", "0"),
    ("mapreduce.manifest.committer.io.threads", "-4"),
    ("mapreduce.manifest.committer.validate.output", "maybe"),
    ("mapreduce.fileoutputcommitter.marksuccessfuljobs", ""),
    ("mapreduce.manifest.committer.manifest.save.attempts", "0"),
    ("mapreduce.manifest.committer.manifest.max.bytes", "1.5"),
    ("mapreduce.manifest.committer.io.rate.limit", "-1"),
    ("spark.hadoop.mapreduce.manifest.committer.retry.attempts", "0"),
])
def test_bad_values_are_config_errors(key: str, value: str) -> None:
    with pytest.raises(ConfigError):
        CommitterConfig.from_hadoop_conf({key: value})


def test_bad_keyword_values_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="io_threads"):
        CommitterConfig(io_threads=0)
    with pytest.raises(ConfigError, match="success_file_names"):
        CommitterConfig(success_file_names=-1)


def test_to_hadoop_conf_round_trips() -> None:
    c = CommitterConfig(io_threads=9, validate_output=True, summary_report_directory="/r",
                        storage_options={"account_key": "secret"})
    conf = c.to_hadoop_conf()
    assert conf["mapreduce.manifest.committer.io.threads"] == "9"
    assert conf["mapreduce.manifest.committer.validate.output"] == "true"
    assert "secret" not in str(conf)
    again = CommitterConfig.from_hadoop_conf(conf)
    assert again.io_threads == 9 and again.validate_output
    assert again.summary_report_directory == "/r"


def test_every_key_is_named_like_hadoop() -> None:
    prefixes = ("mapreduce.manifest.committer.", "mapreduce.fileoutputcommitter.")
    assert all(k.name.startswith(prefixes) for k in KEYS)
    assert len({k.name for k in KEYS}) == len(KEYS)
