"""Generated gRPC stubs for the wire contracts in ``proto/`` (do not edit by hand).

Regenerate with ``python -m grpc_tools.protoc -Iproto --python_out=. --grpc_python_out=.
--pyi_out=. proto/ipupod_proto/*.proto`` (``pip install -e '.[dev]'`` brings grpcio-tools).
The package name cannot collide with ``proto-plus``'s top-level ``proto`` module.
"""
