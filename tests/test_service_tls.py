"""TLS on the control API, with certificates made here (openssl): a client checking the
right CA gets in; a wrong CA, plain text, and (with mutual TLS) no client certificate get
nowhere, and are told why in one line, without a line of gRPC's own log; files that are not
what their option says are refused when given; a service beyond loopback without TLS is
refused unless --insecure."""

import os
import subprocess
import sys

import grpc
import pytest

from cluster.errors import UserError
from cluster.service.client import Client, ServiceError
from cluster.service.control_server import start_server
from cluster.service.control_tls import ClientTLS, ServiceTLS, check_exposure, client_channel
from cluster.service.sharing import ShareOptions
from cluster.service.token_auth import write_token
from ipu_node.pod import EmulatedPod
from ipupod_proto import control_pb2, control_pb2_grpc

EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    """Two CAs; by the first, a server certificate (localhost, 127.0.0.1), the same expired,
    one for another host and a client's."""
    folder = tmp_path_factory.mktemp("service-tls")

    def openssl(*args):
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)

    for ca in ("ca", "other-ca"):
        openssl("req", "-x509", *EC, "-keyout", f"{ca}.key", "-out", f"{ca}.pem", "-days", "1",
                "-subj", f"/CN=ipupod test {ca}")
    (folder / "names.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    (folder / "elsewhere.ext").write_text("subjectAltName=DNS:pod.example.org\n")
    for who, names in (("server", "names"), ("client", "names"), ("elsewhere", "elsewhere")):
        openssl("req", *EC, "-keyout", f"{who}.key", "-out", f"{who}.csr", "-subj",
                f"/CN={who}")
        openssl("x509", "-req", "-in", f"{who}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", f"{who}.pem", "-days", "1", "-extfile",
                f"{names}.ext")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-out", "expired.pem", "-days", "-1", "-extfile", "names.ext")  # ended yesterday
    return folder


@pytest.fixture(scope="module")
def servers(ray_session, certs):
    """A TLS service, a mutual-TLS one, one in plain text, one whose certificate names
    another host and one whose certificate has expired, on one POD."""
    pod = EmulatedPod.launch("pod16")
    token = write_token(certs / "token")
    kinds = {"tls": ServiceTLS(certs / "server.pem", certs / "server.key"),
             "mutual": ServiceTLS(certs / "server.pem", certs / "server.key",
                                  certs / "ca.pem"),
             "plain": None,
             "elsewhere": ServiceTLS(certs / "elsewhere.pem", certs / "elsewhere.key"),
             "expired": ServiceTLS(certs / "expired.pem", certs / "server.key")}
    started = {kind: start_server(pod, token, "127.0.0.1", 0, share=ShareOptions(tls=tls))
               for kind, tls in kinds.items()}
    yield {"token": token, **{kind: bound for kind, (_, bound, _) in started.items()}}
    for server, _, _ in started.values():
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
    channel = client_channel(target, ClientTLS.given(str(certs / "ca.pem")))
    assert status(channel, servers["token"]) == grpc.StatusCode.OK


def test_a_wrong_ca_or_plain_text_gets_nowhere(servers, certs):
    target = f"localhost:{servers['tls']}"
    channel = client_channel(target, ClientTLS.given(str(certs / "other-ca.pem")))
    assert status(channel, servers["token"]) == grpc.StatusCode.UNAVAILABLE
    assert status(grpc.insecure_channel(target), servers["token"]) \
        == grpc.StatusCode.UNAVAILABLE


def test_mutual_tls_wants_a_client_certificate_the_ca_signed(servers, certs):
    target = f"localhost:{servers['mutual']}"
    ca = str(certs / "ca.pem")
    assert status(client_channel(target, ClientTLS.given(ca)), servers["token"]) \
        != grpc.StatusCode.OK
    assert status(client_channel(target, ClientTLS.given(ca, str(certs / "client.pem"),
                                                         str(certs / "client.key"))),
                  servers["token"]) == grpc.StatusCode.OK


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


def ipupod_alone(*args):
    """``ipupod ARGS`` in a process of its own, as a user runs it: gRPC's C core writes its
    log to the standard error of the process, which a test sees only from outside it."""
    env = {name: value for name, value in os.environ.items()
           if name != "GRPC_VERBOSITY" and not name.startswith("IPUPOD_TLS_")}
    return subprocess.run([sys.executable, "-m", "cluster.cli.main", *args],
                          capture_output=True, text=True, env=env, timeout=120)


def one_error_line(run):
    """The one line a refusal prints: exit status 2, nothing else on stderr or stdout."""
    lines = run.stderr.splitlines()
    assert run.returncode == 2 and len(lines) == 1 and not run.stdout, run.stderr
    assert lines[0].startswith("error: "), run.stderr
    return lines[0]


@pytest.mark.parametrize("service, ca, words", [
    ("tls", None, ["speaks TLS", "plain text", "give --tls-ca"]),
    ("tls", "other-ca.pem", ["not signed by the CA in --tls-ca", "other-ca.pem",
                             "give --tls-ca"]),
    ("mutual", "ca.pem", ["wants a client certificate", "IPUPOD_TLS_CERT", "IPUPOD_TLS_KEY"]),
    ("tls", "server.key", ["--tls-ca", "server.key", "holds a private key", "ca.pem"]),
], ids=["plain-text-client", "another-ca", "no-client-certificate", "key-as-ca"])
def test_a_tls_mistake_is_named_in_one_line_without_grpc_log_lines(servers, certs, service, ca,
                                                                   words):
    tls_ca = ["--tls-ca", str(certs / ca)] if ca else []
    line = one_error_line(ipupod_alone("status", "--port", str(servers[service]),
                                       "--token-file", str(certs / "token"), *tls_ca))
    assert all(word in line for word in words), line
    assert "cannot reach" not in line


def test_a_tls_client_at_a_plain_text_service_is_told_to_leave_out_the_ca(servers, certs):
    client = Client("127.0.0.1", servers["plain"], certs / "token",
                    tls_ca=str(certs / "ca.pem"), deadline_seconds=10)
    with pytest.raises(ServiceError, match="does not speak TLS: leave out --tls-ca"):
        client.call("GetStatus", control_pb2.StatusRequest())


def test_a_certificate_for_another_name_says_which_name_was_used(servers, certs):
    client = Client("127.0.0.1", servers["elsewhere"], certs / "token",
                    tls_ca=str(certs / "ca.pem"), deadline_seconds=10)
    with pytest.raises(ServiceError, match="not valid for '127.0.0.1': connect with --host"):
        client.call("GetStatus", control_pb2.StatusRequest())


def test_an_expired_certificate_is_named_as_out_of_date(servers, certs):
    client = Client("127.0.0.1", servers["expired"], certs / "token",
                    tls_ca=str(certs / "ca.pem"), deadline_seconds=10)
    with pytest.raises(ServiceError, match="out of date .certificate has expired.: the "
                                           "service needs a new --tls-cert"):
        client.call("GetStatus", control_pb2.StatusRequest())


def test_a_client_certificate_the_service_does_not_trust_is_named(servers, certs,
                                                                   monkeypatch):
    monkeypatch.setenv("IPUPOD_TLS_CERT", str(certs / "other-ca.pem"))
    monkeypatch.setenv("IPUPOD_TLS_KEY", str(certs / "other-ca.key"))
    client = Client("127.0.0.1", servers["mutual"], certs / "token",
                    tls_ca=str(certs / "ca.pem"), deadline_seconds=10)
    with pytest.raises(ServiceError, match="refused the client certificate IPUPOD_TLS_CERT"):
        client.call("GetStatus", control_pb2.StatusRequest())


def test_nothing_listening_is_still_cannot_reach(certs):
    client = Client("127.0.0.1", 1, certs / "token", tls_ca=str(certs / "ca.pem"),
                    deadline_seconds=10)
    with pytest.raises(ServiceError, match="cannot reach the service at 127.0.0.1:1"):
        client.call("GetStatus", control_pb2.StatusRequest())


@pytest.mark.parametrize("cert, key, client_ca, words", [
    ("ca.pem", "server.key", None, ["--tls-key", "server.key", "is not the key of",
                                    "--tls-cert", "ca.pem"]),
    ("server.key", "server.key", None, ["--tls-cert", "holds a private key"]),
    ("server.pem", "server.pem", None, ["--tls-key", "holds no private key"]),
    ("server.pem", "server.key", "ca.key", ["--tls-client-ca", "holds a private key"]),
])
def test_files_that_are_not_what_their_option_says_are_refused(certs, cert, key, client_ca,
                                                               words):
    tls = ServiceTLS(certs / cert, certs / key, certs / client_ca if client_ca else None)
    with pytest.raises(UserError) as refused:
        tls.server_credentials()
    assert all(word in str(refused.value) for word in words), refused.value


def test_a_client_certificate_with_another_key_is_refused_before_connecting(certs):
    with pytest.raises(UserError, match="IPUPOD_TLS_KEY .*server.key.* is not the key of "
                                        "IPUPOD_TLS_CERT"):
        ClientTLS.given(str(certs / "ca.pem"), str(certs / "client.pem"),
                        str(certs / "server.key"))


def test_a_client_certificate_without_a_ca_is_refused_not_left_unused(certs, monkeypatch):
    monkeypatch.delenv("IPUPOD_TLS_CA", raising=False)
    monkeypatch.setenv("IPUPOD_TLS_CERT", str(certs / "client.pem"))
    monkeypatch.setenv("IPUPOD_TLS_KEY", str(certs / "client.key"))
    with pytest.raises(UserError, match="client certificate .* is for TLS: give --tls-ca"):
        ClientTLS.given()


def test_serve_refuses_a_certificate_and_key_that_do_not_match_before_ray_starts(certs,
                                                                                 tmp_path):
    line = one_error_line(ipupod_alone(
        "serve", "--topology", "pod16", "--port", "0", "--metrics-port", "-1",
        "--tls-cert", str(certs / "ca.pem"), "--tls-key", str(certs / "server.key"),
        "--token-file", str(tmp_path / "token")))
    assert f"--tls-key '{certs / 'server.key'}' is not the key of --tls-cert " \
           f"'{certs / 'ca.pem'}'" in line
    assert list(tmp_path.iterdir()) == []  # no token, state file or audit log
