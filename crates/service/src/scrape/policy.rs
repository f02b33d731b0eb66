//! Which addresses the scraper may connect to: the target policy.
//!
//! Whoever may create a ScaledObject chooses the URLs the scaler fetches from inside the
//! cluster, so every address is checked right before the connection is made, on the address
//! actually dialled: names are resolved by the scraper itself, every resolved address is
//! checked, and the request goes to the checked address (the URL's name travels only in the
//! `Host` header), so a name that resolves differently a moment later (DNS rebinding) cannot
//! slip past the check. IP literals are checked as the URL parser normalised them
//! (`2130706433` and `0x7f.1` are both `127.0.0.1`).
//!
//! The rules, in order:
//! 1. `--allow-target-ports`, when given: the port must be listed. When not given, the
//!    Kubernetes control-plane ports ([`CONTROL_PLANE_PORTS`]: the kubelet's API and read-only
//!    ports, the API server, etcd) are refused on every address; listing one opens it.
//! 2. `--deny-targets`: an address inside one of these is refused.
//! 3. The scaler's own listeners: its gRPC and admin ports on any of its own addresses are
//!    refused (no flag opens them).
//! 4. `--allow-targets`, when given: the address must be inside one of these.
//! 5. The built-in rules ([`DEFAULT_RULES`]: loopback, link-local, cloud metadata, unspecified,
//!    multicast) refuse their ranges unless an `--allow-targets` entry inside that range
//!    (as narrow as the rule or narrower) covers the address: `--allow-targets 127.0.0.0/8`
//!    opens loopback, but `--allow-targets 0.0.0.0/0` does not open the metadata address.
//!
//! IPv4-mapped IPv6 addresses (`::ffff:127.0.0.1`) are checked as the IPv4 address they are;
//! for IPv6 forms that embed an IPv4 address (IPv4-compatible `::a.b.c.d`, NAT64
//! `64:ff9b::/96`, 6to4 `2002::/16`) the embedded address must also pass rules 2, 3 and 5.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;

/// An address range in CIDR notation (`10.0.0.0/8`, `fd00::/8`); a bare address is a range of
/// one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// The range `network/prefix`; `None` when the prefix is longer than the address.
    pub const fn new(network: IpAddr, prefix: u8) -> Option<Self> {
        let max = match network {
            IpAddr::V4(_) => 32,
            IpAddr::V6(_) => 128,
        };
        if prefix > max {
            return None;
        }
        Some(Self { network, prefix })
    }

    const fn v4(a: u8, b: u8, c: u8, d: u8, prefix: u8) -> Self {
        Self {
            network: IpAddr::V4(Ipv4Addr::new(a, b, c, d)),
            prefix,
        }
    }

    const fn v6(segments: [u16; 8], prefix: u8) -> Self {
        let [a, b, c, d, e, f, g, h] = segments;
        Self {
            network: IpAddr::V6(Ipv6Addr::new(a, b, c, d, e, f, g, h)),
            prefix,
        }
    }

    /// The prefix length.
    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    /// Whether `ip` lies in this range (an IPv4 range never holds an IPv6 address).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.network, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                (u32::from(net) & mask) == (u32::from(ip) & mask)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                (u128::from(net) & mask) == (u128::from(ip) & mask)
            }
            _ => false,
        }
    }

    /// Whether every address of `self` lies in `outer`.
    fn within(&self, outer: &Cidr) -> bool {
        self.prefix >= outer.prefix && outer.contains(self.network)
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

impl FromStr for Cidr {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let text = text.trim();
        let invalid = |why: &str| {
            format!(
                "{text:?} is not an address range: {why}; expected CIDR notation such as \
                 10.0.0.0/8, 127.0.0.1/32, fd00::/8 or a single address"
            )
        };
        let (address, prefix) = match text.split_once('/') {
            Some((address, prefix)) => (address, Some(prefix)),
            None => (text, None),
        };
        let network: IpAddr = address
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse()
            .map_err(|_| invalid("not an IP address"))?;
        let max = if network.is_ipv4() { 32 } else { 128 };
        let prefix =
            match prefix {
                None => max,
                Some(p) => p.parse::<u8>().ok().filter(|p| *p <= max).ok_or_else(|| {
                    invalid(&format!("the prefix must be a number from 0 to {max}"))
                })?,
            };
        Ok(Self { network, prefix })
    }
}

/// One built-in refusal: a name for error messages and the range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DefaultRule {
    /// What the range is (`loopback`, `cloud metadata (AWS IMDS IPv6)`, ...).
    pub name: &'static str,
    /// The range refused.
    pub range: Cidr,
}

const fn rule(name: &'static str, range: Cidr) -> DefaultRule {
    DefaultRule { name, range }
}

/// The ranges refused unless `--allow-targets` names them (or a part of them).
///
/// The cloud metadata services: `169.254.169.254` (AWS, GCP, Azure, Oracle, OpenStack,
/// DigitalOcean, Hetzner; inside link-local, listed on its own so that opening link-local does
/// not open it), `fd00:ec2::254` (AWS IMDS over IPv6), `fd20:ce::254` (GCP over IPv6),
/// `100.100.100.200` (Alibaba Cloud), `168.63.129.16` (Azure's host endpoint, WireServer).
/// ECS task metadata (`169.254.170.2`) and Tencent Cloud (`169.254.0.23`) are link-local.
pub const DEFAULT_RULES: [DefaultRule; 15] = [
    rule("unspecified", Cidr::v4(0, 0, 0, 0, 8)),
    rule("unspecified", Cidr::v6([0; 8], 128)),
    rule("loopback", Cidr::v4(127, 0, 0, 0, 8)),
    rule("loopback", Cidr::v6([0, 0, 0, 0, 0, 0, 0, 1], 128)),
    rule("link-local", Cidr::v4(169, 254, 0, 0, 16)),
    rule("link-local", Cidr::v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10)),
    rule("cloud metadata", Cidr::v4(169, 254, 169, 254, 32)),
    rule(
        "cloud metadata (AWS IMDS over IPv6)",
        Cidr::v6([0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254], 128),
    ),
    rule(
        "cloud metadata (GCP over IPv6)",
        Cidr::v6([0xfd20, 0xce, 0, 0, 0, 0, 0, 0x254], 128),
    ),
    rule(
        "cloud metadata (Alibaba Cloud)",
        Cidr::v4(100, 100, 100, 200, 32),
    ),
    rule(
        "cloud host endpoint (Azure WireServer)",
        Cidr::v4(168, 63, 129, 16, 32),
    ),
    rule("multicast", Cidr::v4(224, 0, 0, 0, 4)),
    rule("multicast", Cidr::v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8)),
    rule("broadcast", Cidr::v4(255, 255, 255, 255, 32)),
    rule("reserved", Cidr::v4(240, 0, 0, 0, 4)),
];

/// Why an address was refused: the rule and the flag that would allow it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("address {address} is refused by {rule}; {fix}")]
pub struct Refusal {
    /// The address refused.
    pub address: SocketAddr,
    /// The rule that refused it.
    pub rule: String,
    /// The flag (or change) that would allow it.
    pub fix: String,
}

/// Which of the scaler's listeners an address belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OwnListener {
    /// The bound address (`0.0.0.0:9090` means every local address on port 9090).
    pub addr: SocketAddr,
    /// `gRPC` or `admin HTTP`.
    pub what: &'static str,
}

/// The ports refused on every address unless `--allow-target-ports` lists them: a tenant must
/// not point the scaler at a node's kubelet (10250, and the read-only 10255 that serves pod
/// lists and metrics over plain http), the API server (6443) or etcd (2379, 2380). vLLM serves
/// its metrics on its API port (8000 by default) and DCGM's exporter on 9400.
pub const CONTROL_PLANE_PORTS: [(u16, &str); 5] = [
    (10250, "the kubelet API"),
    (10255, "the kubelet read-only API"),
    (6443, "the Kubernetes API server"),
    (2379, "etcd clients"),
    (2380, "etcd peers"),
];

/// The target policy; see the module docs. The default refuses the [`DEFAULT_RULES`] and
/// allows everything else.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TargetPolicy {
    /// `--allow-targets`: when non-empty, only these ranges; also opens built-in ranges it
    /// names.
    pub allow: Vec<Cidr>,
    /// `--deny-targets`: always refused.
    pub deny: Vec<Cidr>,
    /// `--allow-target-ports`: when non-empty, only these ports.
    pub ports: Vec<u16>,
    /// The scaler's own listeners (set by `serve`).
    pub own: Vec<OwnListener>,
}

impl TargetPolicy {
    /// The default policy with `--allow-targets` set to `allow`.
    pub fn allowing(allow: impl IntoIterator<Item = Cidr>) -> Self {
        Self {
            allow: allow.into_iter().collect(),
            ..Self::default()
        }
    }

    /// The policy for tests and local runs: the default plus loopback (`127.0.0.0/8`,
    /// `::1/128`), which is what `--allow-targets 127.0.0.0/8,::1` gives.
    pub fn loopback() -> Self {
        Self::allowing([
            Cidr::v4(127, 0, 0, 0, 8),
            Cidr::v6([0, 0, 0, 0, 0, 0, 0, 1], 128),
        ])
    }

    /// Checks one address about to be dialled.
    pub fn check(&self, address: SocketAddr) -> Result<(), Refusal> {
        let refuse = |rule: String, fix: String| Refusal { address, rule, fix };
        let port = address.port();
        if !self.ports.is_empty() && !self.ports.contains(&port) {
            return Err(refuse(
                format!("--allow-target-ports ({})", join(&self.ports)),
                format!("add {port} to --allow-target-ports to allow it"),
            ));
        }
        if self.ports.is_empty()
            && let Some((_, what)) = CONTROL_PLANE_PORTS.iter().find(|(p, _)| *p == port)
        {
            return Err(refuse(
                format!(
                    "the built-in rule refusing Kubernetes control-plane ports ({what}, port {port})"
                ),
                format!(
                    "point the ScaledObject at the pods' metrics port, or list {port} in \
                     --allow-target-ports to allow it"
                ),
            ));
        }
        let ip = address.ip().to_canonical();
        let embedded = embedded_ipv4(ip);
        for candidate in std::iter::once(ip).chain(embedded.map(IpAddr::V4)) {
            if let Some(range) = self.deny.iter().find(|r| r.contains(candidate)) {
                return Err(refuse(
                    format!("--deny-targets {range}"),
                    format!("remove {range} from --deny-targets to allow it"),
                ));
            }
            if let Some(own) = self.own_listener(candidate, port) {
                return Err(refuse(
                    format!(
                        "the rule that the scaler never scrapes itself ({} port {port})",
                        own.what
                    ),
                    "point the ScaledObject at the vLLM pods' metrics port instead".to_owned(),
                ));
            }
        }
        if !self.allow.is_empty() && !self.allow.iter().any(|r| r.contains(ip)) {
            return Err(refuse(
                format!(
                    "--allow-targets ({}), which does not hold it",
                    join(&self.allow)
                ),
                format!("add {ip} (or its range) to --allow-targets to allow it"),
            ));
        }
        for candidate in std::iter::once(ip).chain(embedded.map(IpAddr::V4)) {
            // The narrowest rule first: the metadata address is named as such, not as
            // link-local.
            let mut matching: Vec<&DefaultRule> = DEFAULT_RULES
                .iter()
                .filter(|d| d.range.contains(candidate))
                .collect();
            matching.sort_by_key(|d| std::cmp::Reverse(d.range.prefix));
            for default in matching {
                let opened = self
                    .allow
                    .iter()
                    .any(|allowed| allowed.contains(candidate) && allowed.within(&default.range));
                if !opened {
                    return Err(refuse(
                        format!(
                            "the built-in rule refusing {} ({})",
                            default.name, default.range
                        ),
                        format!(
                            "add {} (or {candidate}) to --allow-targets to allow it",
                            default.range
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The listener of this scaler at `ip:port`, if any.
    fn own_listener(&self, ip: IpAddr, port: u16) -> Option<&OwnListener> {
        self.own.iter().find(|own| {
            if own.addr.port() != port {
                return false;
            }
            let bound = own.addr.ip().to_canonical();
            if bound == ip {
                return true;
            }
            // A wildcard listener answers on every local address.
            bound.is_unspecified() && (ip.is_unspecified() || ip.is_loopback() || is_local(ip))
        })
    }
}

/// Whether `ip` is one of this host's addresses: binding to it succeeds only if it is.
fn is_local(ip: IpAddr) -> bool {
    std::net::UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

/// The IPv4 address inside an IPv6 form that embeds one (IPv4-compatible, NAT64, 6to4).
fn embedded_ipv4(ip: IpAddr) -> Option<Ipv4Addr> {
    let IpAddr::V6(v6) = ip else {
        return None;
    };
    let bits = u128::from(v6);
    let compat = Cidr::v6([0; 8], 96);
    let nat64 = Cidr::v6([0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96);
    if (compat.contains(ip) && bits > 1) || nat64.contains(ip) {
        return Some(Ipv4Addr::from(bits as u32));
    }
    if Cidr::v6([0x2002, 0, 0, 0, 0, 0, 0, 0], 16).contains(ip) {
        return Some(Ipv4Addr::from((bits >> 80) as u32));
    }
    None
}

fn join<T: fmt::Display>(items: &[T]) -> String {
    items
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(text: &str) -> SocketAddr {
        text.parse().unwrap()
    }

    fn refused(policy: &TargetPolicy, text: &str) -> String {
        policy.check(addr(text)).unwrap_err().to_string()
    }

    #[test]
    fn cidrs_parse_and_contain() {
        let c: Cidr = "10.0.0.0/8".parse().unwrap();
        assert!(c.contains("10.255.0.1".parse().unwrap()));
        assert!(!c.contains("11.0.0.1".parse().unwrap()));
        assert!(!c.contains("::1".parse().unwrap()));
        let one: Cidr = "127.0.0.1".parse().unwrap();
        assert_eq!(one.prefix(), 32);
        let v6: Cidr = "[fd00::]/8".parse().unwrap();
        assert!(v6.contains("fd12::1".parse().unwrap()));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("1.2.3.4".parse().unwrap()));
        for bad in ["10.0.0.0/33", "::/129", "host/8", "", "10.0.0.0/x"] {
            let e = bad.parse::<Cidr>().unwrap_err();
            assert!(e.contains("expected CIDR notation"), "{e}");
        }
    }

    #[test]
    fn the_default_refuses_loopback_link_local_metadata_and_unspecified() {
        let p = TargetPolicy::default();
        assert!(p.check(addr("10.1.2.3:8000")).is_ok());
        assert!(p.check(addr("[2001:db8::1]:8000")).is_ok());
        for (target, rule) in [
            ("127.0.0.1:8000", "loopback (127.0.0.0/8)"),
            ("127.9.9.9:80", "loopback"),
            ("[::1]:8000", "loopback (::1/128)"),
            ("169.254.169.254:80", "cloud metadata (169.254.169.254/32)"),
            ("169.254.170.2:80", "link-local"),
            ("[fe80::1]:80", "link-local"),
            ("[fd00:ec2::254]:80", "AWS IMDS over IPv6"),
            ("[fd20:ce::254]:80", "GCP over IPv6"),
            ("100.100.100.200:80", "Alibaba"),
            ("168.63.129.16:80", "Azure"),
            ("0.0.0.0:80", "unspecified"),
            ("[::]:80", "unspecified"),
            ("[::ffff:127.0.0.1]:80", "loopback"),
            ("[::127.0.0.1]:80", "loopback"),
            ("[64:ff9b::a9fe:a9fe]:80", "cloud metadata"),
            ("[2002:7f00:1::]:80", "loopback"),
            ("224.0.0.1:80", "multicast"),
        ] {
            let e = refused(&p, target);
            assert!(e.contains(rule), "{target}: {e}");
            assert!(e.contains("--allow-targets"), "{target}: {e}");
        }
    }

    #[test]
    fn allowing_a_range_opens_only_what_it_names() {
        let p = TargetPolicy::loopback();
        assert!(p.check(addr("127.0.0.1:8000")).is_ok());
        assert!(p.check(addr("[::1]:8000")).is_ok());
        assert!(p.check(addr("[::ffff:127.0.0.1]:8000")).is_ok());
        // A non-empty allow list is an allow list.
        assert!(refused(&p, "10.0.0.1:80").contains("--allow-targets (127.0.0.0/8,::1/128)"));

        let everything = TargetPolicy::allowing(["0.0.0.0/0".parse().unwrap()]);
        assert!(everything.check(addr("10.0.0.1:80")).is_ok());
        assert!(refused(&everything, "127.0.0.1:80").contains("loopback"));
        assert!(refused(&everything, "169.254.169.254:80").contains("cloud metadata"));

        let link_local = TargetPolicy::allowing(["169.254.0.0/16".parse().unwrap()]);
        assert!(link_local.check(addr("169.254.1.1:80")).is_ok());
        assert!(refused(&link_local, "169.254.169.254:80").contains("cloud metadata"));
        let metadata = TargetPolicy::allowing(["169.254.169.254".parse().unwrap()]);
        assert!(metadata.check(addr("169.254.169.254:80")).is_ok());
    }

    #[test]
    fn control_plane_ports_are_refused_unless_listed() {
        let policy = TargetPolicy::default();
        for (port, what) in CONTROL_PLANE_PORTS {
            let address: SocketAddr = format!("10.0.0.5:{port}").parse().unwrap();
            let e = policy.check(address).unwrap_err().to_string();
            assert!(e.contains(what), "{e}");
            assert!(
                e.contains(&format!("list {port} in --allow-target-ports")),
                "{e}"
            );
        }
        assert!(policy.check("10.0.0.5:8000".parse().unwrap()).is_ok());
        assert!(policy.check("10.0.0.5:9400".parse().unwrap()).is_ok());
        // Listing the port opens it (and the listed ports alone).
        let listed = TargetPolicy {
            ports: vec![10255],
            ..TargetPolicy::default()
        };
        assert!(listed.check("10.0.0.5:10255".parse().unwrap()).is_ok());
        assert!(listed.check("10.0.0.5:10250".parse().unwrap()).is_err());
    }

    #[test]
    fn deny_and_ports_and_own_listeners() {
        let p = TargetPolicy {
            deny: vec!["10.9.0.0/16".parse().unwrap()],
            ports: vec![8000, 9400],
            own: vec![
                OwnListener {
                    addr: addr("0.0.0.0:9090"),
                    what: "gRPC",
                },
                OwnListener {
                    addr: addr("10.1.1.1:8080"),
                    what: "admin HTTP",
                },
            ],
            ..TargetPolicy::loopback()
        };
        let e = refused(&p, "10.9.1.1:8000");
        assert!(e.contains("--deny-targets 10.9.0.0/16"), "{e}");
        let e = refused(&p, "[::ffff:10.9.1.1]:8000");
        assert!(e.contains("--deny-targets"), "{e}");
        let e = refused(&p, "127.0.0.1:22");
        assert!(e.contains("add 22 to --allow-target-ports"), "{e}");
        let p = TargetPolicy {
            ports: Vec::new(),
            ..p
        };
        let e = refused(&p, "127.0.0.1:9090");
        assert!(e.contains("never scrapes itself (gRPC port 9090)"), "{e}");
        let e = refused(&p, "10.1.1.1:8080");
        assert!(e.contains("admin HTTP"), "{e}");
        assert!(p.check(addr("127.0.0.1:8080")).is_ok());
    }
}
