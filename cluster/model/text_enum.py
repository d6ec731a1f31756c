"""Enums whose members are their names as text: they compare equal to the string, print
as it (also in f-strings, on every Python this project supports), and go to JSON and
protobuf as it, so a choice can be an Enum in the code and plain text on the wire."""

from __future__ import annotations

from enum import Enum


class TextEnum(str, Enum):
    """A str-valued Enum that prints as its value (``str(ReduceOp.SUM) == "sum"``)."""

    def __str__(self) -> str:
        return str(self.value)
