"""`CertificateExpiry`: the end of each certificate file a process was given, read again
when the file is replaced (as a rotated Secret is), the leaf of a chain and the last CA
of a bundle."""

from __future__ import annotations

import os
from pathlib import Path

from epochlog.security.expiry import CertificateExpiry, CertificateRole, not_after
from epochlog.security.pki import Issued, issue, new_ca
from epochlog.security.tls import TlsFiles


def _end(issued: Issued) -> float:
    return issued.cert.not_valid_after_utc.timestamp()


def _write(path: Path, *certs: Issued) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(b"".join(c.cert_pem() for c in certs))
    os.replace(tmp, path)  # a new inode, as a Secret's update


def test_each_file_answers_its_certificates_end(tmp_path: Path) -> None:
    ca = new_ca("cluster", days=30)
    clients = new_ca("clients", days=40)
    own = issue(ca, "broker-1", days=10)
    cert, key = own.write(tmp_path, "broker-1")
    _write(tmp_path / "ca.crt", ca)
    _write(tmp_path / "clients.crt", clients)
    files = TlsFiles(str(tmp_path / "ca.crt"), str(cert), str(key), str(tmp_path / "clients.crt"))
    assert CertificateExpiry(files).not_after() == {
        CertificateRole.OWN: _end(own),
        CertificateRole.CLUSTER_CA: _end(ca),
        CertificateRole.CLIENTS_CA: _end(clients),
    }
    assert CertificateExpiry(None).not_after() == {}


def test_a_replaced_file_is_read_again(tmp_path: Path) -> None:
    ca = new_ca("cluster")
    first, second = issue(ca, "broker-1", days=2), issue(ca, "broker-1", days=90)
    cert, key = first.write(tmp_path, "broker-1")
    _write(tmp_path / "ca.crt", ca)
    expiry = CertificateExpiry(TlsFiles(str(tmp_path / "ca.crt"), str(cert), str(key)))
    assert expiry.not_after()[CertificateRole.OWN] == _end(first)
    _write(cert, second)
    assert expiry.not_after()[CertificateRole.OWN] == _end(second)


def test_a_chain_counts_its_leaf_and_a_bundle_its_last_ca() -> None:
    old, new = new_ca("cluster", days=5), new_ca("cluster", days=500)
    leaf = issue(old, "broker-1", days=3)
    assert not_after(leaf.cert_pem() + old.cert_pem(), bundle=False) == _end(leaf)
    assert not_after(old.cert_pem() + new.cert_pem(), bundle=True) == _end(new)
    assert not_after(b"not a certificate", bundle=True) is None
