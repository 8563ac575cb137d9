"""The examples' command lines: ``--help`` shows every option with its default, every
option it lists parses, ``--distributed`` without MPI is a usage message, and the
progress bars keep the first step's compile out of their clock."""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path

import pytest

from nbgrad.examples import _common
from nbgrad.examples.__main__ import EXAMPLES
from nbgrad.examples.__main__ import main as examples_main


class Parsed(Exception):
    """Raised once an example's arguments parsed, before it trains."""


@pytest.fixture
def parsers(monkeypatch):
    """The parsers the examples build, in order; with ``stop`` set, an example stops
    (``Parsed``) right after its arguments parsed."""
    built: list[argparse.ArgumentParser] = []
    parse = argparse.ArgumentParser.parse_args

    def recording(self, args=None, namespace=None):
        built.append(self)
        parsed = parse(self, args, namespace)
        if recording.stop:
            raise Parsed(parsed)
        return parsed

    recording.stop = True
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", recording)
    monkeypatch.setenv("COLUMNS", "300")  # one line per option: easier to read back
    return built, recording


def options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.option_strings and a.dest != "help"]


def help_of(name: str, capsys) -> str:
    with pytest.raises(SystemExit) as exit_:
        examples_main([name, "--help"])
    assert exit_.value.code == 0
    return " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("name", EXAMPLES)
def test_help_explains_every_option_with_its_default(name, parsers, capsys):
    built, _ = parsers
    text = help_of(name, capsys)
    for action in options(built[-1]):
        assert action.help, f"{name} {action.option_strings[0]} has no help text"
        if action.default not in (None, False):
            assert f"{action.option_strings[0]}" in text
            assert f"(default: {action.default})" in text, (name, action.dest)


def a_value(action: argparse.Action) -> list[str]:
    """Command-line words that give ``action`` a value it accepts."""
    if action.nargs == 0:
        return []
    if action.choices:
        return [str(list(action.choices)[-1])]
    if action.default is not None:
        return [str(action.default)]
    return {int: ["2"], float: ["0.5"]}.get(action.type, ["run.npz"])


@pytest.mark.parametrize("name", EXAMPLES)
def test_every_listed_option_parses(name, parsers, monkeypatch):
    built, _ = parsers
    monkeypatch.setattr(_common, "mpi_available", lambda: True)
    with pytest.raises(Parsed):
        examples_main([name])
    for action in options(built[-1]):
        flag = action.option_strings[0]
        with pytest.raises(Parsed) as parsed:
            examples_main([name, flag, *a_value(action)])
        if action.nargs == 0:  # a flag: on once given
            assert getattr(parsed.value.args[0], action.dest) is True, f"{name} {flag}"


@pytest.mark.parametrize("name", ["digits", "darcy-gno"])
def test_distributed_without_mpi_is_a_usage_message(name, parsers, monkeypatch, capsys):
    _, recording = parsers
    recording.stop = False
    monkeypatch.setattr(_common, "mpi_available", lambda: False)
    with pytest.raises(SystemExit) as exit_:
        examples_main([name, "--distributed", "--epochs", "1"])
    assert exit_.value.code == 2
    assert "--distributed needs mpi4py" in capsys.readouterr().err


def test_the_list_of_examples_says_how_to_see_their_options(capsys):
    assert examples_main(["--help"]) == 0
    assert "NAME --help` lists the options of an example and their defaults" in \
        capsys.readouterr().out


def test_the_bar_reads_compiling_until_the_first_step_and_times_only_the_rest():
    pytest.importorskip("tqdm")
    bar = _common.progress(10, enabled=True)
    assert bar.desc == "compiling"
    time.sleep(0.5)  # a first step that compiles
    _common.advance(bar, loss="1.0")
    assert bar.n == 1 and bar.desc == ""
    assert bar.format_dict["elapsed"] < 0.1
    for _ in range(3):
        time.sleep(0.01)
        _common.advance(bar, loss="0.5")
    state = bar.format_dict
    assert state["n"] == 4 and state["elapsed"] < 0.3
    assert (state["n"] - state["initial"]) / state["elapsed"] > 10  # steps/s, not 1/0.5
    assert "loss=0.5" in bar.format_meter(**state)
    bar.close()


def test_no_bar_when_disabled_and_advance_takes_none():
    assert _common.progress(10, enabled=False) is None
    _common.advance(None, loss="1.0")


def test_every_example_advances_its_bar_through_the_one_helper():
    examples = Path(_common.__file__).parent
    for source in examples.glob("*.py"):
        if source.name != "_common.py":
            assert not re.search(r"bar\.(update|set_postfix)\(", source.read_text()), source
