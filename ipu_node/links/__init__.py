"""The link transport between emulated devices: gRPC over HTTP/2 spoken directly, an
HTTP/2 state machine without I/O (:mod:`~ipu_node.links.protocol`) driven by a socket
loop (:mod:`~ipu_node.links.h2`); the chunk wire format (:mod:`~ipu_node.links.wire`);
where arriving chunks wait for their collective (:mod:`~ipu_node.links.mailbox`); and the
link server and clients a device holds (:mod:`~ipu_node.links.link_server`,
:mod:`~ipu_node.links.channel`), registered as a transport
(:mod:`~ipu_node.links.transport`, one module each in
:mod:`~ipu_node.links.transports`)."""
