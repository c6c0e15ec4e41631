"""The Helm chart, rendered by the real helm: lint, Kubernetes schemas, values schema, shape.

Every value set under ``deploy/helm/gpuwatch/ci/`` is linted (``helm lint --strict``) and
rendered; every rendered object is validated strictly against the Kubernetes API schemas
of the oldest and the newest supported version (``kubernetes-validate``), and the custom
resources (ServiceMonitor, PrometheusRule, ScaledObject, TriggerAuthentication) against the
small schemas of :mod:`tests.deploy.crd_schemas`. Invalid values must be refused with a
message that names the value.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.deploy.crd_schemas import BY_KIND
from tests.deploy.helm import CHART, ROOT, Chart, HelmError, Rendered, value_set, value_set_names

#: The oldest and newest Kubernetes the chart supports (Chart.yaml kubeVersion >= 1.25).
KUBE_VERSIONS = ("1.25.0", "1.37.0")
SETS = value_set_names()
chart = Chart()


def render(name: str, **overrides: Any) -> Rendered:
    return chart.render(_merge(value_set(name), overrides))


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        out[key] = _merge(out.get(key) or {}, value) if isinstance(value, dict) else value
    return out


def containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = doc["spec"]["template"]["spec"]["containers"]
    return result


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def test_every_value_set_is_covered() -> None:
    assert {"defaults", "kafka-sasl-tls", "existing-secrets", "autoscaling-keda", "autoscaling-hpa", "minimal",
            "spool-emptydir", "agent-only", "alerting"} <= set(SETS)


@pytest.mark.parametrize("name", SETS)
def test_helm_lint_strict(name: str) -> None:
    out = chart.lint(value_set(name))
    assert "0 chart(s) failed" in out, out


@pytest.mark.parametrize("version", KUBE_VERSIONS)
@pytest.mark.parametrize("name", SETS)
def test_every_manifest_passes_strict_schema_validation(name: str, version: str) -> None:
    rendered = chart.render(value_set(name), kube_version=version)
    assert rendered.docs
    for doc in rendered.docs:
        what = f"{doc['kind']} {doc['metadata']['name']} ({name}, Kubernetes {version})"
        crd = BY_KIND.get(doc["kind"])
        if crd is not None:
            try:
                jsonschema.validate(doc, crd)
            except jsonschema.ValidationError as exc:
                pytest.fail(f"{what}: {exc.message} at {list(exc.absolute_path)}")
            continue
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{what}: {exc.message} at {list(exc.path)}")
        except kubernetes_validate.SchemaNotFoundError:
            pytest.fail(f"{what}: no schema for this kind; add one to tests/deploy/crd_schemas.py")


# -- values that must be refused, with a message naming the value ------------------------

REJECTED = [
    ({"agent": {"spool": {"type": "tmpfs"}}}, "agent.spool.type", "hostPath"),
    ({"agent": {"sampling": {"cpuBudget": 5}}}, "agent.sampling.cpuBudget", "less than or equal to 1"),
    ({"agent": {"sampling": {"intervalFloor": 0.01}}}, "agent.sampling.intervalFloor", "0.1"),
    ({"agent": {"port": 70000}}, "agent.port", "65535"),
    ({"agent": {"spoool": {"type": "emptyDir"}}}, "agent", "spoool"),
    ({"kafka": {"bootstrap": "kafka without a port"}}, "kafka.bootstrap", "pattern"),
    ({"kafka": {"sasl": {"enabled": True, "mechanism": "GSSAPI"}}}, "kafka.sasl.mechanism", "SCRAM-SHA-512"),
    ({"database": {"existingSecret": "", "dsn": "mysql://x"}}, "database.dsn", "postgres"),
    ({"collector": {"autoscaling": {"mode": "vpa"}}}, "collector.autoscaling.mode", "keda"),
    ({"collector": {"replicas": 0}}, "collector.replicas", "1"),
    ({"agent": {"image": {"digest": "sha1:abc"}}}, "agent.image.digest", "sha256"),
    ({"agent": {"logLevel": "TRACE"}}, "agent.logLevel", "INFO"),
    ({"prometheusRule": {"targetDownFor": "five minutes"}}, "prometheusRule.targetDownFor", "pattern"),
    ({"collector": {"alerting": {"secrets": {"not an env name": "x"}}}}, "collector.alerting.secrets", "not an env"),
    ({"collector": {"kafka": {"fetchMaxWaitMs": 0}}}, "collector.kafka.fetchMaxWaitMs", "1"),
    ({"collector": {"kafka": {"stallAfterSeconds": 0}}}, "collector.kafka.stallAfterSeconds", "0"),
    ({"collector": {"kafka": {"dlqMaxRequestSize": 1000}}}, "collector.kafka.dlqMaxRequestSize", "65536"),
    ({"agent": {"probe": {"hostPath": "run/gpuwatch"}}}, "agent.probe.hostPath", "pattern"),
    ({"agent": {"probe": {"hostPath": "/" + "x" * 100}}}, "agent.probe.hostPath", "96"),
]


@pytest.mark.parametrize(("bad", "field", "hint"), REJECTED, ids=[r[1] for r in REJECTED])
def test_invalid_values_are_refused_by_the_schema_naming_the_value(bad: dict[str, Any], field: str,
                                                                   hint: str) -> None:
    with pytest.raises(HelmError) as caught:
        chart.render(_merge(value_set("defaults"), bad))
    message = str(caught.value)
    assert "values don't meet the specifications of the schema" in message, message
    assert f"- {field}" in message and hint in message, message


CROSS_FIELD = [
    ({"kafka": {"bootstrap": ""}}, "kafka.bootstrap is required"),
    ({"database": {"existingSecret": ""}}, "set database.existingSecret"),
    ({"database": {"dsn": "postgresql://a@b/c"}}, "not both"),
    ({"kafka": {"sasl": {"enabled": True, "username": "u"}}}, "kafka.sasl.password or kafka.sasl.existingSecret"),
    ({"kafka": {"sasl": {"enabled": True, "password": "p"}}}, "needs kafka.sasl.username"),
    ({"kafka": {"tls": {"enabled": True, "certKey": "tls.crt", "keyKey": "tls.key"}}}, "kafka.tls.existingSecret"),
    ({"collector": {"autoscaling": {"enabled": True, "minReplicas": 9, "maxReplicas": 3}}}, "must not exceed"),
    ({"agent": {"sampling": {"intervalFloor": 5, "intervalCeiling": 2}}}, "intervalCeiling (2) must be >="),
    ({"collector": {"kafka": {"fetchMaxBytes": 1 << 20, "maxPartitionFetchBytes": 2 << 20}}},
     "collector.kafka.maxPartitionFetchBytes (2097152) must not exceed collector.kafka.fetchMaxBytes (1048576)"),
    ({"agent": {"securityContext": {"runAsUser": 65532, "runAsNonRoot": True}}},
     "agent.probe.enabled needs the agent to run as root (agent.securityContext.runAsUser: 0)"),
]


@pytest.mark.parametrize(("bad", "hint"), CROSS_FIELD, ids=[c[1] for c in CROSS_FIELD])
def test_values_that_do_not_fit_together_fail_with_what_to_set(bad: dict[str, Any], hint: str) -> None:
    with pytest.raises(HelmError) as caught:
        chart.render(_merge(value_set("defaults"), bad))
    assert hint in str(caught.value), caught.value


# -- what the default install looks like --------------------------------------------------


def test_agent_daemonset_follows_the_issue() -> None:
    ds = render("defaults").one("DaemonSet", "-agent")
    pod = ds["spec"]["template"]["spec"]
    assert ds["spec"]["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "10%"}}
    assert pod["hostPID"] is True
    assert pod["priorityClassName"] == "system-node-critical"
    term = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term == [{"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}]}]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    (agent,) = pod["containers"]
    env = env_of(agent)
    assert env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all" and env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    sc = agent["securityContext"]
    assert sc["privileged"] is False and sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True and sc["capabilities"] == {"drop": ["ALL"]}
    assert agent["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert agent["readinessProbe"]["httpGet"]["path"] == "/readyz"
    mounts = {m["mountPath"]: m for m in agent["volumeMounts"]}
    assert mounts["/var/lib/kubelet/pod-resources"]["readOnly"] is True
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["pod-resources"]["hostPath"]["path"] == "/var/lib/kubelet/pod-resources"
    assert volumes["spool"]["hostPath"] == {"path": "/var/lib/gpuwatch/spool", "type": "DirectoryOrCreate"}
    # measured RSS 43-65 MiB (docs/benchmarks.md): the limit leaves about 3x that
    assert agent["resources"]["limits"]["memory"] == "192Mi"
    assert "runtimeClassName" not in pod


def test_sys_ptrace_is_granted_to_the_agent_only_when_profiling_is_on() -> None:
    (off,) = containers(render("defaults").one("DaemonSet", "-agent"))
    assert "add" not in off["securityContext"]["capabilities"] and "GPUWATCH_PROFILE" not in env_of(off)
    (on,) = containers(render("profiling").one("DaemonSet", "-agent"))
    assert on["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["SYS_PTRACE"]}
    assert on["securityContext"]["allowPrivilegeEscalation"] is False and on["securityContext"]["privileged"] is False
    env = env_of(on)
    assert (env["GPUWATCH_PROFILE"], env["GPUWATCH_PROFILE_DURATION_S"], env["GPUWATCH_PROFILE_PERIOD_S"]) == (
        "true", "3", "900")
    from agent.settings import AgentSettings

    settings = AgentSettings(**{k.removeprefix("GPUWATCH_").lower(): v for k, v in env.items()
                                if k.startswith("GPUWATCH_PROFILE")})
    assert settings.profile and settings.profile_duration_s == 3 and settings.profile_cpu_budget == 0.01
    collector = render("profiling").one("Deployment", "-collector")
    assert "SYS_PTRACE" not in json.dumps(collector)


def test_host_evidence_reads_the_hosts_cgroup_tree_read_only_and_its_settings_load() -> None:
    pod = render("defaults").one("DaemonSet", "-agent")["spec"]["template"]["spec"]
    assert pod["hostPID"] is True  # /proc of the GPU's processes
    (agent,) = pod["containers"]
    mounts = {m["mountPath"]: m for m in agent["volumeMounts"]}
    assert mounts["/host/sys/fs/cgroup"]["readOnly"] is True
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["host-cgroup"]["hostPath"] == {"path": "/sys/fs/cgroup", "type": "Directory"}
    env = env_of(agent)
    from agent.settings import AgentSettings

    settings = AgentSettings(**{k.removeprefix("GPUWATCH_").lower(): v for k, v in env.items()
                                if k.startswith(("GPUWATCH_HOST", "GPUWATCH_INFERENCE"))})
    assert settings.host_evidence and settings.host_cgroup_root == "/host/sys/fs/cgroup"
    assert settings.inference_scrape_period == 5 and settings.inference_scrape_timeout == 1


def _probe_parts(rendered: Rendered) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """The agent's env, and its volume mounts and volumes of the kernel probe socket."""
    pod = rendered.one("DaemonSet", "-agent")["spec"]["template"]["spec"]
    (agent,) = pod["containers"]
    return (env_of(agent), [m for m in agent["volumeMounts"] if m["name"] == "probe-socket"],
            [v for v in pod["volumes"] if v["name"] == "probe-socket"])


def test_the_kernel_probe_socket_is_a_host_directory_at_its_own_path_and_its_settings_load() -> None:
    """On by default: the host directory (created if missing) mounted at the same path, where the
    workloads mount it too; the socket writable by any uid; and the agent's settings load from it."""
    env, mounts, volumes = _probe_parts(render("defaults"))
    assert mounts == [{"name": "probe-socket", "mountPath": "/run/gpuwatch"}]
    assert volumes == [{"name": "probe-socket", "hostPath": {"path": "/run/gpuwatch", "type": "DirectoryOrCreate"}}]
    assert (env["GPUWATCH_PROBE_SOCKET"], env["GPUWATCH_PROBE_SOCKET_MODE"]) == ("/run/gpuwatch/probe.sock", "0666")
    from agent.settings import AgentSettings

    settings = AgentSettings(**{k.removeprefix("GPUWATCH_").lower(): v for k, v in env.items()
                                if k.startswith("GPUWATCH_PROBE")})
    assert (settings.probe_socket, settings.probe_socket_mode) == ("/run/gpuwatch/probe.sock", 0o666)
    env, mounts, volumes = _probe_parts(render("defaults", agent={"probe": {"hostPath": "/var/run/gpuwatch-probe/"}}))
    assert env["GPUWATCH_PROBE_SOCKET"] == "/var/run/gpuwatch-probe/probe.sock"
    assert mounts[0]["mountPath"] == volumes[0]["hostPath"]["path"] == "/var/run/gpuwatch-probe/"
    notes = chart.notes(value_set("defaults"))
    for step in ("mountPath: /run/gpuwatch", "readOnly: true", "GPUWATCH_PROBE=1", "pip install 'gpuwatch[probe]'",
                 "python -m probe script.py"):
        assert step in notes, step


@pytest.mark.parametrize(("name", "overrides"), [("defaults", {"agent": {"probe": {"enabled": False}}}),
                                                 ("agent-only", {}), ("spool-emptydir", {})],
                         ids=["disabled", "without-kafka", "non-root-agent"])
def test_without_the_kernel_probe_there_is_no_host_directory_and_no_receiver(name: str,
                                                                            overrides: dict[str, Any]) -> None:
    env, mounts, volumes = _probe_parts(render(name, **overrides))
    assert not mounts and not volumes
    assert env["GPUWATCH_PROBE_SOCKET"] == "" and "GPUWATCH_PROBE_SOCKET_MODE" not in env  # "": the receiver is off
    from agent.settings import AgentSettings

    assert AgentSettings(probe_socket=env["GPUWATCH_PROBE_SOCKET"]).probe_socket == ""
    assert "Kernel statistics" not in chart.notes(_merge(value_set(name), overrides))


def test_spool_on_emptydir_and_runtime_class() -> None:
    pod = render("spool-emptydir").one("DaemonSet", "-agent")["spec"]["template"]["spec"]
    assert pod["runtimeClassName"] == "nvidia"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["spool"] == {"name": "spool", "emptyDir": {"sizeLimit": "300Mi"}}
    assert "pod-resources" not in volumes
    (agent,) = pod["containers"]
    assert agent["image"].endswith("@sha256:" + "0123456789abcdef" * 4)
    assert agent["args"] == ["--log-level", "DEBUG"]
    assert env_of(agent)["GPUWATCH_FRAME_MAX_DELAY"] == "2"
    assert env_of(agent)["GPUWATCH_SPOOL_MAX_MB"] == "256"
    assert agent["securityContext"]["runAsUser"] == 65532


def test_rbac_is_get_list_watch_pods_only() -> None:
    rendered = render("defaults")
    (role,) = rendered.of_kind("ClusterRole")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
    assert not rendered.of_kind("Role")
    binding = rendered.one("ClusterRoleBinding")
    (subject,) = binding["subjects"]
    assert subject["name"] == rendered.one("DaemonSet")["spec"]["template"]["spec"]["serviceAccountName"]
    collector = rendered.one("Deployment", "-collector")["spec"]["template"]["spec"]
    assert collector["automountServiceAccountToken"] is False
    assert {sa["metadata"]["name"] for sa in rendered.of_kind("ServiceAccount")} == {
        "gpuwatch-agent", "gpuwatch-collector"}


def test_service_monitors_honour_the_agents_labels_and_use_the_metrics_token() -> None:
    rendered = render("defaults")
    agent_sm = rendered.one("ServiceMonitor", "-agent")
    assert agent_sm["spec"]["endpoints"][0]["honorLabels"] is True
    collector_sm = rendered.one("ServiceMonitor", "-collector")
    assert collector_sm["spec"]["endpoints"][0]["authorization"] == {
        "type": "Bearer", "credentials": {"name": "gpuwatch-metrics-token", "key": "token"}}
    env = env_of(containers(rendered.one("Deployment", "-collector"))[0])
    assert env["GPUWATCH_API_METRICS_AUTH"] == "true"
    # the ServiceMonitor selects the Service, whose port is named as the endpoint says
    pairs = ((agent_sm, rendered.one("Service", "-agent")), (collector_sm, rendered.one("Service", "-collector")))
    for sm, svc in pairs:
        labels = svc["metadata"]["labels"]
        assert sm["spec"]["selector"]["matchLabels"].items() <= labels.items()
        assert sm["spec"]["endpoints"][0]["port"] in {p["name"] for p in svc["spec"]["ports"]}


def _all_strings(doc: Any) -> list[str]:
    if isinstance(doc, dict):
        return [s for v in doc.values() for s in _all_strings(v)]
    if isinstance(doc, list):
        return [s for v in doc for s in _all_strings(v)]
    return [doc] if isinstance(doc, str) else []


def test_credentials_live_in_secrets_mounted_as_files_never_in_env_or_args() -> None:
    rendered = render("kafka-sasl-tls")
    secrets = {s["metadata"]["name"]: s for s in rendered.of_kind("Secret")}
    assert secrets["gpuwatch-kafka-sasl"]["stringData"] == {"password": "s3cret-kafka-password"}
    assert "s3cret-db-password" in secrets["gpuwatch-db"]["stringData"]["dsn"]
    for kind in ("DaemonSet", "Deployment"):
        workload = rendered.one(kind)
        for leaked in ("s3cret-kafka-password", "s3cret-db-password"):
            assert not [s for s in _all_strings(workload) if leaked in s], f"{leaked} appears in the {kind}"
    agent_env = env_of(containers(rendered.one("DaemonSet"))[0])
    assert agent_env["GPUWATCH_KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL"
    assert agent_env["GPUWATCH_KAFKA_SASL_PASSWORD_FILE"] == "/etc/gpuwatch/kafka-sasl/password"
    assert agent_env["GPUWATCH_KAFKA_SSL_CERTFILE"] == "/etc/gpuwatch/kafka-tls/tls.crt"
    collector_env = env_of(containers(rendered.one("Deployment"))[0])
    assert collector_env["GPUWATCH_DB_FILE"] == "/etc/gpuwatch/db/dsn"
    assert collector_env["GPUWATCH_DB_PROFILE"] == "timescale"
    egress = rendered.one("NetworkPolicy", "-agent")["spec"]["egress"]
    assert {"ports": [{"port": 9096, "protocol": "TCP"}], "to": [{"ipBlock": {"cidr": "10.20.0.0/16"}}]} in egress


def test_existing_secrets_are_referenced_and_none_is_made() -> None:
    rendered = render("existing-secrets")
    made = {s["metadata"]["name"] for s in rendered.of_kind("Secret")}
    assert made == {"gpuwatch-kafka-tls"}  # only the inline CA, which is public
    pod = rendered.one("Deployment")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["db"]["secret"] == {"secretName": "gpuwatch-db", "defaultMode": 0o440,
                                       "items": [{"key": "uri", "path": "uri"}]}
    assert volumes["kafka-sasl"]["secret"]["secretName"] == "kafka-sasl"
    assert volumes["kafka-sasl"]["secret"]["items"] == [{"key": "kafka-password", "path": "kafka-password"}]
    assert volumes["alert-rules"]["configMap"]["name"] == "gpuwatch-alert-rules"
    assert volumes["api-tls"]["secret"]["secretName"] == "gpuwatch-api-tls"
    (collector,) = pod["containers"]
    assert collector["envFrom"] == [{"secretRef": {"name": "gpuwatch-alert-webhooks"}}]
    assert collector["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http", "scheme": "HTTPS"}
    assert collector["livenessProbe"]["httpGet"]["path"] == collector["startupProbe"]["httpGet"]["path"] == "/healthz"
    assert env_of(collector)["GPUWATCH_DB_FILE"] == "/etc/gpuwatch/db/uri"
    assert not rendered.of_kind("ConfigMap") or all(
        "dashboard" in c["metadata"]["name"] for c in rendered.of_kind("ConfigMap"))
    sm = rendered.one("ServiceMonitor", "-collector")["spec"]["endpoints"][0]
    assert sm["authorization"]["credentials"] == {"name": "prometheus-gpuwatch-token", "key": "bearer"}
    assert sm["scheme"] == "https"


def test_autoscaling_on_kafka_lag_with_keda() -> None:
    rendered = render("autoscaling-keda")
    assert "replicas" not in rendered.one("Deployment")["spec"]
    scaled = rendered.one("ScaledObject")
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "kafka"
    assert trigger["metadata"]["consumerGroup"] == "gpuwatch-collector"
    assert trigger["metadata"]["topic"] == "gpu.telemetry"
    assert trigger["metadata"]["lagThreshold"] == "5000"
    assert trigger["metadata"]["sasl"] == "scram_sha256"
    auth = rendered.one("TriggerAuthentication")
    assert trigger["authenticationRef"]["name"] == auth["metadata"]["name"]
    assert auth["spec"]["secretTargetRef"] == [{"parameter": "password", "name": "gpuwatch-kafka-sasl",
                                                "key": "password"}]
    assert not rendered.of_kind("HorizontalPodAutoscaler")


def test_autoscaling_falls_back_to_an_hpa_on_cpu() -> None:
    rendered = render("autoscaling-hpa")
    hpa = rendered.one("HorizontalPodAutoscaler")
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (3, 6)
    assert hpa["spec"]["metrics"][0]["resource"]["name"] == "cpu"
    assert not rendered.of_kind("ScaledObject")
    assert rendered.one("PodDisruptionBudget")["spec"]["minAvailable"] == 2


def test_minimal_renders_no_crds_dashboards_policies_or_rbac() -> None:
    kinds = {d["kind"] for d in render("minimal").docs}
    assert kinds == {"DaemonSet", "Deployment", "Service"}


def test_agent_only_runs_without_kafka_or_collector() -> None:
    rendered = render("agent-only")
    assert not rendered.of_kind("Deployment")
    (agent,) = containers(rendered.one("DaemonSet"))
    assert "GPUWATCH_KAFKA_BOOTSTRAP" not in env_of(agent)
    assert "spool" not in {m["name"] for m in agent["volumeMounts"]}
    groups = {g["name"] for g in rendered.one("PrometheusRule")["spec"]["groups"]}
    assert groups == {"gpuwatch-gpu", "gpuwatch-agent"}


def test_dashboards_are_labelled_configmaps_equal_to_the_generated_files() -> None:
    maps = render("defaults").of_kind("ConfigMap")
    generated = sorted((ROOT / "dashboards").glob("*.json"))
    assert generated, "no dashboards generated"
    assert len(maps) == len(generated)
    by_file = {key: value for cm in maps for key, value in cm["data"].items()}
    for cm in maps:
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    for path in generated:
        assert json.loads(by_file[path.name]) == json.loads(path.read_text()), path.name
    assert not [d for d in render("minimal").docs if d["kind"] == "ConfigMap"]


def test_alert_rules_configmap_loads_in_the_collector_with_the_rendered_secrets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from collector.alerting.rules import parse_rules

    rendered = render("alerting")
    text = rendered.one("ConfigMap", "-alert-rules")["data"]["rules.yaml"]
    example = yaml.safe_load((ROOT / "collector" / "alerting" / "default_rules.yaml").read_text())
    assert yaml.safe_load(text) == example, "the chart's default rules drifted from default_rules.yaml"
    secret = rendered.one("Secret", "-alert-secrets")
    for name, value in secret["stringData"].items():
        monkeypatch.setenv(name, value)
    parsed = parse_rules(text, "rules.yaml")
    assert not parsed.errors, parsed.errors
    assert {r.name for r in parsed.rules} == {"gpu-hardware", "gpu-performance", "gpu-idle-allocated"}
    (collector,) = containers(rendered.one("Deployment"))
    assert env_of(collector)["GPUWATCH_ALERT_RULES"] == "/etc/gpuwatch/alerting/rules.yaml"
    assert env_of(collector)["GPUWATCH_API_CORS_ORIGINS"] == '["https://grafana.example.com"]'
    ingress = rendered.one("NetworkPolicy", "-collector")["spec"]["ingress"][0]["from"]
    assert len(ingress) == 2


def test_the_workloads_run_the_images_entrypoints_on_their_ports() -> None:
    from tests.test_dockerfile import entrypoint_and_ports

    rendered = render("defaults")
    images = (("DaemonSet", "Dockerfile.agent", 9400), ("Deployment", "Dockerfile.collector", 8080))
    for kind, dockerfile, port in images:
        (container,) = containers(rendered.one(kind))
        entrypoint, ports = entrypoint_and_ports(ROOT / dockerfile)
        assert container["command"] == entrypoint
        assert container["ports"][0]["containerPort"] == port and port in ports


def test_notes_explain_the_first_token_and_the_web_page() -> None:
    notes = chart.notes(value_set("defaults"))
    assert "gpuwatch token create --db-file /etc/gpuwatch/db/dsn --role admin" in notes
    assert "port-forward svc/gpuwatch-collector" in notes
    assert "create secret generic gpuwatch-metrics-token" in notes
    assert "gpu.telemetry.control" in notes


def test_chart_files_are_what_helm_packages() -> None:
    # helm cannot read files outside the chart: the dashboards must be inside it
    assert (CHART / "dashboards").is_dir()
    assert not [p for p in (CHART / "dashboards").iterdir() if p.is_symlink()]
    assert os.access(CHART / "values.schema.json", os.R_OK)
    assert Path(CHART / "values.schema.json").read_text().startswith("{")


# collector.kafka.* -> the collector's settings (collector/settings.py)
TUNING = {"fetchMaxWaitMs": "fetch_max_wait_ms", "fetchMaxBytes": "fetch_max_bytes",
          "maxPartitionFetchBytes": "max_partition_fetch_bytes", "dlqMaxRequestSize": "dlq_max_request_size",
          "stallAfterSeconds": "stall_after_s", "keyframeRequestIntervalSeconds": "keyframe_request_interval_s",
          "maxBatch": "max_batch"}


def _bounds(field: Any) -> dict[str, float]:
    names = {"ge": "minimum", "le": "maximum", "gt": "exclusiveMinimum"}
    return {names[k]: getattr(m, k) for m in field.metadata for k in names if hasattr(m, k)}


def test_the_collectors_tuning_values_have_the_codes_defaults_and_bounds() -> None:
    from collector.settings import CollectorSettings

    fields = CollectorSettings.model_fields
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())["properties"]["collector"]["properties"]
    pairs = [(values["collector"]["kafka"][k], schema["kafka"]["properties"][k], fields[f]) for k, f in TUNING.items()]
    pairs.append((values["collector"]["maintenanceIntervalSeconds"], schema["maintenanceIntervalSeconds"],
                  fields["maintenance_interval"]))
    pairs.append((values["collector"]["checkpointIntervalSeconds"], schema["checkpointIntervalSeconds"],
                  fields["checkpoint_interval"]))
    pairs.append((values["collector"]["chunkIntervalSeconds"], schema["chunkIntervalSeconds"],
                  fields["chunk_interval"]))
    for value, prop, field in pairs:
        assert value == field.default
        assert {k: v for k, v in prop.items() if k != "type"} == _bounds(field), prop
    assert values["database"]["profile"] == fields["db_profile"].default


def test_the_collectors_tuning_reaches_its_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from agent.settings import load
    from collector.settings import CollectorSettings, ConsumerTuning

    tuned = {"fetchMaxWaitMs": 250, "fetchMaxBytes": 32 << 20, "maxPartitionFetchBytes": 4 << 20,
             "dlqMaxRequestSize": 2 << 20, "stallAfterSeconds": 12.5, "keyframeRequestIntervalSeconds": 3,
             "maxBatch": 2000}
    rendered = render("defaults", collector={"kafka": tuned, "maintenanceIntervalSeconds": 30,
                                             "checkpointIntervalSeconds": 120, "chunkIntervalSeconds": 3600},
                      database={"profile": "plain"})
    for name, value in env_of(containers(rendered.one("Deployment"))[0]).items():
        if isinstance(value, str) and name != "GPUWATCH_DB_FILE":  # the DSN file exists only in the pod
            monkeypatch.setenv(name, value)
    monkeypatch.setenv("GPUWATCH_DB", "postgresql://gpuwatch@db/gpuwatch")
    settings = load(CollectorSettings, {})
    assert settings.tuning() == ConsumerTuning(
        fetch_max_wait_ms=250, fetch_max_bytes=32 << 20, max_partition_fetch_bytes=4 << 20,
        dlq_max_request_size=2 << 20, stall_after_s=12.5, keyframe_request_interval_s=3)
    assert (settings.max_batch, settings.maintenance_interval, settings.db_profile) == (2000, 30, "plain")
    assert (settings.checkpoint_interval, settings.chunk_interval) == (120, 3600)
    defaults = env_of(containers(render("defaults").one("Deployment"))[0])
    assert "GPUWATCH_CHUNK_INTERVAL" not in defaults and defaults["GPUWATCH_CHECKPOINT_INTERVAL"] == "300"
