//! One background loop per ScaledObject: discover, scrape, parse, compute signals, decide,
//! and keep the latest decision in memory for the RPCs.
//!
//! INTERFACE STUB: to be implemented.
