"""What a broker decides about a bearer token before asking anyone (`protocol.token_review`)."""

from __future__ import annotations

import base64
import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from epochlog.protocol.token_review import MAX_TOKEN_CHARS, precheck, token_expiry

NOW = 1_900_000_000


def jwt(claims: Any) -> str:
    def part(value: Any) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'ES256'})}.{part(claims)}.c2lnbmF0dXJl"


def test_only_an_unexpired_jwt_for_the_audience_is_worth_a_review() -> None:
    assert precheck(jwt({"aud": ["epochlog"], "exp": NOW + 60}), "epochlog", NOW) is None
    assert precheck(jwt({"aud": "epochlog", "exp": NOW + 60}), "epochlog", NOW) is None
    assert "audience" in str(precheck(jwt({"aud": ["other"], "exp": NOW + 60}), "epochlog", NOW))
    assert "expired" in str(precheck(jwt({"aud": ["epochlog"], "exp": NOW}), "epochlog", NOW))
    assert "expired" in str(precheck(jwt({"aud": ["epochlog"]}), "epochlog", NOW))
    assert "JWT" in str(precheck("a-policy-token-nobody-has", "epochlog", NOW))
    assert "JWT" in str(precheck(jwt([1, 2]), "epochlog", NOW))
    long = jwt({"aud": ["epochlog"], "exp": NOW + 60, "pad": "x" * MAX_TOKEN_CHARS})
    assert precheck(long, "epochlog", NOW) is not None
    assert token_expiry(jwt({"exp": NOW})) == NOW
    assert token_expiry("nope") is None


@given(st.text(max_size=300))
def test_any_text_gets_an_answer(token: str) -> None:
    assert precheck(token, "epochlog", NOW) is None or isinstance(
        precheck(token, "epochlog", NOW), str
    )
    token_expiry(token)


@given(
    st.dictionaries(
        st.sampled_from(["aud", "exp", "sub"]),
        st.none() | st.integers() | st.floats(allow_nan=False) | st.text() | st.lists(st.text()),
    )
)
def test_any_claims_get_an_answer(claims: dict[str, Any]) -> None:
    why = precheck(jwt(claims), "epochlog", NOW)
    aud = claims.get("aud")
    exp = claims.get("exp")
    worth = (
        (aud == "epochlog" or (isinstance(aud, list) and "epochlog" in aud))
        and isinstance(exp, int | float)
        and not isinstance(exp, bool)
        and exp > NOW
    )
    assert (why is None) == worth, (claims, why)
