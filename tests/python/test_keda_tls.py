"""KEDA with `enableTLS`: `serve` as a process with a server certificate and a client CA (given
through the environment form of the flags), and the independent KEDA stand-in (grpcio, its own
TLS stack) presenting a client certificate, as KEDA does with a TriggerAuthentication's
`caCert`, `tlsClientCert` and `tlsClientKey`. Certificates come from a throwaway test CA."""

import datetime

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from keda_client import Keda
from keda_fleet import Pod, pick_shared_port
from scaler_process import NAMESPACE, scaler_process

# The name KEDA checks: the host of the ScaledObject's scalerAddress.
SERVER_NAME = "vllm-keda-scaler.keda.svc"


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


class Authority:
    """A certificate authority that issues server and client certificates (PEM bytes)."""

    def __init__(self, common_name: str):
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        self.name = _name(common_name)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(self.name).issuer_name(self.name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .sign(self.key, hashes.SHA256())
        )

    def pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def issue(self, common_name: str, dns_names, usage) -> tuple:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name)).issuer_name(self.name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if dns_names:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.DNSName(n) for n in dns_names]), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        key_pem = key.private_bytes(serialization.Encoding.PEM,
                                    serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
        return cert.public_bytes(serialization.Encoding.PEM), key_pem


@pytest.fixture
def pki(tmp_path):
    ca = Authority("vllm-keda-scaler test CA")
    server_cert, server_key = ca.issue("vllm-keda-scaler", [SERVER_NAME],
                                       ExtendedKeyUsageOID.SERVER_AUTH)
    files = {"ca.crt": ca.pem(), "tls.crt": server_cert, "tls.key": server_key}
    for name, content in files.items():
        (tmp_path / name).write_bytes(content)
    return ca, tmp_path


@pytest.fixture
def tls_scaler(binary, tmp_path, env_without_proxy, pki):
    _, pki_dir = pki
    env = {
        "VLLM_KEDA_SCALER_TLS_CERT_FILE": str(pki_dir / "tls.crt"),
        "VLLM_KEDA_SCALER_TLS_KEY_FILE": str(pki_dir / "tls.key"),
        "VLLM_KEDA_SCALER_TLS_CLIENT_CA_FILE": str(pki_dir / "ca.crt"),
    }
    with scaler_process(binary, tmp_path, env_without_proxy, extra_env=env) as s:
        yield s


def keda(stubs, scaler, name, url, credentials) -> Keda:
    metadata = {"scalerAddress": f"{SERVER_NAME}:9090", "enableTLS": "true",
                "endpoints": url, "scrapeIntervalSeconds": "0.5"}
    return Keda(stubs, scaler.grpc_addr, NAMESPACE, name, metadata, 1, 5,
                credentials=credentials, server_name=SERVER_NAME)


def test_keda_with_a_client_certificate_gets_answers_over_mutual_tls(tls_scaler, stubs, pki):
    ca, _ = pki
    port = pick_shared_port(1)
    pod = Pod("127.0.0.2", port)
    url = f"http://127.0.0.2:{port}/metrics"
    try:
        pod.set_state(waiting=12, running=4, kv=0.3)
        client_cert, client_key = ca.issue("keda-operator", [], ExtendedKeyUsageOID.CLIENT_AUTH)
        creds = grpc.ssl_channel_credentials(root_certificates=ca.pem(),
                                             private_key=client_key,
                                             certificate_chain=client_cert)
        k = keda(stubs, tls_scaler, "chat-tls", url, creds)
        try:
            p = k.poll(1)
            assert p.metric_name == "vllm-desired-replicas"
            assert p.active, p
            # One pod, 12 waiting < 25 per replica, and no breach held for the 30 s
            # stabilization: the scaler asks for the one replica that runs.
            assert p.value == 1 and p.desired == 1, p
        finally:
            k.close()
        assert "mutual_tls=true" in tls_scaler.log(), tls_scaler.log()
    finally:
        pod.stop()


def test_clients_without_a_trusted_certificate_are_refused(tls_scaler, stubs, pki):
    ca, _ = pki
    url = "http://127.0.0.2:9/metrics"
    stranger = Authority("someone else's CA")
    cert, key = stranger.issue("intruder", [], ExtendedKeyUsageOID.CLIENT_AUTH)
    attempts = {
        "no client certificate": grpc.ssl_channel_credentials(root_certificates=ca.pem()),
        "a client certificate from another CA": grpc.ssl_channel_credentials(
            root_certificates=ca.pem(), private_key=key, certificate_chain=cert),
    }
    for what, creds in attempts.items():
        k = keda(stubs, tls_scaler, "refused", url, creds)
        try:
            with pytest.raises(grpc.RpcError) as err:
                k.poll(1)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE, (what, err.value)
        finally:
            k.close()
    # KEDA without enableTLS (plaintext) gets no answer either.
    k = keda(stubs, tls_scaler, "refused", url, None)
    try:
        with pytest.raises(grpc.RpcError):
            k.poll(1)
    finally:
        k.close()
    # None of them reached the service: no ScaledObject was registered.
    assert "refused" not in tls_scaler.get("/debug/scaledobjects")
