"""Links beyond loopback can speak TLS (stdlib ssl, ALPN h2), both ends checking the
other's certificate against the POD's CA; a plaintext peer gets nowhere."""

import subprocess

import numpy as np
import pytest

from ipu_node.device_errors import DeviceError
from ipu_node.links.channel import LinkClient, LinkServer, Transfer, encode_transfers
from ipu_node.links.link_tls import LinkTLS
from ipu_node.links.mailbox import Mailbox, TransferKey
from ipu_node.pod import EmulatedPod


@pytest.fixture(scope="module")
def tls(tmp_path_factory) -> LinkTLS:
    """A CA and a certificate for localhost and 127.0.0.1 it signed (openssl, EC keys)."""
    folder = tmp_path_factory.mktemp("tls")

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "1",
            "-subj", "/CN=ipupod test CA")
    openssl("req", *ec, "-keyout", "device.key", "-out", "device.csr", "-subj", "/CN=localhost")
    (folder / "names.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", "device.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "device.pem", "-days", "1", "-extfile", "names.ext")
    return LinkTLS(str(folder / "device.pem"), str(folder / "device.key"),
                   str(folder / "ca.pem"))


def test_links_speak_tls_with_alpn_h2_when_asked(tls):
    mailbox = Mailbox()
    server = LinkServer("secure", mailbox, tls=tls)
    client = LinkClient("secure", server.start(), tls=tls)
    try:
        assert server.link_address == server.address  # TLS: no Unix socket
        assert client.ping() == "secure"
        payload = np.arange(300_000, dtype=np.float32)
        assert client.push(encode_transfers("t", 0, 0, [Transfer(0, 0, 1, payload)]),
                           10) == payload.nbytes
        (_, data), = mailbox.take(TransferKey("t", 0, 0, 0), 5, "IPU 0")
        np.testing.assert_array_equal(np.frombuffer(data, np.float32), payload)
    finally:
        client.close()
        server.stop()


def test_a_plaintext_client_gets_nowhere_on_a_tls_link(tls):
    mailbox = Mailbox()
    server = LinkServer("secure", mailbox, tls=tls)
    client = LinkClient("secure", server.start())
    try:
        with pytest.raises(DeviceError, match="link to secure"):
            client.push(encode_transfers("t", 0, 0, [Transfer(0, 0, 1, np.ones(10))]), 5)
        assert mailbox.bytes_received == 0
    finally:
        client.close()
        server.stop()


def test_tls_files_that_are_missing_are_a_clear_error(tmp_path):
    from cluster.errors import UserError

    with pytest.raises(UserError, match="cert_file .* is not a file"):
        LinkTLS(str(tmp_path / "none.pem"), str(tmp_path / "none.key"), str(tmp_path / "ca"))


def test_a_pod_launched_with_tls_allreduces_over_tls_links(ray_session, tls):
    with EmulatedPod.launch("dss8440", link_tls=tls) as pod:
        addresses = [info["link_address"] for info in pod.infos]
        assert all(not a.startswith("unix:") for a in addresses)  # TCP with TLS, no socket
        arrays = [np.full(1 << 12, i, dtype=np.float32) for i in range(16)]
        result = pod.collective("allreduce", arrays, algorithm="clockwise_ring")
        for got in result.results:
            np.testing.assert_array_equal(got, np.full(1 << 12, sum(range(16)), np.float32))
