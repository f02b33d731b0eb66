//! KEDA's external-scaler gRPC service, answering from [`crate::control`]'s state.
//!
//! INTERFACE STUB: to be implemented.
