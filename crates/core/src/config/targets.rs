//! Target keys: `endpoints` | `service` (+ `port`, `metricsPath`) for vLLM, and
//! `dcgmEndpoints` | `dcgmService` for the DCGM exporter. Each key's value is read on its own
//! ([`endpoints`], [`service`], [`port`], [`metrics_path`]) into [`TargetKeys`]; which keys go
//! together is checked once all are read ([`vllm_targets`], [`dcgm_targets`]).

use super::parse::expected;
use super::{ConfigError, TargetSource};

const VLLM_PORT: u16 = 8000;
const DCGM_PORT: u16 = 9400;
const METRICS_PATH: &str = "/metrics";

/// The target keys as read, before they are combined.
#[derive(Debug, Clone, Default)]
pub(super) struct TargetKeys {
    /// `endpoints`.
    pub(super) endpoints: Option<Vec<Endpoint>>,
    /// `service`: host and the port written after it, if any.
    pub(super) service: Option<(String, Option<u16>)>,
    /// `port`.
    pub(super) port: Option<u16>,
    /// `metricsPath`.
    pub(super) metrics_path: Option<String>,
    /// `dcgmEndpoints`.
    pub(super) dcgm_endpoints: Option<Vec<Endpoint>>,
    /// `dcgmService`.
    pub(super) dcgm_service: Option<(String, Option<u16>)>,
}

/// One entry of an endpoints list: `scheme://host[:port]` and its own path, if it has one
/// (otherwise the metrics path is appended when the targets are combined).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Endpoint {
    origin: String,
    path: Option<String>,
}

impl Endpoint {
    fn url(&self, default_path: &str) -> String {
        format!(
            "{}{}",
            self.origin,
            self.path.as_deref().unwrap_or(default_path)
        )
    }
}

/// The URLs of `list`, with `path` where an entry has none, in order, without duplicates.
fn urls(list: &[Endpoint], path: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for url in list.iter().map(|e| e.url(path)) {
        if !out.contains(&url) {
            out.push(url);
        }
    }
    out
}

/// `metricsPath`: a path starting with `/`.
pub(super) fn metrics_path(value: &str) -> Result<String, String> {
    let t = value.trim();
    if !t.starts_with('/') || t.chars().any(|c| c.is_whitespace() || c == '?' || c == '#') {
        return Err(expected("a path starting with \"/\"", value));
    }
    Ok(t.to_owned())
}

/// `port`: 1 to 65535.
pub(super) fn port(value: &str) -> Result<u16, String> {
    parse_port(value).ok_or_else(|| expected("a port number from 1 to 65535", value))
}

/// The vLLM targets: exactly one of `endpoints` and `service`.
pub(super) fn vllm_targets(keys: &TargetKeys) -> Result<TargetSource, ConfigError> {
    let path = keys.metrics_path.as_deref().unwrap_or(METRICS_PATH);
    match (&keys.endpoints, &keys.service) {
        (Some(_), Some(_)) => Err(ConfigError::new(
            "service",
            "expected either \"endpoints\" or \"service\", not both",
        )),
        (None, None) => Err(ConfigError::new(
            "endpoints",
            "required: comma-separated vLLM metrics URLs or host:port entries (or set \"service\" to a headless Service name)",
        )),
        (Some(list), None) => {
            if keys.port.is_some() {
                return Err(ConfigError::new(
                    "port",
                    "only used with \"service\"; put the port in each entry of \"endpoints\"",
                ));
            }
            Ok(TargetSource::Static(urls(list, path)))
        }
        (None, Some((host, own_port))) => {
            if let (Some(_), Some(_)) = (own_port, keys.port) {
                return Err(ConfigError::new(
                    "port",
                    "expected the port either in \"service\" (name:port) or in \"port\", not both",
                ));
            }
            Ok(TargetSource::Dns {
                host: host.clone(),
                port: own_port.or(keys.port).unwrap_or(VLLM_PORT),
                path: path.to_owned(),
            })
        }
    }
}

/// The DCGM exporter targets, if configured: at most one of `dcgmEndpoints` and `dcgmService`.
pub(super) fn dcgm_targets(keys: &TargetKeys) -> Result<Option<TargetSource>, ConfigError> {
    match (&keys.dcgm_endpoints, &keys.dcgm_service) {
        (Some(_), Some(_)) => Err(ConfigError::new(
            "dcgmService",
            "expected either \"dcgmEndpoints\" or \"dcgmService\", not both",
        )),
        (None, None) => Ok(None),
        (Some(list), None) => Ok(Some(TargetSource::Static(urls(list, METRICS_PATH)))),
        (None, Some((host, port))) => Ok(Some(TargetSource::Dns {
            host: host.clone(),
            port: port.unwrap_or(DCGM_PORT),
            path: METRICS_PATH.to_owned(),
        })),
    }
}

fn parse_port(p: &str) -> Option<u16> {
    let t = p.trim();
    if t.is_empty() || !t.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    t.parse::<u16>().ok().filter(|&n| n > 0)
}

/// A DNS name: labels of letters, digits and `-`, at most 63 characters each, 253 in all.
fn dns_name(host: &str) -> bool {
    let h = host.strip_suffix('.').unwrap_or(host);
    !h.is_empty()
        && h.len() <= 253
        && h.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
}

/// `name` or `name:port` (`service`, `dcgmService`).
pub(super) fn service(value: &str) -> Result<(String, Option<u16>), String> {
    let what = "a DNS name such as vllm-headless.default.svc.cluster.local, optionally name:port";
    let t = value.trim();
    let (host, port) = match t.rsplit_once(':') {
        Some((h, p)) => (h, Some(parse_port(p).ok_or_else(|| expected(what, value))?)),
        None => (t, None),
    };
    if !dns_name(host) {
        return Err(expected(what, value));
    }
    Ok((host.to_ascii_lowercase(), port))
}

/// A comma-separated list of URLs or `host:port` (`endpoints`, `dcgmEndpoints`): at least one.
pub(super) fn endpoints(value: &str) -> Result<Vec<Endpoint>, String> {
    let what = "comma-separated http://host:port/path URLs or host:port entries";
    let list = value
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(|entry| {
            refuse_unscraped_scheme(entry)?;
            endpoint(entry).ok_or_else(|| expected(what, entry))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if list.is_empty() {
        return Err(expected(what, value));
    }
    Ok(list)
}

/// An entry whose scheme the scaler does not scrape (`https://`) can never give data: refused
/// here, naming the entry and the fix, instead of failing every scrape later.
fn refuse_unscraped_scheme(entry: &str) -> Result<(), String> {
    let Some((scheme, rest)) = entry.split_once("://") else {
        return Ok(());
    };
    if scheme.eq_ignore_ascii_case("https") {
        return Err(format!(
            "entry {entry:?} uses https://, which the scaler does not scrape (it has no TLS \
             client for targets; vLLM serves /metrics over plain HTTP): write it as \
             \"http://{rest}\" or remove it"
        ));
    }
    Ok(())
}

fn endpoint(entry: &str) -> Option<Endpoint> {
    if entry
        .chars()
        .any(|c| c.is_whitespace() || c == '?' || c == '#')
    {
        return None;
    }
    let (scheme, rest) = match entry.split_once("://") {
        Some((s, r)) => (Some(s.to_ascii_lowercase()), r),
        None => (None, entry),
    };
    if let Some(s) = &scheme {
        if s != "http" {
            return None;
        }
    }
    let (authority, own_path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let (host, port) = split_host_port(authority)?;
    if scheme.is_none() && (port.is_none() || !own_path.is_empty()) {
        // Without a scheme only host:port is accepted.
        return None;
    }
    let path = (!own_path.is_empty() && own_path != "/").then(|| own_path.to_owned());
    let scheme = scheme.unwrap_or_else(|| "http".to_owned());
    let origin = match port {
        Some(p) => format!("{scheme}://{host}:{p}"),
        None => format!("{scheme}://{host}"),
    };
    Some(Endpoint { origin, path })
}

/// `host`, `host:port`, `[v6]` or `[v6]:port`.
fn split_host_port(authority: &str) -> Option<(&str, Option<u16>)> {
    if let Some(rest) = authority.strip_prefix('[') {
        let (v6, after) = rest.split_once(']')?;
        if v6.parse::<std::net::Ipv6Addr>().is_err() {
            return None;
        }
        let host = &authority[..v6.len() + 2];
        return match after {
            "" => Some((host, None)),
            p => Some((host, Some(parse_port(p.strip_prefix(':')?)?))),
        };
    }
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) => (h, Some(parse_port(p)?)),
        None => (authority, None),
    };
    (dns_name(host) || host.parse::<std::net::Ipv4Addr>().is_ok()).then_some((host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(entry: &str, path: &str) -> Option<String> {
        endpoint(entry).map(|e| e.url(path))
    }

    #[test]
    fn endpoint_forms() {
        let p = "/metrics";
        assert_eq!(
            url("10.0.0.7:8000", p).as_deref(),
            Some("http://10.0.0.7:8000/metrics")
        );
        assert_eq!(
            url("http://a:8000", p).as_deref(),
            Some("http://a:8000/metrics")
        );
        assert_eq!(url("http://a/x/m", p).as_deref(), Some("http://a/x/m"));
        assert_eq!(
            url("http://[::1]:9/", p).as_deref(),
            Some("http://[::1]:9/metrics")
        );
        for bad in [
            "a",
            "a:0",
            "a:99999",
            "ftp://a:1",
            "https://a:1",
            "a:1/metrics",
            "http://:80",
            "http://a b",
        ] {
            assert_eq!(url(bad, p), None, "{bad}");
        }
    }

    #[test]
    fn a_query_a_fragment_or_a_space_anywhere_in_an_entry_or_a_path_is_refused() {
        // Each alone, in the path, where the host check cannot catch it.
        for bad in [
            "http://a:1/m?x",
            "http://a:1/m#x",
            "http://a:1/m x",
            "http://a:1/m\tx",
        ] {
            assert_eq!(url(bad, "/metrics"), None, "{bad:?}");
        }
        assert_eq!(
            url("http://a:1/m-x_1", "/metrics").as_deref(),
            Some("http://a:1/m-x_1")
        );
        for bad in ["/m?x", "/m#x", "/m x", "/m\tx"] {
            assert!(metrics_path(bad).is_err(), "{bad:?}");
        }
        assert_eq!(metrics_path(" /m-x_1 ").as_deref(), Ok("/m-x_1"));
    }

    #[test]
    fn a_port_is_digits_only_without_a_sign() {
        // `u16::from_str` alone would take a leading `+`.
        assert_eq!("+80".parse::<u16>(), Ok(80));
        for bad in ["+80", " +80", "", " ", "-1", "0", "65536", "8o"] {
            assert_eq!(parse_port(bad), None, "{bad:?}");
        }
        assert_eq!(parse_port(" 65535 "), Some(65535));
        assert_eq!(parse_port("1"), Some(1));
        assert!(port("+8080").is_err());
        assert_eq!(url("a:+80", "/metrics"), None);
        assert!(service("vllm:+80").is_err());
    }

    #[test]
    fn dns_names_follow_the_label_rules() {
        let long_label = "a".repeat(63);
        let long_name = [
            &*"a".repeat(63),
            &"b".repeat(63),
            &"c".repeat(63),
            &"d".repeat(61),
        ]
        .join(".");
        assert_eq!(long_name.len(), 253);
        for good in [
            "vllm",
            "vllm-headless.default.svc",
            "a-b.c",
            "x1",
            "vllm.",
            long_label.as_str(),
            long_name.as_str(),
        ] {
            assert!(dns_name(good), "{good:?}");
        }
        let too_long_label = "a".repeat(64);
        let too_long_name = format!("{long_name}e");
        for bad in [
            "",
            ".",
            "-vllm",
            "vllm-",
            "a.-b",
            "a.b-",
            "a..b",
            ".a",
            "a_b",
            too_long_label.as_str(),
            too_long_name.as_str(),
        ] {
            assert!(!dns_name(bad), "{bad:?}");
        }
        assert!(service("-vllm").is_err());
        assert!(service("a..b:80").is_err());
        assert_eq!(service("VLLM.ns:81"), Ok(("vllm.ns".to_owned(), Some(81))));
    }

    #[test]
    fn an_https_entry_is_refused_naming_it_and_the_fix() {
        let error = endpoints("http://a:8000, HTTPS://b:8443/m ,c:8000").unwrap_err();
        assert!(error.contains("\"HTTPS://b:8443/m\""), "{error}");
        assert!(error.contains("\"http://b:8443/m\""), "{error}");
        assert!(endpoints("http://a:8000,c:8000").is_ok());
    }
}
