"""The one error tree: every error vllmctl raises carries a message, a hint and an exit code.

Input errors also carry where in the user's file the problem is (file, line, column, field path).
"""

from __future__ import annotations

from dataclasses import dataclass, field

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_CHANGES = 3


@dataclass(frozen=True)
class Location:
    """A place in a user's file: 1-based line and column, and the field path (e.g. models.llama.port)."""

    file: str
    line: int | None = None
    column: int | None = None
    path: str = ""

    def __str__(self) -> str:
        where = self.file
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        return where


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input, with where it is and what to do about it."""

    location: Location
    message: str
    hint: str = ""

    def render(self) -> str:
        field_part = f" {self.location.path}:" if self.location.path else ""
        text = f"{self.location}:{field_part} {self.message}"
        if self.hint:
            text += f"\n  hint: {self.hint}"
        return text


class VllmctlError(Exception):
    """Base of every error vllmctl reports to the user (never shown as a traceback)."""

    exit_code = EXIT_FAILURE

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def render(self) -> str:
        return f"{self.message}\n  hint: {self.hint}" if self.hint else self.message


class InputError(VllmctlError):
    """The user's input (a file, a flag) is wrong; nothing was touched."""

    exit_code = EXIT_USAGE


@dataclass
class ProblemList:
    """Collects problems so validation can report all of them at once."""

    problems: list[Problem] = field(default_factory=list)

    def add(self, location: Location, message: str, hint: str = "") -> None:
        self.problems.append(Problem(location, message, hint))

    def __bool__(self) -> bool:
        return bool(self.problems)


class InvalidInputError(InputError):
    """One or more problems in an input file, each with file, line, column and field path."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = sorted(
            problems, key=lambda p: (p.location.file, p.location.line or 0, p.location.column or 0)
        )
        count = len(self.problems)
        head = f"{count} problem{'s' if count != 1 else ''} found"
        super().__init__(head)

    def render(self) -> str:
        return "\n".join(p.render() for p in self.problems)


class TransportError(VllmctlError):
    """A host could not be reached or a remote command could not run."""


class PlanError(VllmctlError):
    """The planner found no configuration that fits; carries the numbers and the options."""
