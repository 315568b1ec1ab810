"""``python -m benchmarks``: several suites in one command, each parsing its own options."""

from __future__ import annotations

import argparse
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from benchmarks import __main__ as bench


def _suite(name: str, seen: list[tuple[str, argparse.Namespace]]) -> ModuleType:
    """A suite taking ``--files`` (each with its own default) and one option of its own."""
    mod = ModuleType(f"fake_{name}")

    def add_arguments(group: Any) -> None:
        group.add_argument("--files", type=int, default=len(name))
        group.add_argument(f"--only-{name}", type=int, default=0)

    def run(args: argparse.Namespace) -> dict[str, Any]:
        seen.append((name, args))
        return {"files": args.files}

    mod.__dict__.update(NAME=name, TITLE=f"suite {name}", add_arguments=add_arguments,
                        run=run, report=lambda result: f"{result['files']} files")
    return mod


@pytest.fixture
def suites(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, argparse.Namespace]]:
    seen: list[tuple[str, argparse.Namespace]] = []
    fakes = {name: _suite(name, seen) for name in ("aa", "bbbb")}
    monkeypatch.setattr(bench, "SUITES", {name: name for name in fakes})
    monkeypatch.setattr(bench, "_module", fakes.__getitem__)
    return seen


def test_suites_sharing_an_option_each_get_it(suites: list[tuple[str, argparse.Namespace]],
                                              tmp_path: Path) -> None:
    assert bench.main(["all", "--out", str(tmp_path), "--files", "7", "--only-bbbb=3"]) == 0
    assert [(name, a.files, a.out) for name, a in suites] == [("aa", 7, tmp_path),
                                                               ("bbbb", 7, tmp_path)]
    assert suites[1][1].only_bbbb == 3
    report = (tmp_path / "report.md").read_text()
    assert "suite aa" in report and "suite bbbb" in report


def test_each_suite_keeps_its_own_defaults(suites: list[tuple[str, argparse.Namespace]],
                                           tmp_path: Path) -> None:
    assert bench.main(["aa", "bbbb", "--out", str(tmp_path), "--only-aa", "1"]) == 0
    assert [(name, a.files) for name, a in suites] == [("aa", 2), ("bbbb", 4)]


def test_an_option_no_chosen_suite_takes_is_refused(
        suites: list[tuple[str, argparse.Namespace]], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["aa", "--out", str(tmp_path), "--only-bbbb", "3"]) == 2
    assert "--only-bbbb" in capsys.readouterr().err
    assert suites == []
    # an abbreviation is not taken for the option it begins
    assert bench.main(["aa", "--out", str(tmp_path), "--fil", "3"]) == 2


def test_help_names_every_chosen_suites_options(
        suites: list[tuple[str, argparse.Namespace]], capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["all", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--only-aa" in out and "--only-bbbb" in out and "--files" in out
    assert suites == []


def test_the_registered_suites_parse_together() -> None:
    """Every registered suite's options, each parsed alone: ``all`` reaches the runs."""
    for name in bench.SUITES:
        parser = bench._parser([bench._module(name)])
        assert parser.parse_known_args([])[1] == []
