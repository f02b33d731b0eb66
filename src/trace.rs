//! Request trace files (Azure LLM 2023 CSV, Mooncake JSON lines): arrival time, prompt and
//! output token counts.
//!
//! INTERFACE STUB: to be implemented.
