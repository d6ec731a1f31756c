"""A device's end of its links: the server its peers push chunks to, a client per peer,
and the threads that push (several peers are fed at once in one superstep)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor

from ipu_node.links.channel import LinkServer, PeerLinks
from ipu_node.links.mailbox import Mailbox


class LinkEndpoint:
    """Receives through ``receive`` (a mailbox, or a function that takes a stream of
    chunks), sends to peers by index; bound to ``host`` (loopback by default)."""

    def __init__(self, name: str, receive: Mailbox | Callable[[Iterable], tuple[int, int]],
                 host: str, push_threads: int) -> None:
        self.server = LinkServer(name, receive, host)
        self.address = self.server.start()
        self.peers = PeerLinks()
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

    def push(self, peer: int, messages: Iterable, deadline_s: float) -> Future:
        """Send ``messages`` to device ``peer`` on a pushing thread."""
        return self._pool.submit(self.peers.to(peer).push, messages, deadline_s)

    def close(self) -> None:
        self.peers.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.server.stop()
