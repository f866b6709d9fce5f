"""Where the API emulator used to answer differently from a real kube-apiserver (v1.36).

Each test names a behaviour seen on a real API server that a controller or a tool
depends on; they were found by running the operator against one.
"""

from __future__ import annotations

from typing import Any

from tests.devcluster.conftest import PARTITIONS, Http, Kubectl, partition

ORDERS_0 = f"{PARTITIONS}/orders-0"
STATUS = f"{ORDERS_0}/status"
SECRETS = "/api/v1/namespaces/default/secrets"
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY = "application/apply-patch+yaml"


# -- 1. the uid of an update's body is a precondition ------------------------------------------


async def test_put_with_another_uid_is_409_conflict(http: Http) -> None:
    created = await http.ok("POST", PARTITIONS, partition())
    uid = created["metadata"]["uid"]
    other = "0b4f4a6e-0000-4000-8000-000000000000"
    body = {**created, "metadata": {**created["metadata"], "uid": other}}
    body["status"] = {"highWatermark": 1}
    for path in (STATUS, ORDERS_0):
        status, answer = await http.call("PUT", path, body)
        assert (status, answer["reason"]) == (409, "Conflict"), answer
        assert (
            f"Precondition failed: UID in precondition: {other}, UID in object meta: {uid}"
            in answer["message"]
        )
    # The same uid (or none) is no precondition failure.
    body["metadata"]["uid"] = uid
    written = await http.ok("PUT", STATUS, body)
    assert written["status"]["highWatermark"] == 1


async def test_patch_changing_the_uid_is_422_immutable(http: Http) -> None:
    await http.ok("POST", PARTITIONS, partition())
    other = {"metadata": {"uid": "0b4f4a6e-0000-4000-8000-000000000000"}}
    status, answer = await http.merge(ORDERS_0, other)
    assert (status, answer["reason"]) == (422, "Invalid"), answer
    assert answer["details"]["causes"][0]["field"] == "metadata.uid"
    assert "field is immutable" in answer["message"]


# -- 3. strategic merge patch ----------------------------------------------------------------


async def test_strategic_merge_patch_on_a_custom_resource_is_415(http: Http) -> None:
    await http.ok("POST", PARTITIONS, partition())
    labels = {"metadata": {"labels": {"a": "b"}}}
    status, answer = await http.call("PATCH", ORDERS_0, labels, content_type=STRATEGIC)
    assert (status, answer["reason"]) == (415, "UnsupportedMediaType"), answer
    assert answer["message"] == (
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    )
    status, _ = await http.call("PATCH", STATUS, {"status": {}}, content_type=STRATEGIC)
    assert status == 415
    assert "labels" not in (await http.ok("GET", ORDERS_0))["metadata"]


async def test_strategic_merge_patch_on_built_in_kinds_merges_finalizers(http: Http) -> None:
    secret = {"metadata": {"name": "s", "finalizers": ["a.dev/x"]}, "data": {"k": "dg=="}}
    await http.ok("POST", SECRETS, secret)
    patch = {"metadata": {"finalizers": ["b.dev/y"]}, "data": {"l": "dw=="}}
    patched = await http.ok("PATCH", f"{SECRETS}/s", patch, content_type=STRATEGIC)
    # ObjectMeta.finalizers has patchStrategy "merge": the lists are joined, not replaced,
    # the patch's item first where the object does not order it (as kube-apiserver 1.35).
    assert patched["metadata"]["finalizers"] == ["b.dev/y", "a.dev/x"]
    assert patched["data"] == {"k": "dg==", "l": "dw=="}
    drop = {"$deleteFromPrimitiveList/finalizers": ["a.dev/x"]}
    patched = await http.ok("PATCH", f"{SECRETS}/s", {"metadata": drop}, content_type=STRATEGIC)
    assert patched["metadata"]["finalizers"] == ["b.dev/y"]


# -- 4. pruned fields are no change -------------------------------------------------------------


async def test_merge_patch_of_pruned_fields_only_changes_nothing(http: Http) -> None:
    created = await http.ok("POST", PARTITIONS, partition())
    async with http.session.patch(
        ORDERS_0,
        json={"spec": {"colour": "blue"}},
        headers={"Content-Type": MERGE},
    ) as rsp:
        assert rsp.status == 200
        assert "spec.colour" in rsp.headers["Warning"]
        patched = await rsp.json()
    assert "colour" not in patched["spec"]
    assert patched["metadata"]["generation"] == 1
    assert patched["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    # A known field next to the pruned one is a change of the spec.
    both = await http.ok(
        "PATCH",
        ORDERS_0,
        {"spec": {"colour": "red", "replicaLagTimeMaxMs": 500}},
        content_type=MERGE,
    )
    assert both["metadata"]["generation"] == 2


# -- 5. CEL rules and schema errors in one answer ----------------------------------------------


async def test_cel_failures_come_with_schema_errors(http: Http) -> None:
    body = partition(minInsyncReplicas=5, replicaLagTimeMaxMs=0)
    status, answer = await http.call("POST", PARTITIONS, body)
    assert status == 422, answer
    fields = [c["field"] for c in answer["details"]["causes"]]
    assert fields == ["spec.replicaLagTimeMaxMs", "spec.minInsyncReplicas"]
    assert "should be greater than or equal to 1" in answer["message"]
    assert "minInsyncReplicas must not exceed replicationFactor" in answer["message"]


async def test_type_errors_hold_back_the_cel_rules(http: Http) -> None:
    # A type error, a missing required field, an enum or a size limit blocks CEL: the real
    # server says so in a cause without a field.
    body = partition(minInsyncReplicas=5, replicaLagTimeMaxMs="soon")
    status, answer = await http.call("POST", PARTITIONS, body)
    assert status == 422, answer
    causes = answer["details"]["causes"]
    assert [c["field"] for c in causes] == ["spec.replicaLagTimeMaxMs", "<nil>"]
    assert causes[0]["reason"] == "FieldValueTypeInvalid"
    assert causes[1]["message"] == (
        "Invalid value: null: some validation rules were not checked because the object was "
        "invalid; correct the existing errors to complete validation"
    )


# -- 6. label selectors ------------------------------------------------------------------------


async def test_invalid_label_selector_is_400(http: Http) -> None:
    body = partition()
    body["metadata"]["labels"] = {"tier": "gold", "size": "3"}
    await http.ok("POST", PARTITIONS, body)
    # The messages are kube-apiserver 1.35's, word for word.
    for selector, message in (
        ("tier=gold=x", "found '=', expected: ',' or 'end of string'"),
        ("tier=(gold", "unable to parse requirement: found '(', expected: identifier"),
        ("tier=gold,", "found '', expected: identifier after ','"),
        (
            "a/b/c=d",
            'unable to parse requirement: <nil>: Invalid value: "a/b/c": a valid label key',
        ),
        ("tier>x", "unable to parse requirement: values[0]: Invalid value: \"x\": for 'Gt', 'Lt'"),
        ("tier=%25", 'unable to parse requirement: values[0][tier]: Invalid value: "%": a valid'),
        ("t" * 64 + "=a", 'unable to parse requirement: <nil>: Invalid value: "' + "t" * 64),
    ):
        for query in (f"labelSelector={selector}", f"watch=true&labelSelector={selector}"):
            status, answer = await http.call("GET", f"{PARTITIONS}?{query}")
            assert (status, answer["kind"], answer["reason"]) == (
                400,
                "Status",
                "BadRequest",
            ), (selector, answer)
            assert answer["message"].startswith(message), answer
    assert answer["message"].endswith("name part must be no more than 63 bytes")
    # An empty set is a set: `in ()` matches nothing, `notin ()` everything.
    found = await http.ok("GET", f"{PARTITIONS}?labelSelector=tier notin ()")
    assert [p["metadata"]["name"] for p in found["items"]] == ["orders-0"]
    assert (await http.ok("GET", f"{PARTITIONS}?labelSelector=tier in ()"))["items"] == []
    found = await http.ok("GET", f"{PARTITIONS}?labelSelector=size>2,tier==gold")
    assert [p["metadata"]["name"] for p in found["items"]] == ["orders-0"]
    found = await http.ok("GET", f"{PARTITIONS}?labelSelector=size<3")
    assert found["items"] == []


# -- 7. what a DELETE answers ------------------------------------------------------------------


async def test_delete_answers_a_success_status_or_the_object_held_by_finalizers(
    http: Http,
) -> None:
    created = await http.ok("POST", PARTITIONS, partition())
    deleted = await http.ok("DELETE", ORDERS_0)
    assert deleted == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {
            "name": "orders-0",
            "group": "epochlog.dev",
            "kind": "partitions",
            "uid": created["metadata"]["uid"],
        },
    }
    held = partition("orders-1")
    held["metadata"]["finalizers"] = ["epochlog.dev/test"]
    await http.ok("POST", PARTITIONS, held)
    marked = await http.ok("DELETE", f"{PARTITIONS}/orders-1")
    assert marked["kind"] == "Partition"
    assert marked["metadata"]["deletionTimestamp"]
    again = await http.ok("DELETE", f"{PARTITIONS}/orders-1")
    assert again == marked


async def test_delete_answers_of_built_in_kinds(http: Http) -> None:
    secret = await http.ok("POST", SECRETS, {"metadata": {"name": "s"}})
    gone = await http.ok("DELETE", f"{SECRETS}/s")
    assert (gone["kind"], gone["status"]) == ("Status", "Success")
    assert gone["details"] == {
        "name": "s",
        "kind": "secrets",
        "uid": secret["metadata"]["uid"],
    }
    await http.ok("POST", "/api/v1/namespaces", {"metadata": {"name": "team-a"}})
    namespace = await http.ok("DELETE", "/api/v1/namespaces/team-a")
    # A namespace is finalized by the namespace controller: it answers as Terminating.
    assert namespace["kind"] == "Namespace"
    assert namespace["status"]["phase"] == "Terminating"
    assert namespace["metadata"]["deletionTimestamp"]


# -- 8. no new finalizers while deleting -------------------------------------------------------


async def test_no_new_finalizer_on_an_object_being_deleted(http: Http) -> None:
    held = partition()
    held["metadata"]["finalizers"] = ["epochlog.dev/a"]
    await http.ok("POST", PARTITIONS, held)
    await http.ok("DELETE", ORDERS_0)
    more = {"metadata": {"finalizers": ["epochlog.dev/a", "epochlog.dev/b"]}}
    status, answer = await http.merge(ORDERS_0, more)
    assert (status, answer["reason"]) == (422, "Invalid"), answer
    # kube-apiserver 1.35 lists this cause twice for a custom object.
    assert (
        answer["details"]["causes"]
        == [
            {
                "reason": "FieldValueForbidden",
                "message": "Forbidden: no new finalizers can be added if the object is being "
                'deleted, found new finalizers []string{"epochlog.dev/b"}',
                "field": "metadata.finalizers",
            }
        ]
        * 2
    )
    # Removing one is what finalizing is.
    status, _ = await http.merge(ORDERS_0, {"metadata": {"finalizers": None}})
    assert status == 200
    status, _ = await http.call("GET", ORDERS_0)
    assert status == 404


# -- 9. server-side apply ----------------------------------------------------------------------


def _apply_path(path: str, manager: str, *, force: bool = False) -> str:
    return f"{path}?fieldManager={manager}&force={'true' if force else 'false'}"


async def test_server_side_apply_creates_merges_and_records_the_manager(http: Http) -> None:
    body = partition(replicaLagTimeMaxMs=500)
    body["metadata"]["labels"] = {"tier": "gold"}
    status, created = await http.call(
        "PATCH", _apply_path(ORDERS_0, "one"), body, content_type=APPLY
    )
    assert status == 201, created
    assert created["spec"]["replicaLagTimeMaxMs"] == 500
    (entry,) = created["metadata"]["managedFields"]
    assert (entry["manager"], entry["operation"], entry["fieldsType"]) == (
        "one",
        "Apply",
        "FieldsV1",
    )
    assert entry["fieldsV1"]["f:spec"]["f:replicaLagTimeMaxMs"] == {}
    assert entry["fieldsV1"]["f:metadata"] == {"f:labels": {"f:tier": {}}}
    # The same configuration again is no write.
    again = await http.ok("PATCH", _apply_path(ORDERS_0, "one"), body, content_type=APPLY)
    assert again["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    # Leaving out a field the manager applied removes it; other fields stay.
    del body["metadata"]["labels"]
    body["spec"]["replicaLagTimeMaxMs"] = 700
    merged = await http.ok("PATCH", _apply_path(ORDERS_0, "one"), body, content_type=APPLY)
    assert "labels" not in merged["metadata"]
    assert merged["spec"]["replicaLagTimeMaxMs"] == 700
    assert merged["metadata"]["generation"] == 2


async def test_server_side_apply_conflicts_with_another_manager_unless_forced(
    http: Http,
) -> None:
    await http.ok(
        "PATCH",
        _apply_path(ORDERS_0, "one"),
        partition(replicaLagTimeMaxMs=500),
        content_type=APPLY,
    )
    theirs = partition(replicaLagTimeMaxMs=600)
    status, answer = await http.call(
        "PATCH", _apply_path(ORDERS_0, "two"), theirs, content_type=APPLY
    )
    assert (status, answer["reason"]) == (409, "Conflict"), answer
    assert answer["message"] == (
        'Apply failed with 1 conflict: conflict with "one": .spec.replicaLagTimeMaxMs'
    )
    assert answer["details"]["causes"] == [
        {
            "reason": "FieldManagerConflict",
            "message": 'conflict with "one"',
            "field": ".spec.replicaLagTimeMaxMs",
        }
    ]
    # The same value is shared ownership, no conflict.
    same = await http.ok("PATCH", _apply_path(ORDERS_0, "three"), partition(), content_type=APPLY)
    assert {e["manager"] for e in same["metadata"]["managedFields"]} == {"one", "three"}
    forced = await http.ok(
        "PATCH", _apply_path(ORDERS_0, "two", force=True), theirs, content_type=APPLY
    )
    assert forced["spec"]["replicaLagTimeMaxMs"] == 600
    owners = {e["manager"]: e["fieldsV1"] for e in forced["metadata"]["managedFields"]}
    assert "f:replicaLagTimeMaxMs" not in owners["one"]["f:spec"]
    assert "f:replicaLagTimeMaxMs" in owners["two"]["f:spec"]


async def test_server_side_apply_needs_a_field_manager(http: Http) -> None:
    status, answer = await http.call("PATCH", ORDERS_0, partition(), content_type=APPLY)
    assert (status, answer["reason"]) == (422, "Invalid"), answer
    assert answer["details"]["causes"][0]["field"] == "fieldManager"


async def test_server_side_apply_of_the_status_subresource(http: Http) -> None:
    await http.ok("POST", PARTITIONS, partition())
    status_config = {
        "apiVersion": "epochlog.dev/v1alpha1",
        "kind": "Partition",
        "metadata": {"name": "orders-0"},
        "status": {"highWatermark": 4},
    }
    applied = await http.ok(
        "PATCH", _apply_path(STATUS, "operator"), status_config, content_type=APPLY
    )
    assert applied["status"]["highWatermark"] == 4
    # A real server also records the create as an Update by the client; the emulator
    # records applies only.
    (entry,) = [e for e in applied["metadata"]["managedFields"] if e["manager"] == "operator"]
    assert entry["subresource"] == "status"
    assert applied["metadata"]["generation"] == 1
    # The status of an object that does not exist is not created by an apply.
    status_config["metadata"] = {"name": "orders-9"}
    status, answer = await http.call(
        "PATCH",
        _apply_path(f"{PARTITIONS}/orders-9/status", "operator"),
        status_config,
        content_type=APPLY,
    )
    assert (status, answer["reason"]) == (404, "NotFound")


async def test_kubectl_apply_server_side(kubectl: Kubectl, tmp_path: Any, http: Http) -> None:
    manifest = tmp_path / "p.yaml"
    manifest.write_text(
        "apiVersion: epochlog.dev/v1alpha1\nkind: Partition\nmetadata:\n  name: orders-0\n"
        "  labels:\n    tier: gold\nspec:\n  topic: orders\n  partition: 0\n"
    )
    _, out, _ = await kubectl.run("apply", "--server-side", "-f", str(manifest))
    assert "partition.epochlog.dev/orders-0 serverside-applied" in out
    manifest.write_text(
        "apiVersion: epochlog.dev/v1alpha1\nkind: Partition\nmetadata:\n  name: orders-0\n"
        "spec:\n  topic: orders\n  partition: 0\n  replicaLagTimeMaxMs: 500\n"
    )
    await kubectl.run("apply", "--server-side", "-f", str(manifest))
    stored = await http.ok("GET", ORDERS_0)
    assert stored["spec"]["replicaLagTimeMaxMs"] == 500
    assert "labels" not in stored["metadata"]
    assert [e["manager"] for e in stored["metadata"]["managedFields"]] == ["kubectl"]


# -- Secrets: stringData is merged into data --------------------------------------------------


async def test_a_secret_keeps_string_data_as_base64_data_and_refuses_bad_base64(
    http: Http,
) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "policy"},
        "data": {"a": "YQ==", "b": "Yg=="},
        "stringData": {"b": "bee", "policy.yaml": "acls: []\n"},
    }
    created = await http.ok("POST", SECRETS, body)
    assert "stringData" not in created
    assert created["data"] == {"a": "YQ==", "b": "YmVl", "policy.yaml": "YWNsczogW10K"}
    bad = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bad"}, "data": {"k": "*"}}
    status, answer = await http.call("POST", SECRETS, bad)
    # The body does not decode into a Secret: 400, as kube-apiserver 1.35 answers.
    assert (status, answer["reason"]) == (400, "BadRequest"), answer
    assert answer["message"] == (
        'Secret in version "v1" cannot be handled as a Secret: illegal base64 data at input byte 0'
    )
