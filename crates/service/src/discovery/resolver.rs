//! Name resolvers: the system's (getaddrinfo: `/etc/hosts`, then the cluster DNS with its
//! search domains), and one that reads a hosts(5) file at a configurable path on every call.

use std::io;
use std::net::IpAddr;
use std::path::PathBuf;

use futures_util::future::BoxFuture;

/// Turns a host name into every address it has now. Implementations must not cache: discovery
/// calls this every cycle so pods that come and go are seen.
pub trait Resolver: Send + Sync {
    /// Every A and AAAA address of `host`, in any order, possibly with repeats.
    fn lookup<'a>(&'a self, host: &'a str) -> BoxFuture<'a, io::Result<Vec<IpAddr>>>;
}

/// The operating system's resolver (`getaddrinfo`), as Kubernetes pods expect: it honours
/// `/etc/hosts`, `/etc/resolv.conf` search domains and `ndots`.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

impl Resolver for SystemResolver {
    fn lookup<'a>(&'a self, host: &'a str) -> BoxFuture<'a, io::Result<Vec<IpAddr>>> {
        Box::pin(async move {
            let addrs = tokio::net::lookup_host((host, 0)).await?;
            Ok(addrs.map(|a| a.ip()).collect())
        })
    }
}

/// A resolver that answers from a hosts(5) file (`ADDRESS NAME [ALIAS...]`, `#` comments),
/// re-read on every lookup. Useful where a name's addresses are managed as a file (local
/// demos, tests that make a pod disappear by editing the file).
#[derive(Debug, Clone)]
pub struct HostsFileResolver {
    path: PathBuf,
}

impl HostsFileResolver {
    /// A resolver reading `path` on every lookup.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }
}

impl Resolver for HostsFileResolver {
    fn lookup<'a>(&'a self, host: &'a str) -> BoxFuture<'a, io::Result<Vec<IpAddr>>> {
        Box::pin(async move {
            let text = tokio::fs::read_to_string(&self.path).await.map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("reading hosts file {}: {e}", self.path.display()),
                )
            })?;
            let found = hosts_lookup(&text, host);
            if found.is_empty() {
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!(
                        "no entry for {host:?} in hosts file {}",
                        self.path.display()
                    ),
                ));
            }
            Ok(found)
        })
    }
}

/// Every address a hosts(5) text lists for `host` (case-insensitive, trailing dot ignored).
/// Lines whose address does not parse are skipped, as the C library does.
pub(crate) fn hosts_lookup(text: &str, host: &str) -> Vec<IpAddr> {
    let want = host.trim_end_matches('.');
    let mut found = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("");
        let mut fields = line.split_whitespace();
        let Some(Ok(addr)) = fields.next().map(str::parse::<IpAddr>) else {
            continue;
        };
        if fields.any(|name| name.trim_end_matches('.').eq_ignore_ascii_case(want)) {
            found.push(addr);
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_text_is_read_like_the_c_library() {
        let text = "# comment\n127.0.0.1 localhost\n10.0.0.2  Pods pods.ns.svc # trailing\n\
                    fd00::3 pods\nnot-an-ip pods\n10.0.0.9 other\n\n10.0.0.4\tpods.\n";
        let got = hosts_lookup(text, "pods");
        let want: Vec<IpAddr> = ["10.0.0.2", "fd00::3", "10.0.0.4"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        assert_eq!(got, want);
        assert_eq!(hosts_lookup(text, "pods.ns.svc.").len(), 1);
        assert!(hosts_lookup(text, "missing").is_empty());
    }

    #[tokio::test]
    async fn hosts_file_resolver_errors_name_the_file_and_host() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hosts");
        std::fs::write(&path, "10.0.0.1 a\n").unwrap();
        let r = HostsFileResolver::new(&path);
        assert_eq!(
            r.lookup("a").await.unwrap(),
            vec!["10.0.0.1".parse::<IpAddr>().unwrap()]
        );
        let e = r.lookup("b").await.unwrap_err().to_string();
        assert!(e.contains("\"b\"") && e.contains("hosts"), "{e}");
        let missing = HostsFileResolver::new(dir.path().join("nope"));
        let e = missing.lookup("a").await.unwrap_err().to_string();
        assert!(e.contains("nope"), "{e}");
    }

    #[tokio::test]
    async fn system_resolver_finds_localhost() {
        let addrs = SystemResolver.lookup("localhost").await.unwrap();
        assert!(addrs.iter().any(IpAddr::is_loopback), "{addrs:?}");
    }
}
