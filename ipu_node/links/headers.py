"""A header block as it arrives: a HEADERS frame's fragment and any CONTINUATION frames
after it (RFC 9113 §4.3), bounded by ``max_header_block_bytes``, then HPACK-decoded (the
``hpack`` package). No socket and no stream state: the connection's state machine
(:mod:`ipu_node.links.protocol`) hands it payloads and acts on the fields."""

from __future__ import annotations

import hpack

from ipu_node.links.frames import (
    END_STREAM,
    ConnectionViolation,
    ErrorCode,
    header_block_span,
)

_FIELDS_SLACK = 256  # a HEADERS frame's padding and priority fields, at most (bytes)


class HeaderBlock:
    """The header block in progress on a connection (HPACK state is the connection's),
    at most ``limit`` bytes."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.decoder = hpack.Decoder(max_header_list_size=4 * limit)
        self.fragments = bytearray()
        self.stream = 0  # the stream whose block is unfinished (0: none)
        self.ends_stream = False  # its HEADERS carried END_STREAM

    def check_headers(self, length: int) -> None:
        """A HEADERS frame of ``length`` bytes may begin a block."""
        if length > self.limit + _FIELDS_SLACK:
            self._too_large()

    def check_continuation(self, length: int) -> None:
        """A CONTINUATION frame of ``length`` bytes may follow."""
        if not self.stream:
            raise ConnectionViolation(ErrorCode.PROTOCOL_ERROR,
                                      "CONTINUATION without HEADERS before it")
        if len(self.fragments) + length > self.limit:
            self._too_large()

    def _too_large(self) -> None:
        raise ConnectionViolation(ErrorCode.ENHANCE_YOUR_CALM,
                                  f"a header block beyond {self.limit:,} bytes")

    def begin(self, stream: int, payload: bytearray, flags: int) -> None:
        """A HEADERS frame's payload: its fragment kept, past padding and priority."""
        start, end = header_block_span(payload, flags)
        self.fragments = payload[start:end]
        self.stream, self.ends_stream = stream, bool(flags & END_STREAM)

    def extend(self, payload: bytearray) -> None:
        self.fragments += payload

    def decode(self) -> dict[str, str]:
        """The whole block's fields (the block is then finished)."""
        self.stream = 0
        try:
            return {name if isinstance(name, str) else name.decode():
                    value if isinstance(value, str) else value.decode()
                    for name, value in self.decoder.decode(bytes(self.fragments))}
        except Exception as error:  # noqa: BLE001 - hpack's errors, or headers not text
            raise ConnectionViolation(ErrorCode.COMPRESSION_ERROR,
                                      f"a header block did not decode: {error}") from None
