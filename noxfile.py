"""nox sessions: ``nox -s tests``, ``nox -s lint``, ``nox -s bench``."""

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
def bench(session: nox.Session) -> None:
    session.install("-e", ".")
    session.install("torch==2.13.0")
    session.run("python", "-m", "benchmarks", *session.posargs)
