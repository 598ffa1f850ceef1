"""Certificates and keys for a TLS deployment with SuperNode authentication.

Writes, under one directory (private files are mode 0600)::

    ca.pem, ca.key                 a self-signed CA (ECDSA P-384) that signs the server certificate
    server.pem, server.key         the SuperLink's certificate, with a SAN for every host given
    nodes/NAME, nodes/NAME.pub     one ECDSA P-384 key pair per SuperNode, OpenSSH format (what
                                   ``flwr supernode register`` and ``--auth-supernode-private-key``
                                   read)

Run as ``python -m simulations.deploy.certs --out DIR --host 127.0.0.1 --node site0 ...``.
The CA key is only needed to sign more server certificates; keep it off the SuperLink host.
"""

from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["Credentials", "make_ca", "make_credentials", "make_node_key", "make_server_cert"]

_CURVE = ec.SECP384R1()


@dataclass(frozen=True)
class Credentials:
    """Paths of what :func:`make_credentials` wrote."""

    directory: Path
    ca_cert: Path
    server_cert: Path
    server_key: Path
    node_keys: dict[str, tuple[Path, Path]]  # name -> (private, public)


def _write_private(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _san(hosts: Iterable[str]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for h in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            names.append(x509.DNSName(h))
    return x509.SubjectAlternativeName(names)


def make_ca(
    directory: Path, *, name: str = "coded-fl deployment CA", days: int = 365
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A self-signed CA; writes ``ca.pem`` and ``ca.key``."""
    key = ec.generate_private_key(_CURVE)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA384())
    )
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "ca.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_private(directory / "ca.key", _pem_key(key))
    return cert, key


def make_server_cert(
    directory: Path,
    ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey],
    hosts: Sequence[str],
    *,
    days: int = 365,
) -> tuple[Path, Path]:
    """The SuperLink's certificate for ``hosts`` (IP addresses or DNS names, all in the SAN)."""
    if not hosts:
        raise ValueError("hosts must name at least one address the SuperNodes connect to")
    ca_cert, ca_key = ca
    key = ec.generate_private_key(_CURVE)
    now = dt.datetime.now(dt.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(_san(hosts), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA384())
    )
    cert_path, key_path = directory / "server.pem", directory / "server.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_private(key_path, _pem_key(key))
    return cert_path, key_path


def make_node_key(directory: Path, name: str) -> tuple[Path, Path]:
    """An ECDSA P-384 key pair in OpenSSH format: ``directory/name`` and ``directory/name.pub``."""
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"node name {name!r} must be a plain file name")
    key = ec.generate_private_key(_CURVE)
    priv = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    pub = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    priv_path, pub_path = directory / name, directory / f"{name}.pub"
    _write_private(priv_path, priv)
    pub_path.write_bytes(pub + f" {name}\n".encode())
    return priv_path, pub_path


def make_credentials(
    directory: str | os.PathLike[str],
    *,
    hosts: Sequence[str] = ("127.0.0.1", "localhost"),
    nodes: Sequence[str] = (),
    days: int = 365,
) -> Credentials:
    """CA, server certificate for ``hosts`` and one authentication key pair per node name."""
    d = Path(directory)
    ca = make_ca(d, days=days)
    cert, key = make_server_cert(d, ca, list(hosts), days=days)
    keys = {name: make_node_key(d / "nodes", name) for name in nodes}
    return Credentials(d, d / "ca.pem", cert, key, keys)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m simulations.deploy.certs",
        description="Make a CA, the SuperLink's TLS certificate and SuperNode auth keys.",
    )
    parser.add_argument("--out", required=True, help="directory to write (created)")
    parser.add_argument(
        "--host",
        action="append",
        default=None,
        help="address the SuperNodes and flwr use to reach the SuperLink (repeat; "
        "default 127.0.0.1 and localhost)",
    )
    parser.add_argument("--node", action="append", default=[], help="SuperNode name (repeat)")
    parser.add_argument("--days", type=int, default=365, help="validity (days)")
    args = parser.parse_args(argv)
    creds = make_credentials(
        args.out, hosts=args.host or ["127.0.0.1", "localhost"], nodes=args.node, days=args.days
    )
    print(f"CA certificate:     {creds.ca_cert}")
    print(f"server certificate: {creds.server_cert} (key {creds.server_key})")
    for name, (priv, pub) in creds.node_keys.items():
        print(f"node {name}: private {priv}, public {pub}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
