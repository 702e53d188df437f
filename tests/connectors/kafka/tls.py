"""Test certificates for the local broker's TLS listener, made with ``openssl`` into a folder:
a CA, a broker certificate for 127.0.0.1 signed by it, and the broker's PKCS12 keystore
(docs/design.md, "Kafka clients": the secured local broker)."""

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
    """The CA clients trust (PEM) and the broker's keystore (PKCS12) with its password."""

    ca_pem: Path
    keystore: Path
    keystore_password: str = ""

    def __repr__(self) -> str:
        return f"TlsFiles(ca_pem={str(self.ca_pem)!r}, keystore={str(self.keystore)!r})"


def _openssl(command: str, cwd: Path) -> None:
    result = subprocess.run(["openssl", *command.split()], cwd=cwd, capture_output=True, text=True)
    if result.returncode != 0:
        raise BrokerError(f"openssl {command.split()[0]} failed in {cwd}: {result.stderr.strip()}")


def make_certificates(folder: Path, host: str = "127.0.0.1") -> TlsFiles:
    """A CA and a broker certificate for ``host`` (IP or DNS name in its subjectAltName), kept
    in ``folder``; made again only if the keystore is missing."""
    folder.mkdir(parents=True, exist_ok=True)
    password_file = folder / "keystore.password"
    files = TlsFiles(folder / "ca.pem", folder / "broker.p12")
    if files.keystore.exists() and password_file.exists():
        return TlsFiles(files.ca_pem, files.keystore, password_file.read_text())
    password = secrets.token_hex(12)
    kind = "IP" if host.replace(".", "").isdigit() else "DNS"
    (folder / "san.ext").write_text(f"subjectAltName={kind}:{host}\n")
    ec = "-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes"
    # -subj values without spaces: each command is split on whitespace
    _openssl(
        f"req -x509 {ec} -keyout ca.key -out ca.pem -days {_DAYS} -subj /CN=spark_ext-CA", folder
    )
    _openssl(f"req {ec} -keyout broker.key -out broker.csr -subj /CN={host}", folder)
    _openssl(
        "x509 -req -in broker.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out broker.pem "
        f"-days {_DAYS} -extfile san.ext",
        folder,
    )
    _openssl(
        "pkcs12 -export -in broker.pem -inkey broker.key -certfile ca.pem -out broker.p12 "
        f"-passout pass:{password}",
        folder,
    )
    password_file.write_text(password)
    return TlsFiles(files.ca_pem, files.keystore, password)
