"""What the connection's state machine (:mod:`ipu_node.links.protocol`) reports from the
bytes it is given, as h2's events do: one small frozen value per happening. Frames that
need no decision (SETTINGS, PING, PRIORITY, unknown types) are settled inside and report
nothing; a connection error is raised, never reported."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class HeadersReceived:
    """A header block of the stream in progress: a request (server), a response's
    headers or trailers (client); ``end_stream`` if it ends the peer's side."""

    stream: int
    headers: dict[str, str]
    end_stream: bool


@dataclass(frozen=True, slots=True)
class MessageReceived:
    """A whole gRPC message of the stream in progress, in a buffer of its own."""

    stream: int
    message: np.ndarray


@dataclass(frozen=True, slots=True)
class MessageRefused:
    """A message beyond the limits (``reason``): the rest of the stream is dropped as it
    comes; the connection carries on."""

    stream: int
    reason: str


@dataclass(frozen=True, slots=True)
class StreamEnded:
    """The peer ended its side of the stream in progress (END_STREAM)."""

    stream: int


@dataclass(frozen=True, slots=True)
class ResetReceived:
    """The peer reset the stream in progress (RST_STREAM with ``code``); it is over."""

    stream: int
    code: int


@dataclass(frozen=True, slots=True)
class GoAwayReceived:
    """The peer is closing the connection: streams above ``last_stream`` will not be
    processed; ``debug`` is the start of its reason."""

    last_stream: int
    code: int
    debug: str


@dataclass(frozen=True, slots=True)
class WindowUpdated:
    """The peer gave credit (WINDOW_UPDATE) on ``stream`` (0: the connection)."""

    stream: int


Event = (HeadersReceived | MessageReceived | MessageRefused | StreamEnded | ResetReceived
         | GoAwayReceived | WindowUpdated)
