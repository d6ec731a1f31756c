"""A device's end of its links: the server its peers push chunks to, a client per peer,
and the threads that push (several peers are fed at once in one superstep)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor

from ipu_node.links.link_limits import LinkLimits
from ipu_node.links.link_secret import local_secret
from ipu_node.links.link_tls import LinkTLS
from ipu_node.links.transport import DEFAULT_TRANSPORT, LinkClientLike, Receiver, transport


class LinkEndpoint:
    """Receives through ``receive`` (a mailbox, a relay, or a function that takes a stream
    of chunks), sends to peers by index; bound to ``host`` (loopback by default), speaking
    the link transport named ``transport_name``. Links carry and check ``secret`` (the
    POD's; this process's own if None), and with ``tls`` speak TLS both ways. With
    ``local_socket`` a server bound beyond loopback also listens on a Unix socket (for
    peers on its own machine). Without ``shared_memory`` chunks to and from peers on this
    machine go through the socket, never through shared-memory slots; with ``relaying`` the
    chunks it sends never wait for a slot: one that finds none free goes through the socket
    (a relaying host: a receiver must never wait on it for a slot while it waits on that
    receiver's other chunks)."""

    def __init__(self, name: str, receive: Receiver, host: str, push_threads: int,
                 transport_name: str = DEFAULT_TRANSPORT, secret: str | None = None,
                 tls: LinkTLS | None = None, local_socket: bool = False,
                 shared_memory: bool = True, relaying: bool = False) -> None:
        chosen = transport(transport_name)
        secret = secret or local_secret()
        limits = {} if shared_memory else {"limits": LinkLimits(shared_memory_slots=0)}
        sends = ({"limits": LinkLimits(shared_memory_waits=False)} if relaying and shared_memory
                 else limits)
        extra = {"local_socket": True} if local_socket else {}
        self.server = chosen.server(name, receive, host, secret, tls=tls, **extra, **limits)
        self.address = self.server.start()
        self.peers = PeerLinks(lambda peer, address: chosen.client(peer, address, secret,
                                                                   tls=tls, **sends))
        self._pool = ThreadPoolExecutor(max_workers=push_threads,
                                        thread_name_prefix=f"{name}-push")

    @property
    def link_address(self) -> str:
        return self.server.link_address

    def wire(self, names: list[str], addresses: list[str]) -> None:
        """Every device's name and link address (links to moved peers reopen)."""
        self.peers.wire(names, addresses)

    def name_of(self, peer: int) -> str:
        return self.peers.names[peer]

    def push(self, peer: int, messages: Iterable, deadline_seconds: float) -> Future:
        """Send ``messages`` to device ``peer`` on a pushing thread."""
        return self._pool.submit(self.peers.to(peer).push, messages, deadline_seconds)

    def close(self) -> None:
        self.peers.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.server.stop()


class PeerLinks:
    """The sending ends of one device's links: a client per peer device (built by
    ``client(peer name, address)``), opened on first use and reopened when the peer's
    address changes (it restarted). Thread-safe."""

    def __init__(self, client: Callable[[str, str], LinkClientLike]) -> None:
        self._client = client
        self._lock = threading.Lock()
        self._clients: dict[int, LinkClientLike] = {}
        self.names: list[str] = []
        self.addresses: list[str] = []

    def wire(self, names: list[str], addresses: list[str]) -> None:
        """Every device's name and link address; links to moved peers are closed."""
        with self._lock:
            for device, client in list(self._clients.items()):
                if addresses[device] != client.address:
                    client.close()
                    del self._clients[device]
            self.names, self.addresses = names, addresses

    def to(self, device: int) -> LinkClientLike:
        with self._lock:
            if device not in self._clients:
                self._clients[device] = self._client(self.names[device],
                                                     self.addresses[device])
            return self._clients[device]

    def close(self) -> None:
        with self._lock:
            for client in self._clients.values():
                client.close()
            self._clients.clear()
