# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Test fixture: a site's PKI in small, for the simulated lab and the molecule scenarios that need TLS.

    fixture_pki.py DIR HOST...            a CA (DIR/ca.crt, ca.key) and, per host, DIR/HOST.crt and DIR/HOST.key
    fixture_pki.py DIR --expired NAME     also DIR/NAME.crt and NAME.key: signed by the CA, expired yesterday

Each host's certificate names the host, localhost and 127.0.0.1, as a site's would for a service scraped at the host's
name. Files that exist are kept (a second run changes nothing), so a lab made again keeps its CA. Keys are written
0600. Runs with the controller's Python: cryptography comes with ansible-core.
"""

import argparse
import datetime
import ipaddress
import os
import sys

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

DAYS = 3650


def _write(path, data, mode):
    temporary = path + ".tmp"
    with open(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "wb") as handle:
        handle.write(data)
    os.replace(temporary, path)


def _key_pem(key):
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _name(common_name):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def ca(directory):
    """The CA's certificate and key, made on first use."""
    cert_path, key_path = os.path.join(directory, "ca.crt"), os.path.join(directory, "ca.key")
    if os.path.exists(cert_path) and os.path.exists(key_path):
        with open(cert_path, "rb") as cert, open(key_path, "rb") as key:
            return x509.load_pem_x509_certificate(cert.read()), serialization.load_pem_private_key(key.read(), None)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(_name("dlinfra test fixture CA")).issuer_name(_name("dlinfra test fixture CA"))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    _write(key_path, _key_pem(key), 0o600)
    _write(cert_path, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    return cert, key


def host(directory, name, authority, expired=False):
    """NAME.crt and NAME.key under directory, signed by authority (its certificate and key); kept where they exist."""
    cert_path, key_path = os.path.join(directory, name + ".crt"), os.path.join(directory, name + ".key")
    if os.path.exists(cert_path) and os.path.exists(key_path):
        return
    ca_cert, ca_key = authority
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    start, end = ((now - datetime.timedelta(days=30), now - datetime.timedelta(days=1)) if expired
                  else (now - datetime.timedelta(days=1), now + datetime.timedelta(days=DAYS)))
    names = [x509.DNSName(name), x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    cert = (x509.CertificateBuilder().subject_name(_name(name)).issuer_name(ca_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH,
                                                  x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    _write(key_path, _key_pem(key), 0o600)
    _write(cert_path, cert.public_bytes(serialization.Encoding.PEM), 0o644)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("directory")
    parser.add_argument("hosts", nargs="*")
    parser.add_argument("--expired", action="append", default=[], metavar="NAME")
    args = parser.parse_args(argv)
    os.makedirs(args.directory, mode=0o755, exist_ok=True)
    authority = ca(args.directory)
    for name in args.hosts:
        host(args.directory, name, authority)
    for name in args.expired:
        host(args.directory, name, authority, expired=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
