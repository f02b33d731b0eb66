//! Small SVG line charts for reports (demo, simulator, load test).
//!
//! INTERFACE STUB: to be implemented.
