"""The one error a Chakra trace that cannot be read raises: it names the file (or the
trace's path) and what is wrong with it."""

from __future__ import annotations

from cluster.errors import UserError, quoted


class ChakraTraceError(UserError):
    """A Chakra trace that cannot be read: missing files, damaged framing, a node that is
    not what its type says, dependencies that cannot be ordered, ranks that disagree."""

    def __init__(self, where: str, problem: str) -> None:
        self.where = where
        self.problem = problem
        super().__init__(f"Chakra trace {quoted(where)}: {problem}")

    def __reduce__(self) -> tuple[type[ChakraTraceError], tuple[str, str]]:
        return type(self), (self.where, self.problem)
