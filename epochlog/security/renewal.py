"""When a certificate someone keeps must be issued again: the checks every issuer makes.

The operator issues brokers' and its own certificates from the cluster CA
(`epochlog_operator.certificates`) and users' from the clients CA
(`epochlog_operator.users`); both ask `renewal_due` first and then check the names
their kind of certificate carries. Pure: the time is an argument.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from cryptography import x509
from cryptography.exceptions import InvalidSignature


def renewal_due(
    held: x509.Certificate | None,
    ca: x509.Certificate,
    now: datetime,
    renew_before: timedelta,
) -> str | None:
    """Why `held` must be issued again whatever it names, or None when it may serve."""
    if held is None:
        return "missing"
    try:
        # The signature, not the name: a replaced CA may carry the same name.
        held.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return "issued by another CA"
    if held.not_valid_after_utc - renew_before <= now:
        return f"expires {held.not_valid_after_utc.isoformat()}"
    return None
