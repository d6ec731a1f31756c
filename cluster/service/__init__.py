"""The control service of an emulated POD: the gRPC server (partitions, devices, links,
benchmarks, faults), its bearer-token auth, a client, partition health, Prometheus metrics
and a PopART-style DeviceManager."""
