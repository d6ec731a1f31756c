"""The runtime: emulated hardware on Ray (``docs/architecture.md``).

- :mod:`ipu_node.pod`: a launched POD, composed of a :mod:`~ipu_node.roster` of its
  devices, a :mod:`~ipu_node.faults` injector and :mod:`~ipu_node.device_health` checks, placed
  by :mod:`ipu_node.launcher`;
- :mod:`ipu_node.card`: a card (C2) or machine (IPU-M2000) actor, a thin Ray facade over a
  :mod:`~ipu_node.store` of tensors, :mod:`~ipu_node.counters` and a
  :mod:`~ipu_node.runner` of schedules; :mod:`ipu_node.host`: a DSS 8440 server's host,
  which owns PCIe and InfiniBand and relays between servers (:mod:`ipu_node.ownership`);
  both share :mod:`ipu_node.control`;
- :mod:`ipu_node.executor`: a collective's schedule run on the devices;
  :mod:`ipu_node.bench`: a benchmark, phantom or real (:mod:`ipu_node.real_bench`:
  real-mode benchmark rows; :mod:`ipu_node.bench_fit`: whether a real-mode sweep fits);
- :mod:`ipu_node.calls`: every wait on an actor, with a deadline, naming the device;
- :mod:`ipu_node.links`: the link transport between devices.
"""
