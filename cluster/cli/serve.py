"""``ipupod serve``: launch the emulated POD and serve its control API until SIGTERM or
Ctrl-C (:mod:`cluster.service.control_server`); clients find it through ``--host/--port`` or
``IPUOF_VIPU_API_HOST`` / ``IPUOF_VIPU_API_PORT`` and read the token it writes."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Any, TextIO

import click

from cluster.cli.output import ray_chatter_to_stderr
from cluster.cli.paths import CheckedPath
from cluster.cli.placement_flags import Placement, launch_pod, placement_options
from cluster.cli.serve_share import share_from, share_options
from cluster.service.client import DEFAULT_PORT
from cluster.service.control_server import start_server
from cluster.service.ports import check_port_free
from cluster.service.sharing import ShareOptions
from cluster.service.token_auth import default_token_file, new_token, save_token
from ipu_node.links.link_tls import LinkTLS
from ipu_node.pod import EmulatedPod


@click.command("serve")
@click.option("--topology", "topology_spec", default="dss8440x2", show_default=True)
@click.option("--ray-address", default=None)
@placement_options
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (loopback unless you say otherwise).")
@click.option("--port", type=click.IntRange(0, 65535), default=DEFAULT_PORT, show_default=True,
              help="Port to listen on (0: any free port, printed).")
@click.option("--token-file", type=CheckedPath(dir_okay=False, path_type=Path), default=None,
              help="Where to write the access token (default ~/.ipupod/token-PORT).")
@click.option("--metrics-port", type=click.IntRange(-1, 65535), default=9464, show_default=True,
              help="Prometheus endpoint port (on --host); -1 to switch it off.")
@click.option("--link-tls", "link_tls_dir", type=CheckedPath(path_type=Path), default=None,
              help="TLS on every device link: a folder with cert.pem, key.pem and ca.pem "
                   "(readable wherever the devices run; docs/links.md).")
@share_options
def serve_command(topology_spec: str, ray_address: str | None, placement: Placement,
                  host: str, port: int,
                  token_file: Path | None, metrics_port: int,
                  link_tls_dir: Path | None, **sharing: Any) -> None:
    """Launch the emulated POD and serve its control API until SIGTERM or Ctrl-C."""
    link_tls = link_tls_from(link_tls_dir) if link_tls_dir is not None else None
    check_port_free(host, port, "--port")
    if metrics_port > 0:
        check_port_free(host, metrics_port, "--metrics-port")
    share = share_from(host, port, token_file, topology_spec, **sharing)
    with ray_chatter_to_stderr() as out:
        pod = launch_pod(topology_spec, ray_address, placement, link_tls=link_tls)
        try:
            _serve(pod, token_file, host, port, None if metrics_port < 0 else metrics_port, out,
                   share)
        finally:
            pod.shutdown(stop_ray=True)
        print("ipupod serve: stopped", file=out, flush=True)


def _serve(pod: EmulatedPod, token_file: Path | None, host: str, port: int,
           metrics_port: int | None, out: TextIO, share: ShareOptions | None = None) -> None:
    """Serve with a fresh token, written (atomically) once both ports are bound; say where
    (on ``out``), and wait for SIGTERM or SIGINT; then stop serving."""
    token = new_token()
    server, bound, metrics = start_server(pod, token, host, port, metrics_port, share)
    try:
        path = token_file or default_token_file(bound)
        save_token(path, token, private=token_file is None)
        server.shared.open_audit(share.audit_log if share and share.audit_log
                                 else path.parent / f"audit-{bound}.jsonl")
    except BaseException:
        _stop(server, metrics)
        raise
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    restored = server.shared.restored
    print(f"ipupod serve: {pod.topology.name} ({pod.topology.ipu_count} IPUs, "
          f"{len(pod.specs)} devices) on {host}:{bound}; token in {path}"
          + (f"; {restored.line()}" if restored else "")
          + (f"; metrics on http://{host}:{metrics}/metrics" if metrics else ""),
          file=out, flush=True)
    stop.wait()
    _stop(server, metrics)


def _stop(server: Any, metrics: int | None) -> None:
    """Stop serving: the gRPC server (2 s of grace), then the metrics endpoint."""
    server.stop(grace=2).wait(5)
    if metrics:
        server.metrics_server.shutdown()


def link_tls_from(folder: Path) -> LinkTLS:
    """The devices' TLS from a folder holding ``cert.pem``, ``key.pem`` and ``ca.pem``
    (a UserError naming what is missing)."""
    return LinkTLS(str(folder / "cert.pem"), str(folder / "key.pem"), str(folder / "ca.pem"))
