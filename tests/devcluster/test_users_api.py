"""EpochlogUsers, ServiceAccount tokens and immutable Secrets, served as kube-apiserver serves them.

The same tests run against the API emulator and, with EPOCHLOG_TEST_APISERVER=real,
against a real kube-apiserver (tests/devcluster/conftest.py).
"""

from __future__ import annotations

import base64
import json
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pydantic
import pytest
import yaml

from epochlog.crd import USER_CRD_FILE, user_crd, user_crd_yaml
from epochlog.users import EpochlogUserSpec
from epochlog_tools.kubeapi.apiserver import ApiServer
from tests import waiting
from tests.devcluster.conftest import CRDS, Http, Kubectl

USERS = "/apis/epochlog.dev/v1alpha1/namespaces/default/epochlogusers"
SECRETS = "/api/v1/namespaces/default/secrets"
ACCOUNTS = "/api/v1/namespaces/default/serviceaccounts"
REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"


def user(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "epochlog.dev/v1alpha1",
        "kind": "EpochlogUser",
        "metadata": {"name": name},
        "spec": spec,
    }


GOOD = {
    "authentication": {"type": "tls"},
    "authorization": {
        "acls": [
            {"resource": {"type": "topic", "name": "orders"}, "operations": ["read", "write"]},
            {
                "resource": {"type": "group", "name": "billing-", "patternType": "prefix"},
                "operations": ["read"],
            },
        ]
    },
}


def test_crd_file_is_generated_from_the_models() -> None:
    assert (CRDS / USER_CRD_FILE).read_text() == user_crd_yaml(), (
        f"crds/{USER_CRD_FILE} is out of date: "
        f"run `python -m epochlog.crd epochlogusers > crds/{USER_CRD_FILE}`"
    )


def test_crd_is_a_valid_custom_resource_definition() -> None:
    doc = yaml.safe_load((CRDS / USER_CRD_FILE).read_text())
    kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)
    assert doc == user_crd()


# Each: a spec, the field the API server names, and words of its message.
REFUSED: list[tuple[dict[str, Any], str, str]] = [
    ({"authentication": {"type": "kerberos"}}, "spec.authentication.type", "Unsupported value"),
    ({"authorization": {"acls": []}}, "spec.authentication", "Required value"),
    (
        {"authentication": {"type": "serviceaccount"}},
        "spec.authentication.serviceAccount",
        "serviceAccount is required with type serviceaccount",
    ),
    (
        {"authentication": {"type": "tls", "serviceAccount": {"name": "x"}}},
        "spec.authentication.serviceAccount",
        "only there",
    ),
    (
        {
            "authentication": {"type": "token"},
            "authorization": {
                "acls": [{"resource": {"type": "topic", "name": "a"}, "operations": []}]
            },
        },
        "spec.authorization.acls[0].operations",
        "should have at least 1 items",
    ),
    (
        {
            "authentication": {"type": "token"},
            "authorization": {
                "acls": [{"resource": {"type": "topic", "name": "a"}, "operations": ["delete"]}]
            },
        },
        "spec.authorization.acls[0].operations[0]",
        "Unsupported value",
    ),
    (
        {
            "authentication": {"type": "token"},
            "authorization": {
                "acls": [
                    {
                        "resource": {"type": "topic", "name": "*", "patternType": "prefix"},
                        "operations": ["read"],
                    }
                ]
            },
        },
        "spec.authorization.acls[0].resource.patternType",
        "takes patternType literal",
    ),
    (
        {
            "authentication": {"type": "token"},
            "authorization": {
                "acls": [{"resource": {"type": "topic", "name": "a*b"}, "operations": ["read"]}]
            },
        },
        "spec.authorization.acls[0].resource.name",
        "should match",
    ),
]


@pytest.mark.parametrize(("spec", "field", "words"), REFUSED)
async def test_a_user_that_breaks_the_schema_is_refused_naming_the_field(
    http: Http, spec: dict[str, Any], field: str, words: str
) -> None:
    status, body = await http.call("POST", USERS, user("alice", spec))
    assert status == 422, body
    assert body["reason"] == "Invalid"
    assert field in body["message"], body["message"]
    assert words in body["message"], body["message"]
    # The models refuse it too: the operator and the API server agree.
    with pytest.raises(pydantic.ValidationError):
        EpochlogUserSpec.model_validate(spec)


async def test_a_tls_user_name_longer_than_a_common_name_is_refused(http: Http) -> None:
    long = "u" * 65
    status, body = await http.call("POST", USERS, user(long, {"authentication": {"type": "tls"}}))
    assert status == 422, body
    assert "at most 64 characters" in body["message"]
    status, body = await http.call("POST", USERS, user(long, {"authentication": {"type": "token"}}))
    assert status == 201, body


async def test_a_good_user_is_stored_with_its_defaults_and_listed_by_kubectl(
    http: Http, kubectl: Kubectl
) -> None:
    created = await http.ok("POST", USERS, user("alice", GOOD))
    rule = created["spec"]["authorization"]["acls"][0]
    assert rule["resource"]["patternType"] == "literal"
    EpochlogUserSpec.model_validate(created["spec"])
    status = {
        "status": {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "Ready",
                    "lastTransitionTime": "2024-05-01T10:00:00Z",
                }
            ],
            "secret": "alice",
            "username": "CN=alice",
        }
    }
    await http.ok(
        "PATCH",
        f"{USERS}/alice/status",
        status,
        content_type="application/merge-patch+json",
    )
    _, out, _ = await kubectl.run("get", "epochlogusers")
    header, row = out.splitlines()
    assert header.split() == ["NAME", "AUTHENTICATION", "READY", "AGE"]
    assert row.split()[:3] == ["alice", "tls", "True"]
    _, wide, _ = await kubectl.run("get", "eu", "-o", "wide")
    assert wide.splitlines()[0].split()[-2:] == ["USERNAME", "SECRET"]
    assert wide.splitlines()[1].split()[-2:] == ["CN=alice", "alice"]


async def _account(http: Http, name: str) -> dict[str, Any]:
    body = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}
    created: dict[str, Any] = await http.ok("POST", ACCOUNTS, body)
    return created


async def _token(http: Http, name: str, **spec: Any) -> tuple[int, Any]:
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
    return await http.call("POST", f"{ACCOUNTS}/{name}/token", body)


async def _review(http: Http, token: str, audiences: list[str]) -> dict[str, Any]:
    body = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": token, "audiences": audiences},
    }
    status, answer = await http.call("POST", REVIEWS, body)
    assert status == 201, answer
    assert answer["kind"] == "TokenReview"
    review: dict[str, Any] = answer["status"]
    return review


async def test_a_token_of_a_service_account_is_reviewed_for_its_audience(http: Http) -> None:
    account = await _account(http, "reader")
    status, issued = await _token(http, "reader", audiences=["epochlog"], expirationSeconds=600)
    assert status == 201, issued
    assert issued["kind"] == "TokenRequest"
    assert issued["spec"]["audiences"] == ["epochlog"]
    assert issued["status"]["expirationTimestamp"]
    token = issued["status"]["token"]
    claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
    assert claims["aud"] == ["epochlog"]
    assert claims["sub"] == "system:serviceaccount:default:reader"
    assert claims["exp"] - claims["iat"] == 600

    review = await _review(http, token, ["epochlog"])
    assert review["authenticated"] is True
    assert review["audiences"] == ["epochlog"]
    assert review["user"]["username"] == "system:serviceaccount:default:reader"
    assert review["user"]["uid"] == account["metadata"]["uid"]
    assert "system:serviceaccounts:default" in review["user"]["groups"]

    wrong = await _review(http, token, ["another"])
    assert not wrong.get("authenticated")
    assert wrong["error"]
    forged = token[:-8] + ("A" * 8 if not token.endswith("A" * 8) else "B" * 8)
    assert not (await _review(http, forged, ["epochlog"])).get("authenticated")
    assert not (await _review(http, "not-a-token", ["epochlog"])).get("authenticated")

    await http.ok("DELETE", f"{ACCOUNTS}/reader")

    async def refused() -> dict[str, Any] | None:
        # kube-apiserver looks ServiceAccounts up in its informer's cache: the deletion
        # reaches the reviews a moment later.
        answer = await _review(http, token, ["epochlog"])
        return None if answer.get("authenticated") else answer

    gone = await waiting.until(refused, "the token of a deleted ServiceAccount refused", 10)
    assert gone is not None
    assert gone["error"]


async def test_a_token_request_is_held_to_the_servers_bounds(http: Http) -> None:
    await _account(http, "bounded")
    status, body = await _token(http, "bounded", audiences=["epochlog"], expirationSeconds=60)
    assert status == 422, body
    assert "spec.expirationSeconds" in body["message"]
    assert "less than 10 minutes" in body["message"]
    status, body = await _token(http, "nobody", audiences=["epochlog"])
    assert status == 404, body
    status, body = await http.call("GET", REVIEWS)
    assert status == 405, body


@pytest.mark.emulator_only
async def test_an_expired_token_is_not_authenticated(api: ApiServer, http: Http) -> None:
    """Issued in the emulator's process with a lifetime below what a TokenRequest may ask
    for: an expired token without waiting ten minutes."""
    account = await _account(http, "expired")
    token, _ = api.handler.tokens.issue(
        "default", "expired", account["metadata"]["uid"], ["epochlog"], -1
    )
    review = await _review(http, token, ["epochlog"])
    assert not review.get("authenticated")
    assert "expired" in review["error"]


async def test_an_immutable_secret_keeps_its_data(http: Http) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "frozen"},
        "immutable": True,
        "data": {"k": base64.b64encode(b"v1").decode()},
    }
    created = await http.ok("POST", SECRETS, body)
    changed = {**created, "data": {"k": base64.b64encode(b"v2").decode()}}
    status, answer = await http.call("PUT", f"{SECRETS}/frozen", changed)
    assert status == 422, answer
    assert "field is immutable when `immutable` is set" in answer["message"]
    same = await http.ok("GET", f"{SECRETS}/frozen")
    assert same["data"] == body["data"]
    await http.ok("DELETE", f"{SECRETS}/frozen")
