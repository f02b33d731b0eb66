//! Target keys: `endpoints` | `service` (+ `port`, `metricsPath`) for vLLM, and
//! `dcgmEndpoints` | `dcgmService` for the DCGM exporter.

use super::parse::{Meta, expected};
use super::{ConfigError, TargetSource};

const VLLM_PORT: u16 = 8000;
const DCGM_PORT: u16 = 9400;
const METRICS_PATH: &str = "/metrics";

/// The vLLM targets: exactly one of `endpoints` and `service`.
pub(super) fn vllm_targets(m: &Meta<'_>) -> Result<TargetSource, ConfigError> {
    let path = match m.get("metricsPath") {
        None => METRICS_PATH.to_owned(),
        Some(p) => {
            let t = p.trim();
            if !t.starts_with('/') || t.chars().any(|c| c.is_whitespace() || c == '?' || c == '#') {
                return Err(expected("metricsPath", "a path starting with \"/\"", p));
            }
            t.to_owned()
        }
    };
    let port = match m.get("port") {
        None => None,
        Some(p) => Some(
            parse_port(p).ok_or_else(|| expected("port", "a port number from 1 to 65535", p))?,
        ),
    };
    match (m.get("endpoints"), m.get("service")) {
        (Some(_), Some(_)) => Err(ConfigError::new(
            "service",
            "expected either \"endpoints\" or \"service\", not both",
        )),
        (None, None) => Err(ConfigError::new(
            "endpoints",
            "required: comma-separated vLLM metrics URLs or host:port entries (or set \"service\" to a headless Service name)",
        )),
        (Some(list), None) => {
            if port.is_some() {
                return Err(ConfigError::new(
                    "port",
                    "only used with \"service\"; put the port in each entry of \"endpoints\"",
                ));
            }
            endpoints("endpoints", list, &path).map(TargetSource::Static)
        }
        (None, Some(name)) => {
            let (host, own_port) = service("service", name)?;
            if let (Some(_), Some(_)) = (own_port, port) {
                return Err(ConfigError::new(
                    "port",
                    "expected the port either in \"service\" (name:port) or in \"port\", not both",
                ));
            }
            Ok(TargetSource::Dns {
                host,
                port: own_port.or(port).unwrap_or(VLLM_PORT),
                path,
            })
        }
    }
}

/// The DCGM exporter targets, if configured: at most one of `dcgmEndpoints` and `dcgmService`.
pub(super) fn dcgm_targets(m: &Meta<'_>) -> Result<Option<TargetSource>, ConfigError> {
    match (m.get("dcgmEndpoints"), m.get("dcgmService")) {
        (Some(_), Some(_)) => Err(ConfigError::new(
            "dcgmService",
            "expected either \"dcgmEndpoints\" or \"dcgmService\", not both",
        )),
        (None, None) => Ok(None),
        (Some(list), None) => {
            endpoints("dcgmEndpoints", list, METRICS_PATH).map(|u| Some(TargetSource::Static(u)))
        }
        (None, Some(name)) => {
            let (host, port) = service("dcgmService", name)?;
            Ok(Some(TargetSource::Dns {
                host,
                port: port.unwrap_or(DCGM_PORT),
                path: METRICS_PATH.to_owned(),
            }))
        }
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

/// `name` or `name:port`.
fn service(key: &str, value: &str) -> Result<(String, Option<u16>), ConfigError> {
    let what = "a DNS name such as vllm-headless.default.svc.cluster.local, optionally name:port";
    let t = value.trim();
    let (host, port) = match t.rsplit_once(':') {
        Some((h, p)) => (
            h,
            Some(parse_port(p).ok_or_else(|| expected(key, what, value))?),
        ),
        None => (t, None),
    };
    if !dns_name(host) {
        return Err(expected(key, what, value));
    }
    Ok((host.to_ascii_lowercase(), port))
}

/// A comma-separated list of URLs or `host:port`, as URLs, in order, without duplicates.
fn endpoints(key: &str, value: &str, path: &str) -> Result<Vec<String>, ConfigError> {
    let mut out: Vec<String> = Vec::new();
    for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let url = endpoint(entry, path).ok_or_else(|| {
            expected(
                key,
                "comma-separated http(s)://host:port/path URLs or host:port entries",
                entry,
            )
        })?;
        if !out.contains(&url) {
            out.push(url);
        }
    }
    if out.is_empty() {
        return Err(expected(
            key,
            "comma-separated http(s)://host:port/path URLs or host:port entries",
            value,
        ));
    }
    Ok(out)
}

fn endpoint(entry: &str, path: &str) -> Option<String> {
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
        if s != "http" && s != "https" {
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
    let path = if own_path.is_empty() || own_path == "/" {
        path
    } else {
        own_path
    };
    let scheme = scheme.unwrap_or_else(|| "http".to_owned());
    Some(match port {
        Some(p) => format!("{scheme}://{host}:{p}{path}"),
        None => format!("{scheme}://{host}{path}"),
    })
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

    #[test]
    fn endpoint_forms() {
        let p = "/metrics";
        assert_eq!(
            endpoint("10.0.0.7:8000", p).as_deref(),
            Some("http://10.0.0.7:8000/metrics")
        );
        assert_eq!(
            endpoint("http://a:8000", p).as_deref(),
            Some("http://a:8000/metrics")
        );
        assert_eq!(
            endpoint("https://a/x/m", p).as_deref(),
            Some("https://a/x/m")
        );
        assert_eq!(
            endpoint("http://[::1]:9/", p).as_deref(),
            Some("http://[::1]:9/metrics")
        );
        for bad in [
            "a",
            "a:0",
            "a:99999",
            "ftp://a:1",
            "a:1/metrics",
            "http://:80",
            "http://a b",
        ] {
            assert_eq!(endpoint(bad, p), None, "{bad}");
        }
    }
}
