"""Test certificates for the local broker's TLS listeners, made with ``openssl`` into a folder:
a CA, a broker certificate for 127.0.0.1 signed by it, the broker's PKCS12 keystore, and a
client certificate for the listener that requires one (docs/design.md, "Kafka clients": the
secured local broker)."""

from __future__ import annotations

import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path

from spark_ext.errors import BrokerError

__all__ = ["TlsFiles", "make_certificates"]

_DAYS = 2


@dataclass(frozen=True)
class TlsFiles:
    """The CA clients trust (PEM), the broker's keystore (PKCS12) with its password, and a
    client's key and certificate in one PEM file (``ssl.keystore.location`` of a client)."""

    ca_pem: Path
    keystore: Path
    client_pem: Path
    keystore_password: str = ""

    def __repr__(self) -> str:
        return f"TlsFiles(ca_pem={str(self.ca_pem)!r}, keystore={str(self.keystore)!r})"


def _openssl(command: str, cwd: Path) -> None:
    result = subprocess.run(["openssl", *command.split()], cwd=cwd, capture_output=True, text=True)
    if result.returncode != 0:
        raise BrokerError(f"openssl {command.split()[0]} failed in {cwd}: {result.stderr.strip()}")


def _signed(name: str, subject: str, folder: Path, ext: str = "") -> None:
    """``<name>.key`` (PKCS#8, unencrypted) and ``<name>.pem`` signed by the folder's CA."""
    ec = "-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes"
    # -subj values without spaces: each command is split on whitespace
    _openssl(f"req {ec} -keyout {name}.key -out {name}.csr -subj /CN={subject}", folder)
    _openssl(
        f"x509 -req -in {name}.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out {name}.pem "
        f"-days {_DAYS}" + (f" -extfile {ext}" if ext else ""),
        folder,
    )


def make_certificates(folder: Path, host: str = "127.0.0.1") -> TlsFiles:
    """A CA, a broker certificate for ``host`` (IP or DNS name in its subjectAltName) and a
    client certificate (CN ``spark-ext-client``), kept in ``folder``; made again only if the
    keystore is missing."""
    folder.mkdir(parents=True, exist_ok=True)
    password_file = folder / "keystore.password"
    files = TlsFiles(folder / "ca.pem", folder / "broker.p12", folder / "client-keystore.pem")
    if files.keystore.exists() and files.client_pem.exists() and password_file.exists():
        return TlsFiles(files.ca_pem, files.keystore, files.client_pem, password_file.read_text())
    password = secrets.token_hex(12)
    kind = "IP" if host.replace(".", "").isdigit() else "DNS"
    (folder / "san.ext").write_text(f"subjectAltName={kind}:{host}\n")
    _openssl(
        "req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key "
        f"-out ca.pem -days {_DAYS} -subj /CN=spark_ext-CA",
        folder,
    )
    _signed("broker", host, folder, ext="san.ext")
    _openssl(
        "pkcs12 -export -in broker.pem -inkey broker.key -certfile ca.pem -out broker.p12 "
        f"-passout pass:{password}",
        folder,
    )
    _signed("client", "spark-ext-client", folder)
    # key first, then the certificate: what Kafka's PEM keystore, Python's ssl and librdkafka read
    files.client_pem.write_text(
        (folder / "client.key").read_text() + (folder / "client.pem").read_text()
    )
    password_file.write_text(password)
    return TlsFiles(files.ca_pem, files.keystore, files.client_pem, password)
