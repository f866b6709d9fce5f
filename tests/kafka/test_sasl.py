"""The Kafka listener's SASL exchanges (`kafka/sasl.py`) against the access policy, the
client side played by scramp's own SCRAM client."""

from __future__ import annotations

import io
import json
import sys

import pytest
from pydantic import ValidationError
from scramp import ScramClient

from epochlog.security.access import AccessPolicy, scram_entry, token_digest
from epochlog.security.principal import Kind, Principal
from epochlog_broker.kafka.sasl import SaslExchange, SaslFailed
from epochlog_tools.cli import main

POLICY = AccessPolicy.model_validate(
    {
        "tokens": [{"principal": "User:audit", "sha256": token_digest("audit-token")}],
        "scram": [
            scram_entry("billing", "s3cret", "SCRAM-SHA-512", 4096),
            scram_entry("ops", "0ps", "SCRAM-SHA-256", 4096),
        ],
    }
)


def scram(mechanism: str, user: str, password: str) -> SaslExchange:
    """A whole SCRAM exchange; the server's last message checked by the client."""
    client = ScramClient([mechanism], user, password)
    server = SaslExchange(mechanism, POLICY)
    first = server.step(client.get_client_first().encode())
    client.set_server_first(first.decode())
    final = server.step(client.get_client_final().encode())
    client.set_server_final(final.decode())
    return server


@pytest.mark.parametrize(
    ("mechanism", "user", "password"),
    [("SCRAM-SHA-512", "billing", "s3cret"), ("SCRAM-SHA-256", "ops", "0ps")],
)
def test_a_scram_exchange_with_the_right_password_names_the_user(
    mechanism: str, user: str, password: str
) -> None:
    assert scram(mechanism, user, password).principal == Principal(Kind.USER, user)


@pytest.mark.parametrize(
    ("mechanism", "user", "password"),
    [
        ("SCRAM-SHA-512", "billing", "wrong"),
        ("SCRAM-SHA-512", "nobody", "s3cret"),
        # A credential is for one mechanism only.
        ("SCRAM-SHA-256", "billing", "s3cret"),
    ],
)
def test_a_scram_exchange_with_a_wrong_password_or_user_fails(
    mechanism: str, user: str, password: str
) -> None:
    with pytest.raises(SaslFailed):
        scram(mechanism, user, password)


def test_plain_takes_a_token_of_the_policy_for_its_own_user() -> None:
    ok = SaslExchange("PLAIN", POLICY)
    assert ok.step(b"\0audit\0audit-token") == b""
    assert ok.principal == Principal(Kind.USER, "audit")
    for token in (b"\0audit\0other", b"\0billing\0audit-token", b"x\0audit\0audit-token"):
        with pytest.raises(SaslFailed):
            SaslExchange("PLAIN", POLICY).step(token)


@pytest.mark.parametrize(
    "token", [b"", b"no separators", b"\0\xff\0audit-token", b"\0audit\0" + b"x" * 9000]
)
def test_malformed_tokens_fail_with_a_message(token: bytes) -> None:
    with pytest.raises(SaslFailed):
        SaslExchange("PLAIN", POLICY).step(token)
    with pytest.raises(SaslFailed):
        SaslExchange("SCRAM-SHA-512", POLICY).step(token)


def test_without_a_policy_nobody_authenticates_and_unknown_mechanisms_are_refused() -> None:
    with pytest.raises(SaslFailed):
        SaslExchange("PLAIN", None).step(b"\0audit\0audit-token")
    with pytest.raises(SaslFailed):
        SaslExchange("GSSAPI", POLICY)


def test_a_policy_refuses_a_scram_entry_that_is_not_one() -> None:
    good = scram_entry("billing", "s3cret", "SCRAM-SHA-512", 4096)
    for bad in ({"iterations": 1000}, {"salt": "not base64!"}, {"mechanism": "SCRAM-MD5"}):
        with pytest.raises(ValidationError):
            AccessPolicy.model_validate({"scram": [{**good, **bad}]})


def test_the_scram_command_prints_an_entry_the_policy_takes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("n3w password\n"))
    assert main(["access", "scram", "--user", "carol", "--iterations", "4096"]) == 0
    entry = json.loads(capsys.readouterr().out)
    assert "n3w password" not in json.dumps(entry)
    policy = AccessPolicy.model_validate({"scram": [entry]})
    client = ScramClient(["SCRAM-SHA-512"], "carol", "n3w password")
    server = SaslExchange("SCRAM-SHA-512", policy)
    client.set_server_first(server.step(client.get_client_first().encode()).decode())
    client.set_server_final(server.step(client.get_client_final().encode()).decode())
    assert server.principal == Principal(Kind.USER, "carol")


@pytest.mark.parametrize(
    ("args", "stdin"),
    [(["--iterations", "1000"], "pw\n"), ([], "\n")],
)
def test_the_scram_command_refuses_few_iterations_and_an_empty_password(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    stdin: str,
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    assert main(["access", "scram", "--user", "carol", *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err


def test_a_client_is_not_told_whether_the_user_or_the_password_was_wrong() -> None:
    messages = set()
    for user, password in (("billing", "wrong"), ("nobody", "s3cret")):
        with pytest.raises(SaslFailed) as failed:
            scram("SCRAM-SHA-512", user, password)
        messages.add(str(failed.value))
    assert messages == {"SCRAM-SHA-512 authentication failed"}
