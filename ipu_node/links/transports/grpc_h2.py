"""``grpc-h2``, the default link transport: gRPC's wire protocol spoken directly (the
link server of :mod:`ipu_node.links.link_server`, the clients of :mod:`ipu_node.links.channel`)."""

from __future__ import annotations

from ipu_node.links.channel import LinkClient
from ipu_node.links.link_server import LinkServer
from ipu_node.links.transport import DEFAULT_TRANSPORT, Transport, register

register(Transport(DEFAULT_TRANSPORT, LinkServer, LinkClient), __name__)
