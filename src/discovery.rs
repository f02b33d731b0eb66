//! Target discovery: which `/metrics` URLs to scrape this cycle.
//!
//! Owns: turning a [`TargetSource`] into URLs (static list, or every A/AAAA record of a
//! headless Service, re-resolved each cycle). Does not own: fetching.
//!
//! INTERFACE STUB: the types and signatures below are the contract other modules build on.

use crate::config::TargetSource;

/// Discovery failed (DNS error): the previous target list stays in use by the caller.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("resolving {host:?}: {message}")]
pub struct DiscoveryError {
    /// The name that failed to resolve.
    pub host: String,
    /// Why.
    pub message: String,
}

/// The URLs to scrape now, sorted and deduplicated.
pub async fn resolve(source: &TargetSource) -> Result<Vec<String>, DiscoveryError> {
    match source {
        TargetSource::Static(urls) => Ok(urls.clone()),
        TargetSource::Dns { host, .. } => Err(DiscoveryError {
            host: host.clone(),
            message: "not implemented yet".into(),
        }),
    }
}
