//! The admin HTTP server: `/livez`, `/readyz`, `/metrics`, `/debug/scaledobjects`.
//!
//! INTERFACE STUB: to be implemented.
