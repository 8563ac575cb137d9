"""nox sessions: ``nox -s tests``, ``nox -s lint``, ``nox -s bench``, ``nox -s fuzz``."""

import os

import nox

nox.options.sessions = ["lint", "tests"]


@nox.session
def tests(session: nox.Session) -> None:
    session.install("-e", ".[test]")
    session.run("pytest", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    session.install("ruff")
    session.run("ruff", "check", ".")


@nox.session
def fuzz(session: nox.Session) -> None:
    """The checkpoint fuzz test with many more examples than the suite's 100
    (``NBGRAD_FUZZ_EXAMPLES``, default 20000 here: ``nox -s fuzz -- -x`` passes pytest
    options)."""
    session.install("-e", ".[test]")
    examples = os.environ.get("NBGRAD_FUZZ_EXAMPLES", "20000")
    session.run("pytest", "tests/test_checkpoint_fuzz.py", *session.posargs,
                env={"NBGRAD_FUZZ_EXAMPLES": examples})


@nox.session
def bench(session: nox.Session) -> None:
    session.install("-e", ".")
    session.install("torch==2.13.0")
    session.run("python", "-m", "benchmarks", *session.posargs)
