"""The credential options every epochlog program takes, with one spelling everywhere.

Clients (`epochlog produce/consume/...`, the Spark source, `epochlog dev`) take
`--ca` (the CA that issued the brokers' certificates), `--cert`/`--key` (a client
certificate from the clients CA) and `--token` (a bearer token), each also from an
environment variable. Servers (broker, operator) take `--ca`, `--cert`, `--key`
for their own identity, `--clients-ca` and `--access-policy` for users, and
`--plaintext`: without a certificate a server refuses to start unless told so.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from epochlog.security.access import AccessPolicy, load_policy
from epochlog.security.tls import TlsFiles

PLAINTEXT_REQUIRED: Final = (
    "TLS is on by default: give --ca, --cert and --key (the cluster CA, this process's "
    "certificate and its key), or --plaintext to run without TLS for local development"
)


@dataclass(frozen=True)
class Credentials:
    """What a client presents: TLS files (None: plaintext URLs) and a bearer token."""

    tls: TlsFiles | None = None
    token: str | None = None

    @classmethod
    def of(
        cls,
        ca: str | None = None,
        cert: str | None = None,
        key: str | None = None,
        token: str | None = None,
    ) -> Credentials:
        if (cert or key) and not ca:
            raise ValueError("--cert and --key need --ca, the CA that issued the brokers' certs")
        return cls(TlsFiles(ca, cert, key) if ca else None, token or None)


def add_tls_arguments(parser: argparse.ArgumentParser, *, server: bool) -> None:
    env = os.environ.get
    who = "this process's" if server else "the client"
    parser.add_argument(
        "--ca",
        default=env("EPOCHLOG_CA"),
        metavar="PEM",
        help="CA certificate(s) that issued the brokers' certificates (env EPOCHLOG_CA)",
    )
    parser.add_argument(
        "--cert", default=env("EPOCHLOG_CERT"), metavar="PEM", help=f"{who} certificate"
    )
    parser.add_argument("--key", default=env("EPOCHLOG_KEY"), metavar="PEM", help="its key")
    if not server:
        parser.add_argument(
            "--token",
            default=env("EPOCHLOG_TOKEN"),
            help="bearer token instead of a client certificate (env EPOCHLOG_TOKEN)",
        )
        return
    parser.add_argument(
        "--clients-ca",
        default=env("EPOCHLOG_CLIENTS_CA"),
        metavar="PEM",
        help="CA that issued users' client certificates (env EPOCHLOG_CLIENTS_CA)",
    )
    parser.add_argument(
        "--access-policy",
        default=env("EPOCHLOG_ACCESS_POLICY"),
        metavar="FILE",
        help="bearer tokens, SCRAM credentials and rules per topic and per Kafka consumer "
        "group, YAML or JSON (default: any authenticated principal may do everything)",
    )
    parser.add_argument(
        "--plaintext",
        action="store_true",
        default=env("EPOCHLOG_PLAINTEXT", "") == "true",
        help="no TLS: anyone who reaches the port is trusted (local development only)",
    )


def server_security(args: argparse.Namespace) -> tuple[TlsFiles | None, AccessPolicy | None]:
    """(TLS files, access policy) from a server's arguments; ValueError when TLS is
    neither configured nor explicitly turned off."""
    policy = None
    if args.access_policy:
        # Not there yet (a Secret the operator has not written): nothing for users until it
        # is; the brokers' reload takes it when it appears.
        missing = not Path(args.access_policy).exists()
        policy = AccessPolicy() if missing else load_policy(args.access_policy)
    if args.plaintext:
        if args.cert or args.key:
            raise ValueError("--plaintext and --cert/--key contradict each other")
        return None, policy
    if not (args.ca and args.cert and args.key):
        raise ValueError(PLAINTEXT_REQUIRED)
    return TlsFiles(args.ca, args.cert, args.key, args.clients_ca), policy


def client_credentials(args: argparse.Namespace) -> Credentials:
    return Credentials.of(args.ca, args.cert, args.key, args.token)
