"""The API emulator over real HTTP: the behaviours of a real API server a controller relies on."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import pytest
from kmock import resource

from epochlog_tools.kubeapi import emulator
from epochlog_tools.kubeapi.apiserver import ApiServer
from tests.devcluster.conftest import EVENTS, PARTITIONS, Http, partition
from tests.waiting import until

ORDERS_0 = f"{PARTITIONS}/orders-0"
STATUS = f"{ORDERS_0}/status"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


async def test_discovery_lists_partitions_with_status_and_short_name(http: Http) -> None:
    groups = await http.ok("GET", "/apis")
    assert "epochlog.dev" in [g["name"] for g in groups["groups"]]
    listing = await http.ok("GET", "/apis/epochlog.dev/v1alpha1")
    by_name = {r["name"]: r for r in listing["resources"]}
    assert by_name["partitions"]["shortNames"] == ["part"]
    assert by_name["partitions"]["namespaced"] is True
    assert by_name["partitions"]["kind"] == "Partition"
    assert "partitions/status" in by_name
    core = {r["name"] for r in (await http.ok("GET", "/api/v1"))["resources"]}
    assert {"namespaces", "events"} <= core


async def test_create_sets_server_fields_and_defaults(http: Http) -> None:
    created = await http.ok("POST", PARTITIONS, partition())
    meta = created["metadata"]
    assert meta["namespace"] == "default"
    assert meta["generation"] == 1
    assert meta["uid"]
    assert meta["creationTimestamp"]
    assert meta["resourceVersion"]
    assert created["spec"]["replicationFactor"] == 3
    assert created["spec"]["minInsyncReplicas"] == 2
    assert created["spec"]["replicaLagTimeMaxMs"] == 10_000
    assert created["spec"]["uncleanLeaderElection"] is False
    assert created == await http.ok("GET", ORDERS_0)
    status, again = await http.call("POST", PARTITIONS, partition())
    assert (status, again["reason"]) == (409, "AlreadyExists")


async def test_every_write_gets_a_new_resource_version(http: Http) -> None:
    rv0 = (await http.ok("POST", PARTITIONS, partition()))["metadata"]["resourceVersion"]
    patched = await http.ok(
        "PATCH",
        ORDERS_0,
        {"metadata": {"labels": {"a": "b"}}},
        content_type="application/merge-patch+json",
    )
    rv1 = patched["metadata"]["resourceVersion"]
    assert int(rv1) > int(rv0)
    # A patch that changes nothing is no write: same resourceVersion.
    same = await http.ok(
        "PATCH",
        ORDERS_0,
        {"metadata": {"labels": {"a": "b"}}},
        content_type="application/merge-patch+json",
    )
    assert same["metadata"]["resourceVersion"] == rv1


async def test_stale_resource_version_is_a_409_conflict(http: Http) -> None:
    created = await http.ok("POST", PARTITIONS, partition())
    stale = created["metadata"]["resourceVersion"]
    changed = dict(created, spec={**created["spec"], "replicaLagTimeMaxMs": 5000})
    fresh = await http.ok("PUT", ORDERS_0, changed)
    assert fresh["spec"]["replicaLagTimeMaxMs"] == 5000

    status, body = await http.call("PUT", ORDERS_0, changed)  # still carries the old version
    assert status == 409
    assert body["kind"] == "Status"
    assert body["reason"] == "Conflict"
    assert "the object has been modified" in body["message"]

    stale_status = {"metadata": {"resourceVersion": stale}, "status": {"leaderEpoch": 1}}
    status, body = await http.merge(STATUS, stale_status)
    assert (status, body["reason"]) == (409, "Conflict")

    current = fresh["metadata"]["resourceVersion"]
    ok = {"metadata": {"resourceVersion": current}, "status": {"leaderEpoch": 1}}
    status, body = await http.merge(STATUS, ok)
    assert status == 200
    assert body["status"]["leaderEpoch"] == 1


async def test_update_without_resource_version_is_rejected(http: Http) -> None:
    created = await http.ok("POST", PARTITIONS, partition())
    del created["metadata"]["resourceVersion"]
    status, body = await http.call("PUT", ORDERS_0, created)
    assert status == 422
    assert body["details"]["causes"][0]["field"] == "metadata.resourceVersion"


async def test_status_subresource_separates_spec_and_status(http: Http) -> None:
    # Status sent on create or with the main resource is ignored.
    body = partition()
    body["status"] = {"leaderEpoch": 9}
    created = await http.ok("POST", PARTITIONS, body)
    assert "status" not in created

    status = {"status": {"leader": 1, "leaderEpoch": 2, "isr": [1], "replicas": [1, 2, 3]}}
    with_status = await http.ok(
        "PATCH", STATUS, status, content_type="application/merge-patch+json"
    )
    assert with_status["status"]["leader"] == 1
    assert with_status["status"]["highWatermark"] == 0  # defaulted
    assert with_status["metadata"]["generation"] == 1  # status writes keep generation

    # A status write cannot change the spec...
    sneaky = {"spec": {"replicaLagTimeMaxMs": 1}, "status": {"highWatermark": 5}}
    after = await http.ok("PATCH", STATUS, sneaky, content_type="application/merge-patch+json")
    assert after["spec"]["replicaLagTimeMaxMs"] == 10_000
    assert after["status"]["highWatermark"] == 5

    # ...and a spec write cannot change the status.
    spec_write = {"spec": {"replicaLagTimeMaxMs": 2000}, "status": {"highWatermark": 99}}
    after = await http.ok(
        "PATCH", ORDERS_0, spec_write, content_type="application/merge-patch+json"
    )
    assert after["spec"]["replicaLagTimeMaxMs"] == 2000
    assert after["status"]["highWatermark"] == 5

    # A PUT of the whole object to the status subresource keeps the stored spec.
    after["spec"]["replicaLagTimeMaxMs"] = 7
    after["status"]["highWatermark"] = 6
    put = await http.ok("PUT", STATUS, after)
    assert (put["spec"]["replicaLagTimeMaxMs"], put["status"]["highWatermark"]) == (2000, 6)


async def test_generation_counts_spec_changes_only(http: Http) -> None:
    await http.ok("POST", PARTITIONS, partition())
    merge = "application/merge-patch+json"
    meta = await http.ok(
        "PATCH", ORDERS_0, {"metadata": {"annotations": {"x": "y"}}}, content_type=merge
    )
    assert meta["metadata"]["generation"] == 1
    status = await http.ok("PATCH", STATUS, {"status": {"highWatermark": 3}}, content_type=merge)
    assert status["metadata"]["generation"] == 1
    spec = await http.ok(
        "PATCH", ORDERS_0, {"spec": {"uncleanLeaderElection": True}}, content_type=merge
    )
    assert spec["metadata"]["generation"] == 2
    again = await http.ok(
        "PATCH", ORDERS_0, {"spec": {"uncleanLeaderElection": True}}, content_type=merge
    )
    assert again["metadata"]["generation"] == 2


async def test_invalid_spec_is_422_naming_the_field(http: Http) -> None:
    status, body = await http.call("POST", PARTITIONS, partition(minInsyncReplicas=5))
    assert status == 422
    assert body["reason"] == "Invalid"
    assert "spec.minInsyncReplicas" in body["message"]
    assert "minInsyncReplicas must not exceed replicationFactor" in body["message"]
    assert body["details"]["causes"][0]["field"] == "spec.minInsyncReplicas"

    status, body = await http.call("POST", PARTITIONS, partition(partition=-1))
    assert status == 422
    assert "spec.partition" in body["message"]

    status, body = await http.call("POST", PARTITIONS, partition(replicas=[1, 1, 2]))
    assert status == 422
    assert "spec.replicas[1]: Duplicate value: 1" in body["message"]

    bad_topic = partition()
    bad_topic["spec"]["topic"] = "Orders"
    status, body = await http.call("POST", PARTITIONS, bad_topic)
    assert status == 422
    assert "spec.topic" in body["message"]

    await http.ok("POST", PARTITIONS, partition())
    merge = "application/merge-patch+json"
    status, body = await http.call(
        "PATCH", ORDERS_0, {"spec": {"replicas": [1, 2]}}, content_type=merge
    )
    assert status == 422
    assert "spec.replicas" in body["message"]
    status, body = await http.call(
        "PATCH", STATUS, {"status": {"leader": 4, "isr": [1]}}, content_type=merge
    )
    assert status == 422
    assert "status.leader" in body["message"]


async def test_unknown_fields_strict_rejects_warn_prunes(http: Http, api: ApiServer) -> None:
    body = partition()
    body["spec"]["colour"] = "blue"
    status, error = await http.call("POST", f"{PARTITIONS}?fieldValidation=Strict", body)
    assert status == 400
    assert 'unknown field "spec.colour"' in error["message"]
    async with http.session.post(PARTITIONS, json=body) as rsp:  # default: Warn
        assert rsp.status == 201
        assert "spec.colour" in rsp.headers["Warning"]
        assert "colour" not in (await rsp.json())["spec"]


async def test_finalizers_delay_deletion(http: Http) -> None:
    body = partition()
    body["metadata"]["finalizers"] = ["epochlog.dev/test"]
    await http.ok("POST", PARTITIONS, body)
    marked = await http.ok("DELETE", ORDERS_0)
    assert marked["metadata"]["deletionTimestamp"]
    assert (await http.ok("GET", ORDERS_0))["metadata"]["deletionTimestamp"]
    # kopf removes its finalizer with a JSON patch guarded by a resourceVersion test.
    rv = marked["metadata"]["resourceVersion"]
    ops = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "0"},
        {"op": "remove", "path": "/metadata/finalizers/0"},
    ]
    status, _ = await http.call("PATCH", ORDERS_0, ops, content_type="application/json-patch+json")
    assert status == 422  # the test op failed
    ops[0]["value"] = rv
    await http.ok("PATCH", ORDERS_0, ops, content_type="application/json-patch+json")
    status, gone = await http.call("GET", ORDERS_0)
    assert (status, gone["reason"]) == (404, "NotFound")


async def test_delete_and_not_found(http: Http) -> None:
    await http.ok("POST", PARTITIONS, partition())
    deleted = await http.ok("DELETE", ORDERS_0)
    assert (deleted["status"], deleted["details"]["name"]) == ("Success", "orders-0")
    status, body = await http.call("DELETE", ORDERS_0)
    assert status == 404
    assert body["message"] == 'partitions.epochlog.dev "orders-0" not found'


async def test_namespaces_list_create_and_scope(http: Http) -> None:
    names = {n["metadata"]["name"] for n in (await http.ok("GET", "/api/v1/namespaces"))["items"]}
    assert "default" in names
    status, body = await http.call(
        "POST", "/apis/epochlog.dev/v1alpha1/namespaces/team-a/partitions", partition()
    )
    assert (status, body["reason"]) == (404, "NotFound")
    await http.ok("POST", "/api/v1/namespaces", {"metadata": {"name": "team-a"}})
    assert (await http.ok("GET", "/api/v1/namespaces/team-a"))["status"]["phase"] == "Active"
    await http.ok("POST", "/apis/epochlog.dev/v1alpha1/namespaces/team-a/partitions", partition())
    await http.ok("POST", PARTITIONS, partition("orders-1"))
    everywhere = await http.ok("GET", "/apis/epochlog.dev/v1alpha1/partitions")
    assert sorted(
        (p["metadata"]["namespace"], p["metadata"]["name"]) for p in everywhere["items"]
    ) == [
        ("default", "orders-1"),
        ("team-a", "orders-0"),
    ]
    await http.ok("DELETE", "/api/v1/namespaces/team-a")

    # A real server's namespace controller deletes what the namespace held, after the
    # answer; the emulator does it at once.
    async def emptied() -> bool:
        status, _ = await http.call(
            "GET", "/apis/epochlog.dev/v1alpha1/namespaces/team-a/partitions/orders-0"
        )
        return status == 404

    await until(emptied, "the namespace's partition deleted", expected_s=30)
    status, body = await http.call("DELETE", "/api/v1/namespaces/default")
    assert status == 403


async def test_events_with_field_selectors(http: Http) -> None:
    created = await http.ok("POST", PARTITIONS, partition())
    uid = created["metadata"]["uid"]

    def event(name: str, reason: str, uid: str) -> dict[str, object]:
        return {
            "metadata": {"generateName": f"{name}."},
            "involvedObject": {
                "apiVersion": "epochlog.dev/v1alpha1",
                "kind": "Partition",
                "name": name,
                "namespace": "default",
                "uid": uid,
            },
            "reason": reason,
            "message": "broker 1 leads epoch 1",
            "type": "Normal",
            "source": {"component": "epochlog-operator"},
            "firstTimestamp": "2024-05-01T10:00:00.123456+00:00",
            "lastTimestamp": "2024-05-01T10:00:00.123456+00:00",
        }

    posted = await http.ok("POST", EVENTS, event("orders-0", "LeaderElected", uid))
    assert posted["metadata"]["name"].startswith("orders-0.")
    assert posted["firstTimestamp"] == "2024-05-01T10:00:00Z"
    await http.ok("POST", EVENTS, event("orders-0", "IsrShrunk", "another-uid"))
    await http.ok("POST", EVENTS, event("orders-1", "LeaderElected", "x"))

    def selected(selector: str) -> str:
        return f"{EVENTS}?fieldSelector={selector}"

    by_name = await http.ok("GET", selected("involvedObject.name=orders-0"))
    assert len(by_name["items"]) == 2
    described = await http.ok(
        "GET",
        selected(
            "involvedObject.name=orders-0,involvedObject.namespace=default,"
            f"involvedObject.kind=Partition,involvedObject.uid={uid}"
        ),
    )
    assert [e["reason"] for e in described["items"]] == ["LeaderElected"]
    not_elected = await http.ok("GET", selected("reason!=LeaderElected"))
    assert [e["reason"] for e in not_elected["items"]] == ["IsrShrunk"]
    status, body = await http.call("GET", selected("message=x"))
    assert status == 400
    assert "field label not supported" in body["message"]


async def test_label_selectors(http: Http) -> None:
    for name, tier in (("orders-0", "gold"), ("orders-1", "silver"), ("orders-2", None)):
        body = partition(name)
        if tier:
            body["metadata"]["labels"] = {"tier": tier}
        await http.ok("POST", PARTITIONS, body)

    async def names(selector: str) -> list[str]:
        found = await http.ok("GET", f"{PARTITIONS}?labelSelector={selector}")
        return [p["metadata"]["name"] for p in found["items"]]

    assert await names("tier=gold") == ["orders-0"]
    assert await names("tier in (gold,silver)") == ["orders-0", "orders-1"]
    assert await names("!tier") == ["orders-2"]
    assert await names("tier,tier!=gold") == ["orders-1"]


async def test_table_with_printer_columns(http: Http) -> None:
    await http.ok("POST", PARTITIONS, partition())
    measured = datetime.now(UTC) - timedelta(minutes=30)
    status = {
        "status": {
            "leader": 1,
            "leaderEpoch": 4,
            "isr": [1, 2],
            "replicas": [1, 2, 3],
            "highWatermark": 42,
            "highWatermarkTime": measured.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "InSync", "lastTransitionTime": "t"},
                {
                    "type": "Offline",
                    "status": "False",
                    "reason": "LeaderAvailable",
                    "lastTransitionTime": "t",
                },
            ],
        }
    }
    await http.ok("PATCH", STATUS, status, content_type="application/merge-patch+json")
    found = await http.ok("GET", PARTITIONS, headers={"Accept": TABLE})
    assert found["kind"] == "Table"
    names = [c["name"] for c in found["columnDefinitions"]]
    assert names == [
        "Name",
        "Topic",
        "Partition",
        "Leader",
        "Epoch",
        "ISR",
        "Replicas",
        "HW",
        "HW-Age",
        "Status",
        "Age",
        # priority 1: shown by kubectl get -o wide
        "Log-Start",
        "Adding",
        "Removing",
        "ELR",
    ]
    (row,) = found["rows"]
    cells = row["cells"]
    assert cells[:8] == ["orders-0", "orders", 0, 1, 4, "[1,2]", "[1,2,3]", 42]
    assert re.fullmatch(r"\d+m", cells[8]), cells[8]  # the HW's age: 30 minutes and a bit
    assert cells[9] == "InSync"
    assert cells[10].endswith("s")
    assert row["object"]["metadata"]["name"] == "orders-0"
    single = await http.ok("GET", ORDERS_0, headers={"Accept": TABLE})
    assert single["rows"][0]["cells"][0] == "orders-0"


async def test_limit_and_continue(http: Http) -> None:
    for i in range(5):
        await http.ok("POST", PARTITIONS, partition(f"orders-{i}"))
    first = await http.ok("GET", f"{PARTITIONS}?limit=2")
    assert len(first["items"]) == 2
    assert first["metadata"]["remainingItemCount"] == 3
    rest = await http.ok("GET", f"{PARTITIONS}?limit=10&continue={first['metadata']['continue']}")
    assert [p["metadata"]["name"] for p in rest["items"]] == ["orders-2", "orders-3", "orders-4"]


@pytest.mark.emulator_only
async def test_injected_fault_takes_precedence(http: Http, api: ApiServer) -> None:
    # kmock's reaction DSL still works ahead of the emulated behaviour.
    api.handler["patch", resource("epochlog.dev", "v1alpha1", "partitions")] << 503
    await http.ok("POST", PARTITIONS, partition())
    status, _ = await http.call(
        "PATCH", STATUS, {"status": {}}, content_type="application/merge-patch+json"
    )
    assert status == 503
    assert (await http.ok("GET", ORDERS_0))["metadata"]["name"] == "orders-0"


@pytest.mark.emulator_only
async def test_a_listener_hears_every_request_also_past_the_ones_kept(
    http: Http, api: ApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(emulator, "REQUESTS_KEPT", 4)
    heard: list[tuple[str, str, object]] = []
    api.handler.listen(lambda r: heard.append((str(r.method.value), r.url.path, r.data)))
    await http.ok("POST", PARTITIONS, partition())
    for _ in range(10):
        await http.ok("GET", ORDERS_0)
    assert heard[0][:2] == ("POST", PARTITIONS)
    assert isinstance(heard[0][2], dict)
    assert heard[0][2]["metadata"]["name"] == "orders-0"
    assert heard[1:] == [("GET", ORDERS_0, None)] * 10


@pytest.mark.emulator_only
async def test_in_process_objects_are_visible(http: Http, api: ApiServer) -> None:
    await http.ok("POST", PARTITIONS, partition())
    stored = api.handler.objects["epochlog.dev/v1alpha1/partitions", "default", "orders-0"]
    assert stored >= {"spec": {"topic": "orders"}}


async def test_kopf_peering_resources_are_served(http: Http) -> None:
    peerings = "/apis/kopf.dev/v1/clusterkopfpeerings"
    await http.ok(
        "POST",
        peerings,
        {
            "apiVersion": "kopf.dev/v1",
            "kind": "ClusterKopfPeering",
            "metadata": {"name": "default"},
        },
    )
    # kopf announces itself with a merge patch of the (non-subresource) status.
    peer = {
        "status": {"host-1": {"priority": 0, "lifetime": 60, "lastseen": "2024-01-01T00:00:00"}}
    }
    patched = await http.ok(
        "PATCH", f"{peerings}/default", peer, content_type="application/merge-patch+json"
    )
    assert patched["status"]["host-1"]["lifetime"] == 60
    listing = await http.ok("GET", "/apis/kopf.dev/v1")
    assert {r["name"] for r in listing["resources"]} == {"clusterkopfpeerings", "kopfpeerings"}


async def test_crds_are_objects_and_creating_one_serves_it(http: Http) -> None:
    crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    names = {c["metadata"]["name"] for c in (await http.ok("GET", crds))["items"]}
    assert "partitions.epochlog.dev" in names
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.dev"},
        "spec": {
            "group": "example.dev",
            "scope": "Namespaced",
            "names": {"kind": "Widget", "plural": "widgets"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "properties": {"size": {"type": "integer", "minimum": 1}},
                                }
                            },
                        }
                    },
                }
            ],
        },
    }
    await http.ok("POST", crds, crd)

    # Established after the answer on a real server (the emulator establishes at once);
    # served from then on.
    async def established() -> bool:
        got = await http.ok("GET", f"{crds}/widgets.example.dev")
        conditions = (got.get("status") or {}).get("conditions") or []
        return {c["type"] for c in conditions if c["status"] == "True"} >= {
            "NamesAccepted",
            "Established",
        }

    await until(established, "the CRD established", expected_s=10)
    widgets = "/apis/example.dev/v1/namespaces/default/widgets"

    # Until then, and once the CRD is gone, a real server answers a path it does not
    # serve with "404 page not found" in plain text: only the status is read.
    async def status_of(path: str) -> int:
        async with http.session.get(path) as rsp:
            return rsp.status

    async def served() -> bool:
        return await status_of(widgets) == 200

    await until(served, "widgets served", expected_s=10)
    # A custom object's body must say what it is; a built-in kind's need not.
    for untyped in ({"metadata": {"name": "w"}}, {"metadata": {"name": "w", "labels": {}}}):
        status, body = await http.call("POST", widgets, untyped)
        assert (status, body["reason"]) == (400, "BadRequest")
        sent = json.dumps(untyped)  # as the client sent it
        start = sent if len(sent) <= 30 else f"{sent[:30]} ..."
        assert body["message"] == (
            "the object provided is unrecognized (must be of type Widget): Object 'Kind' is "
            f"missing in '{sent}' ({start})"
        )
    typed = {"apiVersion": "example.dev/v1", "kind": "Widget"}
    await http.ok("POST", widgets, {**typed, "metadata": {"name": "w"}, "spec": {"size": 2}})
    status, body = await http.call(
        "POST", widgets, {**typed, "metadata": {"name": "v"}, "spec": {"size": 0}}
    )
    assert status == 422
    assert "spec.size" in body["message"]
    await http.ok("DELETE", f"{crds}/widgets.example.dev")

    async def gone() -> bool:
        return await status_of(f"{widgets}/w") == 404

    await until(gone, "the widget gone with its CRD", expected_s=10)


async def test_a_partition_named_other_than_its_topic_and_index_is_refused(http: Http) -> None:
    """Brokers and clients name a partition by its resource name, the access policy its
    topic by spec.topic: a name that is not `<topic>-<partition>` would let them differ."""
    for name, spec in (("orders-1", {"partition": 0}), ("payments-0", {"topic": "orders"})):
        body = partition(name)
        body["spec"].update(spec)
        status, answer = await http.call("POST", PARTITIONS, body)
        assert status == 422, answer
        assert "metadata.name must be <spec.topic>-<spec.partition>" in answer["message"]
    status, _ = await http.call("POST", PARTITIONS, partition("orders.eu-12"))
    assert status == 201
