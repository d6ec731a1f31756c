from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Status(_message.Message):
    __slots__ = ("topology", "ipus", "devices", "partitions", "free_ipus", "uptime_seconds", "version")
    TOPOLOGY_FIELD_NUMBER: _ClassVar[int]
    IPUS_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    FREE_IPUS_FIELD_NUMBER: _ClassVar[int]
    UPTIME_SECONDS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    topology: str
    ipus: int
    devices: int
    partitions: int
    free_ipus: int
    uptime_seconds: float
    version: str
    def __init__(self, topology: _Optional[str] = ..., ipus: _Optional[int] = ..., devices: _Optional[int] = ..., partitions: _Optional[int] = ..., free_ipus: _Optional[int] = ..., uptime_seconds: _Optional[float] = ..., version: _Optional[str] = ...) -> None: ...

class CreatePartitionRequest(_message.Message):
    __slots__ = ("name", "size", "gcds")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    GCDS_FIELD_NUMBER: _ClassVar[int]
    name: str
    size: int
    gcds: int
    def __init__(self, name: _Optional[str] = ..., size: _Optional[int] = ..., gcds: _Optional[int] = ...) -> None: ...

class Partition(_message.Message):
    __slots__ = ("name", "ipus", "size", "gcds", "health", "health_detail", "ild_size", "units", "owner")
    NAME_FIELD_NUMBER: _ClassVar[int]
    IPUS_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    GCDS_FIELD_NUMBER: _ClassVar[int]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    HEALTH_DETAIL_FIELD_NUMBER: _ClassVar[int]
    ILD_SIZE_FIELD_NUMBER: _ClassVar[int]
    UNITS_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    name: str
    ipus: _containers.RepeatedScalarFieldContainer[int]
    size: int
    gcds: int
    health: str
    health_detail: str
    ild_size: int
    units: _containers.RepeatedScalarFieldContainer[str]
    owner: str
    def __init__(self, name: _Optional[str] = ..., ipus: _Optional[_Iterable[int]] = ..., size: _Optional[int] = ..., gcds: _Optional[int] = ..., health: _Optional[str] = ..., health_detail: _Optional[str] = ..., ild_size: _Optional[int] = ..., units: _Optional[_Iterable[str]] = ..., owner: _Optional[str] = ...) -> None: ...

class PartitionRef(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ListPartitionsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PartitionList(_message.Message):
    __slots__ = ("partitions",)
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[Partition]
    def __init__(self, partitions: _Optional[_Iterable[_Union[Partition, _Mapping]]] = ...) -> None: ...

class ListDevicesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Device(_message.Message):
    __slots__ = ("id", "name", "ipu_type", "unit", "server", "partition", "health", "memory_used_bytes", "memory_free_bytes", "memory_capacity_bytes", "node_id", "node_ip")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    IPU_TYPE_FIELD_NUMBER: _ClassVar[int]
    UNIT_FIELD_NUMBER: _ClassVar[int]
    SERVER_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    MEMORY_USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FREE_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_CAPACITY_BYTES_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_IP_FIELD_NUMBER: _ClassVar[int]
    id: int
    name: str
    ipu_type: str
    unit: str
    server: str
    partition: str
    health: str
    memory_used_bytes: int
    memory_free_bytes: int
    memory_capacity_bytes: int
    node_id: str
    node_ip: str
    def __init__(self, id: _Optional[int] = ..., name: _Optional[str] = ..., ipu_type: _Optional[str] = ..., unit: _Optional[str] = ..., server: _Optional[str] = ..., partition: _Optional[str] = ..., health: _Optional[str] = ..., memory_used_bytes: _Optional[int] = ..., memory_free_bytes: _Optional[int] = ..., memory_capacity_bytes: _Optional[int] = ..., node_id: _Optional[str] = ..., node_ip: _Optional[str] = ...) -> None: ...

class DeviceList(_message.Message):
    __slots__ = ("devices",)
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    devices: _containers.RepeatedCompositeFieldContainer[Device]
    def __init__(self, devices: _Optional[_Iterable[_Union[Device, _Mapping]]] = ...) -> None: ...

class ListLinksRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Link(_message.Message):
    __slots__ = ("source", "target", "type", "count", "bandwidth_bytes_per_second", "latency_seconds", "state", "bytes_carried")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    BANDWIDTH_BYTES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    LATENCY_SECONDS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    BYTES_CARRIED_FIELD_NUMBER: _ClassVar[int]
    source: str
    target: str
    type: str
    count: int
    bandwidth_bytes_per_second: float
    latency_seconds: float
    state: str
    bytes_carried: float
    def __init__(self, source: _Optional[str] = ..., target: _Optional[str] = ..., type: _Optional[str] = ..., count: _Optional[int] = ..., bandwidth_bytes_per_second: _Optional[float] = ..., latency_seconds: _Optional[float] = ..., state: _Optional[str] = ..., bytes_carried: _Optional[float] = ...) -> None: ...

class LinkList(_message.Message):
    __slots__ = ("links",)
    LINKS_FIELD_NUMBER: _ClassVar[int]
    links: _containers.RepeatedCompositeFieldContainer[Link]
    def __init__(self, links: _Optional[_Iterable[_Union[Link, _Mapping]]] = ...) -> None: ...

class TopologyRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TopologySummary(_message.Message):
    __slots__ = ("json",)
    JSON_FIELD_NUMBER: _ClassVar[int]
    json: str
    def __init__(self, json: _Optional[str] = ...) -> None: ...

class BenchmarkRequest(_message.Message):
    __slots__ = ("partition", "collective", "min_bytes", "max_bytes", "factor", "algorithm", "dtype", "op", "mode", "group", "root", "iterations", "warmup", "check", "trace", "trace_detail")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    COLLECTIVE_FIELD_NUMBER: _ClassVar[int]
    MIN_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    FACTOR_FIELD_NUMBER: _ClassVar[int]
    ALGORITHM_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    ROOT_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    WARMUP_FIELD_NUMBER: _ClassVar[int]
    CHECK_FIELD_NUMBER: _ClassVar[int]
    TRACE_FIELD_NUMBER: _ClassVar[int]
    TRACE_DETAIL_FIELD_NUMBER: _ClassVar[int]
    partition: str
    collective: str
    min_bytes: int
    max_bytes: int
    factor: float
    algorithm: str
    dtype: str
    op: str
    mode: str
    group: str
    root: int
    iterations: int
    warmup: int
    check: bool
    trace: bool
    trace_detail: str
    def __init__(self, partition: _Optional[str] = ..., collective: _Optional[str] = ..., min_bytes: _Optional[int] = ..., max_bytes: _Optional[int] = ..., factor: _Optional[float] = ..., algorithm: _Optional[str] = ..., dtype: _Optional[str] = ..., op: _Optional[str] = ..., mode: _Optional[str] = ..., group: _Optional[str] = ..., root: _Optional[int] = ..., iterations: _Optional[int] = ..., warmup: _Optional[int] = ..., check: _Optional[bool] = ..., trace: _Optional[bool] = ..., trace_detail: _Optional[str] = ...) -> None: ...

class KillCardRequest(_message.Message):
    __slots__ = ("card",)
    CARD_FIELD_NUMBER: _ClassVar[int]
    card: str
    def __init__(self, card: _Optional[str] = ...) -> None: ...

class DegradeLinkRequest(_message.Message):
    __slots__ = ("link", "bandwidth_factor", "added_latency_seconds")
    LINK_FIELD_NUMBER: _ClassVar[int]
    BANDWIDTH_FACTOR_FIELD_NUMBER: _ClassVar[int]
    ADDED_LATENCY_SECONDS_FIELD_NUMBER: _ClassVar[int]
    link: str
    bandwidth_factor: float
    added_latency_seconds: float
    def __init__(self, link: _Optional[str] = ..., bandwidth_factor: _Optional[float] = ..., added_latency_seconds: _Optional[float] = ...) -> None: ...

class LinkRef(_message.Message):
    __slots__ = ("link",)
    LINK_FIELD_NUMBER: _ClassVar[int]
    link: str
    def __init__(self, link: _Optional[str] = ...) -> None: ...

class ListFaultsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class LinkFault(_message.Message):
    __slots__ = ("link", "bandwidth_factor", "added_latency_seconds", "cut")
    LINK_FIELD_NUMBER: _ClassVar[int]
    BANDWIDTH_FACTOR_FIELD_NUMBER: _ClassVar[int]
    ADDED_LATENCY_SECONDS_FIELD_NUMBER: _ClassVar[int]
    CUT_FIELD_NUMBER: _ClassVar[int]
    link: str
    bandwidth_factor: float
    added_latency_seconds: float
    cut: bool
    def __init__(self, link: _Optional[str] = ..., bandwidth_factor: _Optional[float] = ..., added_latency_seconds: _Optional[float] = ..., cut: _Optional[bool] = ...) -> None: ...

class CardState(_message.Message):
    __slots__ = ("card", "ipus", "health", "restarts", "detail")
    CARD_FIELD_NUMBER: _ClassVar[int]
    IPUS_FIELD_NUMBER: _ClassVar[int]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    RESTARTS_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    card: str
    ipus: _containers.RepeatedScalarFieldContainer[int]
    health: str
    restarts: int
    detail: str
    def __init__(self, card: _Optional[str] = ..., ipus: _Optional[_Iterable[int]] = ..., health: _Optional[str] = ..., restarts: _Optional[int] = ..., detail: _Optional[str] = ...) -> None: ...

class FaultState(_message.Message):
    __slots__ = ("links", "cards", "message")
    LINKS_FIELD_NUMBER: _ClassVar[int]
    CARDS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    links: _containers.RepeatedCompositeFieldContainer[LinkFault]
    cards: _containers.RepeatedCompositeFieldContainer[CardState]
    message: str
    def __init__(self, links: _Optional[_Iterable[_Union[LinkFault, _Mapping]]] = ..., cards: _Optional[_Iterable[_Union[CardState, _Mapping]]] = ..., message: _Optional[str] = ...) -> None: ...

class BenchmarkRow(_message.Message):
    __slots__ = ("bytes", "count", "type", "op", "algorithm", "sim_seconds", "algbw_GBps", "busbw_GBps", "wall_seconds", "wrong", "json", "in_place_wall_seconds", "in_place_wrong")
    BYTES_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    ALGORITHM_FIELD_NUMBER: _ClassVar[int]
    SIM_SECONDS_FIELD_NUMBER: _ClassVar[int]
    ALGBW_GBPS_FIELD_NUMBER: _ClassVar[int]
    BUSBW_GBPS_FIELD_NUMBER: _ClassVar[int]
    WALL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    WRONG_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    IN_PLACE_WALL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    IN_PLACE_WRONG_FIELD_NUMBER: _ClassVar[int]
    bytes: int
    count: int
    type: str
    op: str
    algorithm: str
    sim_seconds: float
    algbw_GBps: float
    busbw_GBps: float
    wall_seconds: float
    wrong: int
    json: str
    in_place_wall_seconds: float
    in_place_wrong: int
    def __init__(self, bytes: _Optional[int] = ..., count: _Optional[int] = ..., type: _Optional[str] = ..., op: _Optional[str] = ..., algorithm: _Optional[str] = ..., sim_seconds: _Optional[float] = ..., algbw_GBps: _Optional[float] = ..., busbw_GBps: _Optional[float] = ..., wall_seconds: _Optional[float] = ..., wrong: _Optional[int] = ..., json: _Optional[str] = ..., in_place_wall_seconds: _Optional[float] = ..., in_place_wrong: _Optional[int] = ...) -> None: ...

class RankPlacement(_message.Message):
    __slots__ = ("group", "rank", "ipu", "ipu_name")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    IPU_FIELD_NUMBER: _ClassVar[int]
    IPU_NAME_FIELD_NUMBER: _ClassVar[int]
    group: int
    rank: int
    ipu: int
    ipu_name: str
    def __init__(self, group: _Optional[int] = ..., rank: _Optional[int] = ..., ipu: _Optional[int] = ..., ipu_name: _Optional[str] = ...) -> None: ...

class BenchmarkResult(_message.Message):
    __slots__ = ("partition", "ipus", "collective", "mode", "rows", "ranks", "group", "trace_chunk", "trace_bytes")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    IPUS_FIELD_NUMBER: _ClassVar[int]
    COLLECTIVE_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    RANKS_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TRACE_CHUNK_FIELD_NUMBER: _ClassVar[int]
    TRACE_BYTES_FIELD_NUMBER: _ClassVar[int]
    partition: str
    ipus: int
    collective: str
    mode: str
    rows: _containers.RepeatedCompositeFieldContainer[BenchmarkRow]
    ranks: _containers.RepeatedCompositeFieldContainer[RankPlacement]
    group: str
    trace_chunk: bytes
    trace_bytes: int
    def __init__(self, partition: _Optional[str] = ..., ipus: _Optional[int] = ..., collective: _Optional[str] = ..., mode: _Optional[str] = ..., rows: _Optional[_Iterable[_Union[BenchmarkRow, _Mapping]]] = ..., ranks: _Optional[_Iterable[_Union[RankPlacement, _Mapping]]] = ..., group: _Optional[str] = ..., trace_chunk: _Optional[bytes] = ..., trace_bytes: _Optional[int] = ...) -> None: ...

class AddUserRequest(_message.Message):
    __slots__ = ("name", "max_ipus")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MAX_IPUS_FIELD_NUMBER: _ClassVar[int]
    name: str
    max_ipus: int
    def __init__(self, name: _Optional[str] = ..., max_ipus: _Optional[int] = ...) -> None: ...

class User(_message.Message):
    __slots__ = ("name", "max_ipus", "ipus_used", "partitions")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MAX_IPUS_FIELD_NUMBER: _ClassVar[int]
    IPUS_USED_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    max_ipus: int
    ipus_used: int
    partitions: int
    def __init__(self, name: _Optional[str] = ..., max_ipus: _Optional[int] = ..., ipus_used: _Optional[int] = ..., partitions: _Optional[int] = ...) -> None: ...

class UserCredential(_message.Message):
    __slots__ = ("user", "credential")
    USER_FIELD_NUMBER: _ClassVar[int]
    CREDENTIAL_FIELD_NUMBER: _ClassVar[int]
    user: User
    credential: str
    def __init__(self, user: _Optional[_Union[User, _Mapping]] = ..., credential: _Optional[str] = ...) -> None: ...

class UserRef(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class RemoveUserRequest(_message.Message):
    __slots__ = ("name", "with_partitions")
    NAME_FIELD_NUMBER: _ClassVar[int]
    WITH_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    with_partitions: bool
    def __init__(self, name: _Optional[str] = ..., with_partitions: _Optional[bool] = ...) -> None: ...

class ListUsersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class UserList(_message.Message):
    __slots__ = ("users",)
    USERS_FIELD_NUMBER: _ClassVar[int]
    users: _containers.RepeatedCompositeFieldContainer[User]
    def __init__(self, users: _Optional[_Iterable[_Union[User, _Mapping]]] = ...) -> None: ...
