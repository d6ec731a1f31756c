from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class Chunk(_message.Message):
    __slots__ = ("collective", "phase", "step", "transfer", "src_ipu", "dst_ipu", "offset", "total", "data", "pad", "slot_segment", "slot", "slot_length", "slot_count", "slot_bytes", "slot_retired", "buffer", "buffer_offset", "buffer_bytes", "buffer_forget")
    COLLECTIVE_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    TRANSFER_FIELD_NUMBER: _ClassVar[int]
    SRC_IPU_FIELD_NUMBER: _ClassVar[int]
    DST_IPU_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    PAD_FIELD_NUMBER: _ClassVar[int]
    SLOT_SEGMENT_FIELD_NUMBER: _ClassVar[int]
    SLOT_FIELD_NUMBER: _ClassVar[int]
    SLOT_LENGTH_FIELD_NUMBER: _ClassVar[int]
    SLOT_COUNT_FIELD_NUMBER: _ClassVar[int]
    SLOT_BYTES_FIELD_NUMBER: _ClassVar[int]
    SLOT_RETIRED_FIELD_NUMBER: _ClassVar[int]
    BUFFER_FIELD_NUMBER: _ClassVar[int]
    BUFFER_OFFSET_FIELD_NUMBER: _ClassVar[int]
    BUFFER_BYTES_FIELD_NUMBER: _ClassVar[int]
    BUFFER_FORGET_FIELD_NUMBER: _ClassVar[int]
    collective: str
    phase: int
    step: int
    transfer: int
    src_ipu: int
    dst_ipu: int
    offset: int
    total: int
    data: bytes
    pad: bytes
    slot_segment: str
    slot: int
    slot_length: int
    slot_count: int
    slot_bytes: int
    slot_retired: str
    buffer: str
    buffer_offset: int
    buffer_bytes: int
    buffer_forget: bool
    def __init__(self, collective: _Optional[str] = ..., phase: _Optional[int] = ..., step: _Optional[int] = ..., transfer: _Optional[int] = ..., src_ipu: _Optional[int] = ..., dst_ipu: _Optional[int] = ..., offset: _Optional[int] = ..., total: _Optional[int] = ..., data: _Optional[bytes] = ..., pad: _Optional[bytes] = ..., slot_segment: _Optional[str] = ..., slot: _Optional[int] = ..., slot_length: _Optional[int] = ..., slot_count: _Optional[int] = ..., slot_bytes: _Optional[int] = ..., slot_retired: _Optional[str] = ..., buffer: _Optional[str] = ..., buffer_offset: _Optional[int] = ..., buffer_bytes: _Optional[int] = ..., buffer_forget: _Optional[bool] = ...) -> None: ...

class PushReply(_message.Message):
    __slots__ = ("bytes", "chunks")
    BYTES_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    bytes: int
    chunks: int
    def __init__(self, bytes: _Optional[int] = ..., chunks: _Optional[int] = ...) -> None: ...

class PingRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PingReply(_message.Message):
    __slots__ = ("device",)
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    device: str
    def __init__(self, device: _Optional[str] = ...) -> None: ...
