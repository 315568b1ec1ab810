"""The machine's bound: the largest of the account's bound and the CPU the engine and the
simulator spent over the machine's CPUs, named by the term that held it."""

from __future__ import annotations

import pytest

from benchmarks.cloud_scale.bound import machine_bound


def test_the_account_holds_a_run_when_the_cpus_have_time_to_spare() -> None:
    assert machine_bound(50.0, 20.0, 30.0, 2) == (50.0, "account")


def test_the_engine_cpu_holds_a_run_when_it_alone_exceeds_the_account() -> None:
    assert machine_bound(10.0, 40.0, 0.0, 2) == (20.0, "engine CPU")


def test_the_shared_cpu_holds_a_run_like_the_one_million_file_run_on_two_cpus() -> None:
    # issue 31: 50.1 s account bound, 62.7 s engine CPU, 71.4 s simulator CPU, 2 CPUs
    bound, term = machine_bound(50.1, 62.7, 71.4, 2)
    assert term == "engine + simulator CPU" and bound == pytest.approx(67.05)


def test_ties_go_to_the_account() -> None:
    assert machine_bound(10.0, 20.0, 0.0, 2) == (10.0, "account")


def test_no_cpus_is_refused_with_the_reason() -> None:
    with pytest.raises(ValueError, match="cpus must be at least 1"):
        machine_bound(1.0, 1.0, 1.0, 0)
