"""Link transports, registered by name: how a device's link server listens and how its
clients push chunks to peers.

A transport is one module of :mod:`ipu_node.links.transports` that registers a server and
clients with the shapes below (:func:`register`); the checked :data:`TRANSPORTS` registry
imports every module there on first use, and devices pick one by name
(:class:`~ipu_node.links.endpoint.LinkEndpoint`). The one built in is ``grpc-h2``: gRPC's
wire protocol spoken directly (:mod:`ipu_node.links.transports.grpc_h2`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from cluster.errors import UserError
from cluster.model.plugins import Registry
from ipu_node.links.mailbox import Deliver, Mailbox
from ipu_node.links.shared_link import Relay

DEFAULT_TRANSPORT = "grpc-h2"
Receiver = Mailbox | Relay | Deliver  # a mailbox, a relaying host, or a function of a stream


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
    carries and every server checks; ``tls`` a :class:`~ipu_node.links.link_tls.LinkTLS` or
    None (plain)."""

    name: str
    server: Callable[..., LinkServerLike]
    client: Callable[..., LinkClientLike]


def _check(transport: Transport) -> None:
    """A TypeError unless ``transport``'s server and client can be called."""
    if not (callable(transport.server) and callable(transport.client)):
        raise TypeError(f"link transport {transport.name!r}: server and client must be "
                        "callables that build them")


TRANSPORTS: Registry[Transport] = Registry("link transport", "ipu_node.links.transports",
                                           check=_check)


def register(transport: Transport, module: str = "") -> Transport:
    """Add ``transport`` under its name, registered by ``module`` (a transport module passes
    its ``__name__``, which the registry's checks read); what is given is checked: a
    :class:`Transport`, a name not taken, parts that can be called (a transport module is
    wrong, not the user)."""
    if not isinstance(transport, Transport):
        raise TypeError(f"register a Transport, not {type(transport).__name__}")
    return TRANSPORTS.register(transport.name, transport, module or "a caller without a name")


def transport(name: str = DEFAULT_TRANSPORT) -> Transport:
    """The transport called ``name``, or a UserError listing the known ones."""
    if name not in TRANSPORTS:
        raise UserError(f"no link transport named {name!r}: use one of "
                        f"{', '.join(sorted(TRANSPORTS))}")
    return TRANSPORTS[name]
