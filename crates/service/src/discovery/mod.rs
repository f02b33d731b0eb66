//! Target discovery: which `/metrics` URLs to scrape this cycle.
//!
//! Owns: turning a [`TargetSource`] into URLs: a static list (normalised: `host:port` becomes
//! `http://host:port/metrics`; deduplicated, order kept), or every A/AAAA record of a headless
//! Service, re-resolved on each call (sorted by address, deduplicated, IPv6 bracketed). Does
//! not own: fetching ([`crate::scrape`]) or keeping the last good list when a lookup fails
//! (the caller does that with the [`DiscoveryError`] it gets).

mod resolver;

pub use resolver::{HostsFileResolver, Resolver, SystemResolver};

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use vllm_keda_core::config::TargetSource;

/// How long one DNS lookup may take before it counts as failed.
pub const DNS_TIMEOUT: Duration = Duration::from_secs(5);

/// The metrics path used when a target does not name one.
pub const DEFAULT_METRICS_PATH: &str = "/metrics";

/// Discovery failed (DNS error, or a static target that is not a usable URL): the previous
/// target list stays in use by the caller.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("resolving {host:?}: {message}")]
pub struct DiscoveryError {
    /// The name that failed to resolve (or the static target that is malformed).
    pub host: String,
    /// Why, and the fix.
    pub message: String,
}

/// A target source plus the last list that resolved: what a control loop keeps between
/// cycles. A failed refresh leaves the previous list in place.
#[derive(Clone)]
pub struct Discovery {
    source: TargetSource,
    resolver: Arc<dyn Resolver>,
    targets: Vec<String>,
}

impl std::fmt::Debug for Discovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Discovery")
            .field("source", &self.source)
            .field("targets", &self.targets)
            .finish_non_exhaustive()
    }
}

impl Discovery {
    /// Discovery of `source` with the system resolver; no targets until the first refresh.
    pub fn new(source: TargetSource) -> Self {
        Self::with_resolver(source, Arc::new(SystemResolver))
    }

    /// Discovery of `source` with a chosen resolver.
    pub fn with_resolver(source: TargetSource, resolver: Arc<dyn Resolver>) -> Self {
        Self {
            source,
            resolver,
            targets: Vec::new(),
        }
    }

    /// Resolves again. On success the new list replaces the old one; on failure the previous
    /// list stays (see [`Discovery::targets`]) and the error says why.
    pub async fn refresh(&mut self) -> Result<&[String], DiscoveryError> {
        self.targets = resolve_with(&self.source, self.resolver.as_ref()).await?;
        Ok(&self.targets)
    }

    /// The last list that resolved (empty before the first success).
    pub fn targets(&self) -> &[String] {
        &self.targets
    }

    /// What is being discovered.
    pub fn source(&self) -> &TargetSource {
        &self.source
    }
}

/// Whether the `service` name `host` names a Service in `namespace`: `name.namespace`,
/// `name.namespace.svc` or `name.namespace.svc.<cluster domain>` (case-insensitive, a trailing
/// dot allowed). A bare `name` does not: it would resolve in the scaler's own namespace.
/// `--service-namespace-only` requires it of every `service` and `dcgmService`.
pub fn in_namespace(host: &str, namespace: &str) -> bool {
    let mut labels = host.trim_end_matches('.').split('.');
    let (Some(name), Some(ns)) = (labels.next(), labels.next()) else {
        return false;
    };
    if name.is_empty() || namespace.is_empty() || !ns.eq_ignore_ascii_case(namespace) {
        return false;
    }
    labels
        .next()
        .is_none_or(|svc| svc.eq_ignore_ascii_case("svc"))
}

/// The URLs to scrape now, using the system resolver for DNS sources. Static lists keep their
/// order (deduplicated); DNS results are sorted by address and deduplicated.
pub async fn resolve(source: &TargetSource) -> Result<Vec<String>, DiscoveryError> {
    resolve_with(source, &SystemResolver).await
}

/// [`resolve`] with a chosen resolver (for example [`HostsFileResolver`]).
///
/// A DNS name that resolves to no address gives an empty list (every pod gone); a lookup that
/// fails or takes longer than [`DNS_TIMEOUT`] gives an error.
pub async fn resolve_with(
    source: &TargetSource,
    resolver: &dyn Resolver,
) -> Result<Vec<String>, DiscoveryError> {
    match source {
        TargetSource::Static(targets) => {
            let mut seen = HashSet::new();
            let mut out = Vec::with_capacity(targets.len());
            for target in targets {
                let url = normalize_target(target)?;
                if seen.insert(url.clone()) {
                    out.push(url);
                }
            }
            Ok(out)
        }
        TargetSource::Dns { host, port, path } => {
            let fail = |message: String| DiscoveryError {
                host: host.clone(),
                message,
            };
            if host.trim().is_empty() {
                return Err(fail(
                    "empty service name; expected a headless service name such as \
                     vllm.default.svc.cluster.local"
                        .into(),
                ));
            }
            let path = normalize_path(path);
            let ips = tokio::time::timeout(DNS_TIMEOUT, resolver.lookup(host))
                .await
                .map_err(|_| {
                    fail(format!(
                        "dns lookup timed out after {DNS_TIMEOUT:?}; check the cluster dns"
                    ))
                })?
                .map_err(|e| {
                    fail(format!(
                        "dns lookup failed ({e}); check the service name (a headless service, \
                         e.g. vllm.default.svc.cluster.local) and that its pods are ready"
                    ))
                })?;
            let mut addrs: Vec<SocketAddr> = ips
                .into_iter()
                .map(|ip| SocketAddr::new(ip, *port))
                .collect();
            addrs.sort();
            addrs.dedup();
            Ok(addrs
                .iter()
                .map(|addr| format!("http://{addr}{path}"))
                .collect())
        }
    }
}

/// Normalises one static target: `http://host:port/path` is kept (a missing path becomes
/// `/metrics`), `host:port[/path]` gets `http://` (and `/metrics` when it has no path); IPv6
/// hosts must be bracketed (`[fd00::1]:8000`). `https://` and other schemes are refused with
/// a clear error.
pub fn normalize_target(target: &str) -> Result<String, DiscoveryError> {
    let fail = |message: String| DiscoveryError {
        host: target.to_string(),
        message,
    };
    const EXPECTED: &str = "expected http://host:port/path or host:port";
    let trimmed = target.trim();
    if trimmed.is_empty() {
        return Err(fail(format!("empty target; {EXPECTED}")));
    }
    let (with_scheme, rest, has_scheme) = match trimmed.find("://") {
        Some(at) => (trimmed.to_string(), &trimmed[at + 3..], true),
        None => (format!("http://{trimmed}"), trimmed, false),
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let has_path = rest[authority_end..].starts_with('/');
    let mut url = reqwest::Url::parse(&with_scheme).map_err(|e| {
        let hint = if authority.matches(':').count() > 1 && !authority.contains('[') {
            " (bracket IPv6 addresses: [fd00::1]:8000)"
        } else {
            ""
        };
        fail(format!("not a valid target ({e}){hint}; {EXPECTED}"))
    })?;
    match url.scheme() {
        "http" => {}
        "https" => {
            return Err(fail(
                "https targets are not supported (this build has no tls); vLLM serves /metrics \
                 over plain http, so use http://"
                    .into(),
            ));
        }
        other => {
            return Err(fail(format!("unsupported scheme \"{other}\"; {EXPECTED}")));
        }
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(fail(format!("no host; {EXPECTED}")));
    }
    let has_port = authority
        .rsplit_once(':')
        .is_some_and(|(_, p)| !p.is_empty() && !p.contains(']'));
    if !has_scheme && !has_port {
        return Err(fail(format!(
            "no port (vLLM listens on 8000 by default); {EXPECTED}"
        )));
    }
    if !has_path {
        url.set_path(DEFAULT_METRICS_PATH);
    }
    url.set_fragment(None);
    Ok(url.to_string())
}

/// `/metrics` for an empty path, a leading `/` otherwise.
fn normalize_path(path: &str) -> String {
    let path = path.trim();
    if path.is_empty() {
        DEFAULT_METRICS_PATH.to_string()
    } else if path.starts_with('/') {
        path.to_string()
    } else {
        format!("/{path}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_service_name_is_in_a_namespace_only_when_it_says_so() {
        for host in [
            "vllm.team-a",
            "vllm.team-a.svc",
            "vllm.team-a.svc.cluster.local",
            "vllm.team-a.svc.cluster.local.",
            "VLLM.Team-A.SVC",
        ] {
            assert!(in_namespace(host, "team-a"), "{host}");
        }
        for host in [
            "vllm",
            "vllm.team-b",
            "vllm.team-b.svc.cluster.local",
            "vllm.team-a-x.svc",
            ".team-a",
            "vllm.team-a.pod.cluster.local",
            "10.0.0.1",
            "",
        ] {
            assert!(!in_namespace(host, "team-a"), "{host}");
        }
        assert!(!in_namespace("vllm.", ""));
    }

    #[test]
    fn static_targets_are_normalised() {
        let cases = [
            (
                "http://10.0.0.1:8000/metrics",
                "http://10.0.0.1:8000/metrics",
            ),
            ("http://10.0.0.1:8000", "http://10.0.0.1:8000/metrics"),
            ("http://10.0.0.1:8000/", "http://10.0.0.1:8000/"),
            ("10.0.0.1:8000", "http://10.0.0.1:8000/metrics"),
            ("  pod-a:8000/custom  ", "http://pod-a:8000/custom"),
            ("[fd00::1]:8000", "http://[fd00::1]:8000/metrics"),
            ("HTTP://Pod-A:8000/m?x=1#frag", "http://pod-a:8000/m?x=1"),
            ("http://pod-a/metrics", "http://pod-a/metrics"),
        ];
        for (input, want) in cases {
            assert_eq!(normalize_target(input).as_deref(), Ok(want), "{input}");
        }
    }

    #[test]
    fn bad_static_targets_say_what_is_expected() {
        let cases = [
            ("", "empty target"),
            ("pod-a", "no port"),
            (
                "https://pod-a:8000/metrics",
                "https targets are not supported",
            ),
            ("ftp://pod-a:21/x", "unsupported scheme \"ftp\""),
            ("fd00::1:8000", "bracket IPv6 addresses"),
            ("pod a:8000", "not a valid target"),
        ];
        for (input, want) in cases {
            let e = normalize_target(input).unwrap_err();
            assert_eq!(e.host, input);
            assert!(e.to_string().contains(want), "{input}: {e}");
        }
    }

    #[tokio::test]
    async fn static_lists_keep_order_and_drop_duplicates() {
        let source = TargetSource::Static(vec![
            "b:1".into(),
            "http://a:1/metrics".into(),
            "http://b:1/metrics".into(),
            "a:1".into(),
        ]);
        assert_eq!(
            resolve(&source).await.unwrap(),
            vec!["http://b:1/metrics", "http://a:1/metrics"]
        );
        let bad = TargetSource::Static(vec!["a:1".into(), "nope".into()]);
        assert_eq!(resolve(&bad).await.unwrap_err().host, "nope");
    }

    #[tokio::test]
    async fn dns_sources_are_sorted_deduplicated_and_bracketed() {
        let dir = tempfile::tempdir().unwrap();
        let hosts = dir.path().join("hosts");
        std::fs::write(
            &hosts,
            "10.0.0.10 pods\n10.0.0.2 pods\nfd00::1 pods\n10.0.0.2 pods\n",
        )
        .unwrap();
        let source = TargetSource::Dns {
            host: "pods".into(),
            port: 8000,
            path: "metrics".into(),
        };
        let got = resolve_with(&source, &HostsFileResolver::new(&hosts))
            .await
            .unwrap();
        assert_eq!(
            got,
            vec![
                "http://10.0.0.2:8000/metrics",
                "http://10.0.0.10:8000/metrics",
                "http://[fd00::1]:8000/metrics",
            ]
        );
    }

    #[tokio::test]
    async fn system_dns_failure_is_an_error_naming_the_host() {
        let source = TargetSource::Dns {
            host: "no-such-service.invalid".into(),
            port: 8000,
            path: String::new(),
        };
        let e = resolve(&source).await.unwrap_err();
        assert_eq!(e.host, "no-such-service.invalid");
        // Where no nameserver answers, the lookup times out instead; both are failures.
        assert!(
            e.message.contains("dns lookup failed") || e.message.contains("timed out"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn system_dns_resolves_localhost() {
        let source = TargetSource::Dns {
            host: "localhost".into(),
            port: 8000,
            path: "/metrics".into(),
        };
        let got = resolve(&source).await.unwrap();
        assert!(
            got.iter().any(|u| u == "http://127.0.0.1:8000/metrics"),
            "{got:?}"
        );
    }
}
