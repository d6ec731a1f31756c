"""Link transports, registered by name: how a device's link server listens and how its
clients push chunks to peers.

A transport is one module that builds a server and clients with the shapes below and
registers them (:func:`register`), plus its module name in ``_MODULES``; devices pick one
by name (:class:`~ipu_node.links.endpoint.LinkEndpoint`). The one built in is
``grpc-h2``: gRPC's wire protocol spoken directly (:mod:`ipu_node.links.channel`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from cluster.errors import UserError
from cluster.model.plugins import PluginModules
from ipu_node.links.mailbox import Mailbox

DEFAULT_TRANSPORT = "grpc-h2"
Receiver = Mailbox | Callable[[Iterable], tuple[int, int]]
_MODULES = PluginModules("ipu_node.links.channel")


class LinkServerLike(Protocol):
    """The receiving end of a device's links."""

    @property
    def link_address(self) -> str: ...

    def start(self) -> str: ...

    def stop(self) -> None: ...


class LinkClientLike(Protocol):
    """The sending end of one link, to one peer."""

    address: str

    def push(self, messages: Iterable, deadline_seconds: float) -> int: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Transport:
    """``server(device name, receiver, host, secret, tls=...)`` and ``client(peer name,
    address, secret, tls=...)``: ``secret`` is the POD's link secret, which every call
    carries and every server checks; ``tls`` a :class:`~ipu_node.links.tls.LinkTLS` or
    None (plain)."""

    name: str
    server: Callable[..., LinkServerLike]
    client: Callable[..., LinkClientLike]


_REGISTRY: dict[str, Transport] = {}


def register(transport: Transport) -> Transport:
    """Add ``transport`` under its name; a name taken or parts that cannot be called are
    refused (a transport module is wrong, not the user)."""
    if not isinstance(transport, Transport):
        raise TypeError(f"register a Transport, not {type(transport).__name__}")
    if transport.name in _REGISTRY:
        raise ValueError(f"a link transport named {transport.name!r} is registered already")
    if not (callable(transport.server) and callable(transport.client)):
        raise TypeError(f"link transport {transport.name!r}: server and client must be "
                        "callables that build them")
    _REGISTRY[transport.name] = transport
    return transport


def transport(name: str = DEFAULT_TRANSPORT) -> Transport:
    """The transport called ``name``, or a UserError listing the known ones."""
    _MODULES.load()
    if name not in _REGISTRY:
        raise UserError(f"no link transport named {name!r}: use one of "
                        f"{', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name]

