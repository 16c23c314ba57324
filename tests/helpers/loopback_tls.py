"""Loopback TLS and an HTTP CONNECT proxy for the kubeconfig tests: a private CA, a server
certificate for a name (not for 127.0.0.1, so only a client that checks that name connects), an
HTTPS server that records what arrives, and a proxy that records every tunnel it opens."""

from __future__ import annotations

import base64
import datetime as dt
import select
import socket
import socketserver
import ssl
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class Pki:
    ca_pem: bytes
    cert_file: Path
    key_file: Path
    server_name: str

    @property
    def ca_data(self) -> str:
        """``certificate-authority-data`` as a kubeconfig holds it."""
        return base64.b64encode(self.ca_pem).decode()

    def server_context(self, seen_names: list[str] | None = None) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert_file, self.key_file)
        if seen_names is not None:
            context.sni_callback = lambda sock, name, ctx: seen_names.append(name) and None  # type: ignore[func-returns-value]
        return context


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def make_pki(folder: Path, server_name: str = "kube.test") -> Pki:
    """A CA and a certificate it signs for ``server_name`` only (DNS SAN)."""
    now = dt.datetime.now(dt.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(_name("test CA")).issuer_name(_name("test CA"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(_name(server_name)).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(server_name)]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    cert_file, key_file = folder / "server.crt", folder / "server.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return Pki(ca.public_bytes(serialization.Encoding.PEM), cert_file, key_file, server_name)


def serve_tls(server: ThreadingHTTPServer, context: ssl.SSLContext) -> ThreadingHTTPServer:
    """``server`` (already bound) answering over TLS, served on a daemon thread."""
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return server


@dataclass
class Recorder:
    """A loopback HTTPS API that answers every GET with ``{"kind": "ConfigMap", ...}`` and records
    each request's path and Authorization header."""

    requests: list[tuple[str, str | None]] = field(default_factory=list)
    server_names: list[str] = field(default_factory=list)

    def start(self, pki: Pki) -> tuple[ThreadingHTTPServer, int]:
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                recorder.requests.append((self.path, self.headers.get("Authorization")))
                body = b'{"kind": "ConfigMap", "data": {"answered": "yes"}}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return

        server = serve_tls(ThreadingHTTPServer(("127.0.0.1", 0), Handler), pki.server_context(self.server_names))
        return server, int(server.server_address[1])


class ConnectProxy(socketserver.ThreadingTCPServer):
    """An HTTP proxy that answers only CONNECT and records (target, Proxy-Authorization) per tunnel."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        self.tunnels: list[tuple[str, str | None]] = []
        super().__init__(("127.0.0.1", 0), _Tunnel)
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


class _Tunnel(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        request_line = self.rfile.readline().decode("latin-1").split()
        headers: dict[str, str] = {}
        while (line := self.rfile.readline().decode("latin-1").strip()):
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if len(request_line) < 2 or request_line[0] != "CONNECT":
            self.wfile.write(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
            return
        target = request_line[1]
        self.server.tunnels.append((target, headers.get("proxy-authorization")))  # type: ignore[attr-defined]
        host, _, port = target.rpartition(":")
        upstream = socket.create_connection((host.strip("[]"), int(port)), timeout=10)
        self.wfile.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        self.wfile.flush()
        ends = [self.connection, upstream]
        try:
            while True:
                ready, _, _ = select.select(ends, [], [], 10)
                if not ready:
                    return
                for end in ready:
                    data = end.recv(65536)
                    if not data:
                        return
                    (upstream if end is self.connection else self.connection).sendall(data)
        finally:
            upstream.close()
