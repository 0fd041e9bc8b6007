"""deploy/helm/wasmrun, rendered offline by Helm's own Go SDK (helm-python-sdk: no helm
binary, no cluster) and validated strictly against the Kubernetes API schemas that
kubernetes-validate ships in its wheel (no network); then the operator's checks on the
rendered objects: security settings, limits, and that each value changes what it says."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from tests.liveserver import REPO

helm = pytest.importorskip("helm_python")
kubernetes_validate = pytest.importorskip("kubernetes_validate")

CHART = REPO / "deploy" / "helm" / "wasmrun"
# The oldest Kubernetes the chart declares (Chart.yaml kubeVersion) and the newest schemas shipped.
KUBE_VERSIONS = ("1.27.0", kubernetes_validate.utils.latest_version())

# The least an operator must give: the database, the metrics key, where PostgreSQL is.
MINIMAL: dict[str, Any] = {
    "database": {"url": "postgresql://wasmrun:pw@db.internal:5432/wasmrun"},
    "metrics": {"key": "m" * 24},
    "networkPolicy": {"egress": {"database": {"to": [{"ipBlock": {"cidr": "10.0.0.5/32"}}]}}},
}
# Everything on: the shared store, ingress, autoscaling on CPU and queue, a policy, skill secrets.
FULL: dict[str, Any] = {
    **MINIMAL,
    "store": {"url": "s3://blobs?endpoint=https://s3.internal&region=eu-west-1",
              "accessKeyId": "AKIAEXAMPLE", "secretAccessKey": "s3cret"},
    "ingress": {"enabled": True, "className": "nginx",
                "hosts": [{"host": "wasmrun.example.com", "paths": ["/"]}],
                "tls": [{"secretName": "wasmrun-tls", "hosts": ["wasmrun.example.com"]}]},
    "autoscaling": {"enabled": True, "queue": {"enabled": True}},
    "server": {"policy": 'allowed_hosts = ["wasmrun.example.com"]\n'},
    "skillSecrets": {"values": {"WAREHOUSE_TOKEN": "t0ken"}},
    "networkPolicy": {"egress": {
        "database": {"to": [{"ipBlock": {"cidr": "10.0.0.5/32"}}]},
        "store": {"to": [{"ipBlock": {"cidr": "10.0.1.0/24"}}], "port": 443},
        "allowlist": [{"cidr": "203.0.113.10/32", "ports": [443]}],
    }},
}


def merged(base: dict[str, Any], more: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in more.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def render(values: dict[str, Any]) -> list[dict[str, Any]]:
    with helm.Chart.load(str(CHART)) as chart:
        files = chart.render(values, name="demo", namespace="prod")
    docs: list[dict[str, Any]] = []
    for text in files.values():
        docs.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return docs


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"{kind} {name or ''}: {len(found)} rendered"
    return found[0]


def kinds(docs: list[dict[str, Any]]) -> set[str]:
    return {d["kind"] for d in docs}


def pod_specs(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d["spec"]["template"]["spec"] for d in docs if d["kind"] in ("Deployment", "Job")]


def server(docs: list[dict[str, Any]]) -> dict[str, Any]:
    container: dict[str, Any] = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    return container


@pytest.fixture(scope="module")
def full() -> list[dict[str, Any]]:
    return render(FULL)


@pytest.fixture(scope="module")
def minimal() -> list[dict[str, Any]]:
    return render(MINIMAL)


def test_chart_lints_clean() -> None:
    result = helm.lint(str(CHART), values=FULL)
    assert result["errors"] == [], result
    assert [m for m in result["messages"] if m["severity"] > 1] == [], result["messages"]


@pytest.mark.parametrize("version", KUBE_VERSIONS)
@pytest.mark.parametrize("which", ["minimal", "full"])
def test_every_object_validates_strictly(which: str, version: str, request: pytest.FixtureRequest) -> None:
    docs = request.getfixturevalue(which)
    assert docs
    for doc in docs:
        # strict: a misspelt or misplaced field is an error, not silently dropped by the API server
        kubernetes_validate.validate(doc, version, strict=True)


def test_strict_validation_catches_a_misplaced_field(minimal: list[dict[str, Any]]) -> None:
    bad = copy.deepcopy(one(minimal, "Deployment"))
    bad["spec"]["template"]["spec"]["containers"][0]["readOnlyRootFS"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, KUBE_VERSIONS[-1], strict=True)


def test_what_is_rendered(minimal: list[dict[str, Any]], full: list[dict[str, Any]]) -> None:
    assert kinds(minimal) == {"Deployment", "Service", "ServiceAccount", "Secret", "PodDisruptionBudget",
                              "NetworkPolicy", "Job"}
    assert kinds(full) == kinds(minimal) | {"Ingress", "HorizontalPodAutoscaler", "ConfigMap"}


@pytest.mark.parametrize("which", ["minimal", "full"])
def test_no_root_no_privilege_read_only_root(which: str, request: pytest.FixtureRequest) -> None:
    docs = request.getfixturevalue(which)
    specs = pod_specs(docs)
    assert len(specs) == 2  # the servers and the migration Job
    for spec in specs:
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] > 0
        assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
        assert spec["automountServiceAccountToken"] is False
        for key in ("hostNetwork", "hostPID", "hostIPC"):
            assert not spec.get(key)
        assert all("hostPath" not in volume for volume in spec.get("volumes", []))
        for container in spec.get("initContainers", []) + spec["containers"]:
            ctx = container["securityContext"]
            assert ctx["runAsNonRoot"] is True and ctx["runAsUser"] > 0
            assert ctx["privileged"] is False
            assert ctx["allowPrivilegeEscalation"] is False
            assert ctx["readOnlyRootFilesystem"] is True
            assert ctx["capabilities"] == {"drop": ["ALL"]}
            assert "add" not in ctx["capabilities"]
            assert not container.get("ports") or all("hostPort" not in p for p in container["ports"])
            for kind in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(container["resources"][kind]), container["name"]


def test_every_path_the_server_writes_is_a_bounded_empty_dir(minimal: list[dict[str, Any]]) -> None:
    spec = one(minimal, "Deployment")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in server(minimal)["volumeMounts"]}
    env = {e["name"]: e.get("value") for e in server(minimal)["env"]}
    for path in ("/data", "/tmp", env["WASMRUN_CACHE_DIR"]):
        assert path in mounts, path
        assert volumes[mounts[path]]["emptyDir"]["sizeLimit"]
    assert env["WASMRUN_DATA_DIR"] == "/data"
    # The cache starts from the image's (made at build), so a pod serves without making images.
    seed = spec["initContainers"][0]
    assert seed["command"][:2] == ["cp", "-a"] and seed["command"][2].startswith(env["WASMRUN_CACHE_DIR"])


def test_probes_drain_and_budget(minimal: list[dict[str, Any]]) -> None:
    container = server(minimal)
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        get = container[probe]["httpGet"]
        assert get["path"] == "/healthz" and get["port"] == "http"
        # a name the server answers even when the policy's allowed_hosts is set
        assert {"name": "Host", "value": "localhost"} in get["httpHeaders"]
    assert container["lifecycle"]["preStop"]["exec"]["command"][0] == "sleep"
    spec = one(minimal, "Deployment")["spec"]
    assert spec["template"]["spec"]["terminationGracePeriodSeconds"] > int(
        container["lifecycle"]["preStop"]["exec"]["command"][1])
    assert spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    pdb = one(minimal, "PodDisruptionBudget")["spec"]
    assert pdb["maxUnavailable"] == 1
    assert pdb["selector"]["matchLabels"] == spec["selector"]["matchLabels"]


def test_server_flags_and_settings(minimal: list[dict[str, Any]]) -> None:
    args = server(minimal)["args"]
    assert args[0] == "serve" and "--host=0.0.0.0" in args and "--workers=2" in args
    assert "--packages=off" in args  # no index reachable through the NetworkPolicy by default
    changed = server(render(merged(MINIMAL, {"server": {"workers": 4, "guestImage": "stdlib"}})))["args"]
    assert "--workers=4" in changed and "--image=stdlib" in changed


def test_replicas_and_autoscaling() -> None:
    assert one(render(merged(MINIMAL, {"replicaCount": 5})), "Deployment")["spec"]["replicas"] == 5
    docs = render(merged(FULL, {"autoscaling": {"minReplicas": 3, "maxReplicas": 7}}))
    assert "replicas" not in one(docs, "Deployment")["spec"]  # the HPA owns the count
    hpa = one(docs, "HorizontalPodAutoscaler")["spec"]
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (3, 7)
    assert hpa["scaleTargetRef"]["name"] == one(docs, "Deployment")["metadata"]["name"]
    by_type = {m["type"]: m for m in hpa["metrics"]}
    assert by_type["Resource"]["resource"]["name"] == "cpu"
    assert by_type["Pods"]["pods"]["metric"]["name"] == "wasmrun_runs_queued"
    cpu_only = one(render(merged(MINIMAL, {"autoscaling": {"enabled": True}})), "HorizontalPodAutoscaler")
    assert [m["type"] for m in cpu_only["spec"]["metrics"]] == ["Resource"]


def test_resources_follow_values() -> None:
    resources = {"requests": {"cpu": "500m", "memory": "600Mi"}, "limits": {"cpu": "1", "memory": "1200Mi"}}
    docs = render(merged(MINIMAL, {"resources": resources}))
    for kind in ("requests", "limits"):  # Helm merges maps: ephemeral-storage keeps its default
        got = server(docs)["resources"][kind]
        assert {k: got[k] for k in ("cpu", "memory")} == resources[kind]
        assert got["ephemeral-storage"]
    env = {e["name"]: e.get("value") for e in server(render(merged(MINIMAL, {"server": {"maxMemoryMb": 300}})))["env"]}
    assert env["WASMRUN_MAX_MEMORY_MB"] == "300"


def test_ingress_on_and_off(minimal: list[dict[str, Any]], full: list[dict[str, Any]]) -> None:
    assert "Ingress" not in kinds(minimal)
    ingress = one(full, "Ingress")["spec"]
    assert ingress["ingressClassName"] == "nginx"
    rule = ingress["rules"][0]
    assert rule["host"] == "wasmrun.example.com"
    assert rule["http"]["paths"][0]["backend"]["service"]["name"] == one(full, "Service")["metadata"]["name"]
    assert ingress["tls"][0]["secretName"] == "wasmrun-tls"


def test_network_policy_egress_is_only_dns_database_store_and_allowlist(full: list[dict[str, Any]]) -> None:
    policy = one(full, "NetworkPolicy")["spec"]
    assert set(policy["policyTypes"]) == {"Ingress", "Egress"}
    egress = policy["egress"]
    assert all(rule.get("to") for rule in egress)  # no rule open to every destination
    ports = [sorted((p["port"], p["protocol"]) for p in rule["ports"]) for rule in egress]
    assert ports[0] == [(53, "TCP"), (53, "UDP")]
    assert egress[0]["to"][0]["podSelector"]["matchLabels"] == {"k8s-app": "kube-dns"}
    cidrs = [rule["to"][0].get("ipBlock", {}).get("cidr") for rule in egress[1:]]
    assert cidrs == ["10.0.0.5/32", "10.0.1.0/24", "203.0.113.10/32"]
    assert ports[1:] == [[(5432, "TCP")], [(443, "TCP")], [(443, "TCP")]]
    # the migration Job is held to the same egress
    names = policy["podSelector"]["matchExpressions"][0]["values"]
    job_labels = one(full, "Job")["spec"]["template"]["metadata"]["labels"]
    assert job_labels["app.kubernetes.io/name"] in names


def test_network_policy_hosts_follow_values() -> None:
    hosts = [{"cidr": "198.51.100.7/32", "ports": [443, 8443]}, {"cidr": "192.0.2.0/28"}]
    docs = render(merged(MINIMAL, {"networkPolicy": {"egress": {"allowlist": hosts}}}))
    egress = one(docs, "NetworkPolicy")["spec"]["egress"]
    extra = {rule["to"][0]["ipBlock"]["cidr"]: [p["port"] for p in rule["ports"]] for rule in egress[2:]}
    assert extra == {"198.51.100.7/32": [443, 8443], "192.0.2.0/28": [443]}
    assert "NetworkPolicy" not in kinds(render(merged(MINIMAL, {"networkPolicy": {"enabled": False}})))


def test_network_policy_refuses_an_open_egress() -> None:
    # an empty `to` would allow every destination: the chart refuses to render it
    with pytest.raises(Exception, match="networkPolicy.egress.database.to"):
        render(merged(MINIMAL, {"networkPolicy": {"egress": {"database": {"to": []}}}}))
    with pytest.raises(Exception, match="networkPolicy.egress.store.to"):
        render(merged(FULL, {"networkPolicy": {"egress": {"store": {"to": []}}}}))


def secret_refs(container: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {e["name"]: (e["valueFrom"]["secretKeyRef"]["name"], e["valueFrom"]["secretKeyRef"]["key"])
            for e in container["env"] if "valueFrom" in e}


def test_secrets_the_chart_makes(full: list[dict[str, Any]]) -> None:
    secrets = {d["metadata"]["name"]: d["stringData"] for d in full if d["kind"] == "Secret"}
    assert secrets == {
        "demo-wasmrun-database": {"url": FULL["database"]["url"]},
        "demo-wasmrun-store": {"access-key-id": "AKIAEXAMPLE", "secret-access-key": "s3cret"},
        "demo-wasmrun-metrics": {"key": "m" * 24},
        "demo-wasmrun-skill-secrets": {"WAREHOUSE_TOKEN": "t0ken"},
    }
    refs = secret_refs(server(full))
    assert refs == {
        "WASMRUN_DATABASE_URL": ("demo-wasmrun-database", "url"),
        "AWS_ACCESS_KEY_ID": ("demo-wasmrun-store", "access-key-id"),
        "AWS_SECRET_ACCESS_KEY": ("demo-wasmrun-store", "secret-access-key"),
        "WASMRUN_METRICS_KEY": ("demo-wasmrun-metrics", "key"),
    }
    assert server(full)["envFrom"] == [{"prefix": "WASMRUN_SECRET_",
                                        "secretRef": {"name": "demo-wasmrun-skill-secrets"}}]
    # no secret value is written into a pod spec
    text = yaml.safe_dump(pod_specs(full))
    for value in ("pw@", "s3cret", "t0ken", "m" * 24):
        assert value not in text


def test_existing_secrets_are_used_by_name_and_not_made() -> None:
    docs = render(merged(FULL, {
        "database": {"url": "", "existingSecret": "pg-credentials", "secretKey": "dsn"},
        "store": {"accessKeyId": "", "secretAccessKey": "", "existingSecret": "s3-credentials"},
        "metrics": {"key": "", "existingSecret": "scraper"},
        "skillSecrets": {"values": {}, "existingSecret": "skill-tokens"},
    }))
    assert not [d for d in docs if d["kind"] == "Secret"]
    refs = secret_refs(server(docs))
    assert refs["WASMRUN_DATABASE_URL"] == ("pg-credentials", "dsn")
    assert refs["AWS_SECRET_ACCESS_KEY"] == ("s3-credentials", "secret-access-key")
    assert refs["WASMRUN_METRICS_KEY"] == ("scraper", "key")
    assert server(docs)["envFrom"][0]["secretRef"]["name"] == "skill-tokens"
    job = one(docs, "Job")["spec"]["template"]["spec"]["containers"][0]
    assert secret_refs(job)["WASMRUN_DATABASE_URL"] == ("pg-credentials", "dsn")


def test_migration_job_runs_wasmrun_migrate_before_install_and_upgrade(minimal: list[dict[str, Any]]) -> None:
    job = one(minimal, "Job")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["args"] == ["migrate"]
    assert container["image"] == server(minimal)["image"]
    # the Secret it reads exists before it: an earlier hook
    database = one(minimal, "Secret", "demo-wasmrun-database")["metadata"]["annotations"]
    assert int(database["helm.sh/hook-weight"]) < int(job["metadata"]["annotations"]["helm.sh/hook-weight"])
    assert "Job" not in kinds(render(merged(MINIMAL, {"migration": {"enabled": False}})))


def test_policy_file_is_mounted(full: list[dict[str, Any]]) -> None:
    assert "--policy-file=/etc/wasmrun/policy.toml" in server(full)["args"]
    assert one(full, "ConfigMap")["data"]["policy.toml"] == FULL["server"]["policy"]


@pytest.mark.parametrize("bad", [
    {"metrics": {"key": "short"}},
    {"server": {"guestImage": "huge"}},
    {"database": {"url": "mysql://x"}},
    {"networkPolicy": {"egress": {"allowlist": [{"cidr": "example.com"}]}}},
])
def test_values_schema_refuses_a_wrong_value(bad: dict[str, Any]) -> None:
    with pytest.raises(Exception, match="schema"):
        render(merged(MINIMAL, bad))


def test_required_values_are_named() -> None:
    with pytest.raises(Exception, match="database.url or database.existingSecret"):
        render({k: v for k, v in MINIMAL.items() if k != "database"})
    with pytest.raises(Exception, match="metrics.key"):
        render({k: v for k, v in MINIMAL.items() if k != "metrics"})


def test_chart_matches_the_dockerfile(minimal: list[dict[str, Any]]) -> None:
    """The pods run as the image's user and seed the cache from where the image made it:
    a mismatch is a pod that cannot write its cache or finds it empty."""
    dockerfile = (CHART.parent.parent.parent / "Dockerfile").read_text()
    assert "--uid 10001" in dockerfile and "\nUSER wasmrun\n" in dockerfile
    env = {e["name"]: e.get("value") for e in server(minimal)["env"]}
    assert f"WASMRUN_CACHE_DIR={env['WASMRUN_CACHE_DIR']}" in dockerfile
    assert one(minimal, "Deployment")["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == 10001
    assert "wasmrun images install data" in dockerfile and "wasmrun warm" in dockerfile
