"""The control service of an emulated POD: the gRPC server (partitions, devices, links,
benchmarks, faults), its bearer-token auth, a client, partition health, Prometheus metrics
and a PopART-style DeviceManager; a POD shared by several users (users and roles, rate
limits, TLS, the audit log, state kept across restarts)."""
