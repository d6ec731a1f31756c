"""The link transports: one module each, which registers its :class:`Transport` with
:func:`ipu_node.links.transport.register` when imported, naming itself (``__name__``; the
registry imports every module here on first use, and ``tests/test_registries.py`` checks
each registered one)."""
