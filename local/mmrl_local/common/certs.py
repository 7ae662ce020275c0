"""Generate the PKI a throwaway control plane needs: a CA, the apiserver's serving certificate, client
certificates (the admin in ``system:masters`` and one per component) and the service-account signing key.
Everything is written as PEM files into one directory owned by the control plane run.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = dt.timedelta(days=7)


def _key() -> ec.EllipticCurvePrivateKey:
    # EC keys are generated in microseconds; RSA-2048 takes ~100 ms each on a small machine.
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attrs)


@dataclass(frozen=True)
class Pki:
    """File paths of the generated PEMs."""

    dir: Path
    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    sa_key: Path
    sa_pub: Path

    def client(self, user: str) -> tuple[Path, Path]:
        return self.dir / f"{user}.crt", self.dir / f"{user}.key"


def _sign(ca_cert, ca_key, subject: x509.Name, key, *, server: bool, sans=None) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(ca_key, hashes.SHA256())


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    path.chmod(0o600)
    return path


def _ca(common_name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    ca_key = _key()
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    subject = _name(common_name)
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    return ca_cert, ca_key


@dataclass(frozen=True)
class ServingPems:
    ca: bytes
    cert: bytes
    key: bytes


def service_serving(ca_name: str, dns_names: list[str]) -> ServingPems:
    """A CA of its own and a serving certificate it signed for ``dns_names``, in memory: what cert-manager's
    self-signed issuer gives a webhook Service (the CA goes into caBundle, the pair into the Secret)."""
    ca_cert, ca_key = _ca(ca_name)
    key = _key()
    cert = _sign(ca_cert, ca_key, _name(dns_names[0]), key, server=True, sans=[x509.DNSName(n) for n in dns_names])
    pem = serialization.Encoding.PEM
    return ServingPems(ca_cert.public_bytes(pem), cert.public_bytes(pem), _key_pem(key))


def generate(directory: Path, clients: dict[str, str | None], server_ips: tuple[str, ...] = ()) -> Pki:
    """Create the CA, serving cert, SA key pair and one client cert per ``{user: organization}``. The serving cert
    is valid for loopback, the `kubernetes` Service and ``server_ips`` (where pods reach the apiserver)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_cert, ca_key = _ca("mmrl-local-ca")
    pem = serialization.Encoding.PEM
    serving_key = _key()
    sans = [
        x509.DNSName("localhost"),
        x509.DNSName("kubernetes"),
        x509.DNSName("kubernetes.default.svc"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.IPAddress(ipaddress.ip_address("10.0.0.1")),
        *(x509.IPAddress(ipaddress.ip_address(a)) for a in server_ips),
    ]
    serving = _sign(ca_cert, ca_key, _name("kube-apiserver"), serving_key, server=True, sans=sans)
    # The service-account key must be RSA: the token signer defaults to RS256.
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pki = Pki(
        dir=directory,
        ca_cert=_write(directory / "ca.crt", ca_cert.public_bytes(pem)),
        ca_key=_write(directory / "ca.key", _key_pem(ca_key)),
        serving_cert=_write(directory / "apiserver.crt", serving.public_bytes(pem)),
        serving_key=_write(directory / "apiserver.key", _key_pem(serving_key)),
        sa_key=_write(directory / "sa.key", _key_pem(sa_key)),
        sa_pub=_write(
            directory / "sa.pub",
            sa_key.public_key().public_bytes(pem, serialization.PublicFormat.SubjectPublicKeyInfo),
        ),
    )
    for user, organization in clients.items():
        key = _key()
        cert = _sign(ca_cert, ca_key, _name(user, organization), key, server=False)
        crt_path, key_path = pki.client(user)
        _write(crt_path, cert.public_bytes(pem))
        _write(key_path, _key_pem(key))
    return pki


def self_signed(directory: Path, name: str, ips: tuple[str, ...] = ("127.0.0.1",)) -> tuple[Path, Path]:
    """A self-signed serving certificate for ``ips`` (the local kubelet's log endpoint: the apiserver does not verify
    kubelet certificates unless given --kubelet-certificate-authority). Returns (cert, key) paths."""
    directory.mkdir(parents=True, exist_ok=True)
    key = _key()
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(name))
        .issuer_name(_name(name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(a)) for a in ips]), False)
        .sign(key, hashes.SHA256())
    )
    return (
        _write(directory / f"{name}.crt", cert.public_bytes(serialization.Encoding.PEM)),
        _write(directory / f"{name}.key", _key_pem(key)),
    )
