"""Error types shared by the backend and the CLI.

The CLI maps them to exit codes: BadInput -> 2 (the user can fix the input), TrainwizError -> 1.
"""

from __future__ import annotations


class TrainwizError(Exception):
    """A failure that is not the user's input: a daemon down, a download refused, a crash."""


class BadInput(TrainwizError):
    """Input the user can fix: a preset, a form field, a path or a CLI argument.

    ``problems`` holds one line per problem, each naming the field (and file:line:col where known)
    and the fix, so that every problem is reported at once rather than one per attempt.
    """

    def __init__(self, problems: list[str] | str) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))
