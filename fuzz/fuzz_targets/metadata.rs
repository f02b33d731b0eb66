//! ScaledObject metadata validation on arbitrary key/value maps: no input may panic, whatever
//! the keys, values and their lengths.
#![no_main]

use std::collections::HashMap;

use libfuzzer_sys::fuzz_target;
use vllm_keda_core::config::ScalerConfig;

fuzz_target!(|data: &[u8]| {
    // Lines of `key=value`; the first '=' splits them.
    let text = String::from_utf8_lossy(data);
    let metadata: HashMap<String, String> = text
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let _ = ScalerConfig::from_metadata(&metadata);
});
