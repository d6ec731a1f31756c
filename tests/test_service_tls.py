"""TLS on the control API, with certificates made here (openssl): a client checking the
right CA gets in; a wrong CA, plain text, and (with mutual TLS) no client certificate get
nowhere; a service beyond loopback without TLS is refused unless --insecure."""

import os
import subprocess
import sys

import grpc
import pytest

from cluster.errors import UserError
from cluster.service.client import Client, ServiceError
from cluster.service.control_server import start_server
from cluster.service.control_tls import ServiceTLS, check_exposure, client_channel
from cluster.service.sharing import ShareOptions
from cluster.service.token_auth import write_token
from ipu_node.pod import EmulatedPod
from ipupod_proto import control_pb2, control_pb2_grpc

EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    """Two CAs; a server certificate (localhost, 127.0.0.1) and a client's, by the first."""
    folder = tmp_path_factory.mktemp("service-tls")

    def openssl(*args):
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)

    for ca in ("ca", "other-ca"):
        openssl("req", "-x509", *EC, "-keyout", f"{ca}.key", "-out", f"{ca}.pem", "-days", "1",
                "-subj", f"/CN=ipupod test {ca}")
    (folder / "names.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    for who in ("server", "client"):
        openssl("req", *EC, "-keyout", f"{who}.key", "-out", f"{who}.csr", "-subj",
                f"/CN={who}")
        openssl("x509", "-req", "-in", f"{who}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", f"{who}.pem", "-days", "1", "-extfile", "names.ext")
    return folder


@pytest.fixture(scope="module")
def servers(ray_session, certs):
    """A TLS service and a mutual-TLS one, on one POD."""
    pod = EmulatedPod.launch("pod16")
    token = write_token(certs / "token")
    tls = ServiceTLS(certs / "server.pem", certs / "server.key")
    mutual = ServiceTLS(certs / "server.pem", certs / "server.key", certs / "ca.pem")
    started = [start_server(pod, token, "127.0.0.1", 0, share=ShareOptions(tls=t))
               for t in (tls, mutual)]
    yield {"token": token, "tls": started[0][1], "mutual": started[1][1]}
    for server, _, _ in started:
        server.stop(1).wait(3)
    pod.shutdown()


def status(channel, token):
    stub = control_pb2_grpc.ControlStub(channel)
    try:
        stub.GetStatus(control_pb2.StatusRequest(),
                       metadata=(("authorization", f"Bearer {token}"),), timeout=10)
    except grpc.RpcError as error:
        return error.code()
    finally:
        channel.close()
    return grpc.StatusCode.OK


def test_a_client_that_checks_the_right_ca_gets_in(servers, certs):
    target = f"localhost:{servers['tls']}"
    assert status(client_channel(target, str(certs / "ca.pem")), servers["token"]) \
        == grpc.StatusCode.OK


def test_a_wrong_ca_or_plain_text_gets_nowhere(servers, certs):
    target = f"localhost:{servers['tls']}"
    assert status(client_channel(target, str(certs / "other-ca.pem")), servers["token"]) \
        == grpc.StatusCode.UNAVAILABLE
    assert status(grpc.insecure_channel(target), servers["token"]) \
        == grpc.StatusCode.UNAVAILABLE


def test_mutual_tls_wants_a_client_certificate_the_ca_signed(servers, certs):
    target = f"localhost:{servers['mutual']}"
    ca = str(certs / "ca.pem")
    assert status(client_channel(target, ca), servers["token"]) != grpc.StatusCode.OK
    assert status(client_channel(target, ca, str(certs / "client.pem"),
                                 str(certs / "client.key")), servers["token"]) \
        == grpc.StatusCode.OK


def test_the_client_and_the_cli_take_a_ca(servers, certs):
    client = Client("localhost", servers["tls"], certs / "token", tls_ca=str(certs / "ca.pem"))
    assert client.call("GetStatus", control_pb2.StatusRequest()).ipus == 16
    with pytest.raises(ServiceError):
        Client("localhost", servers["tls"], certs / "token", deadline_seconds=10).call(
            "GetStatus", control_pb2.StatusRequest())
    env = {**os.environ, "IPUPOD_TOKEN_FILE": str(certs / "token")}
    run = subprocess.run([sys.executable, "-m", "cluster.cli.main", "status", "--host",
                          "localhost", "--port", str(servers["tls"]), "--tls-ca",
                          str(certs / "ca.pem")], capture_output=True, text=True, env=env,
                         timeout=120)
    assert run.returncode == 0, run.stderr


def test_serving_beyond_loopback_in_clear_text_is_refused_unless_insecure(certs):
    for host in ("127.0.0.1", "localhost", "::1"):
        check_exposure(host, None, insecure=False)
    with pytest.raises(UserError, match="--insecure"):
        check_exposure("0.0.0.0", None, insecure=False)
    check_exposure("0.0.0.0", None, insecure=True)
    check_exposure("0.0.0.0", ServiceTLS(certs / "server.pem", certs / "server.key"), False)
    run = subprocess.run([sys.executable, "-m", "cluster.cli.main", "serve", "--host",
                          "0.0.0.0", "--port", "0"], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 2 and run.stderr.startswith("error:") and "TLS" in run.stderr
    run = subprocess.run([sys.executable, "-m", "cluster.cli.main", "serve", "--tls-cert",
                          str(certs / "server.pem")], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 2 and "--tls-key" in run.stderr
