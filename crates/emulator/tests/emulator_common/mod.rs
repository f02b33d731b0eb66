//! Helpers shared by the emulator's integration tests: the Python `prometheus_client` oracle.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::Write as _;
use std::process::{Command, Stdio};

/// One sample as Python `prometheus_client` parsed it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PySample {
    /// Sample name.
    pub(crate) name: String,
    /// Labels.
    pub(crate) labels: BTreeMap<String, String>,
    /// Value.
    pub(crate) value: f64,
}

const SCRIPT: &str = r#"
import sys, json
from prometheus_client.parser import text_string_to_metric_families
body = sys.stdin.read()
for fam in text_string_to_metric_families(body):
    for s in fam.samples:
        print(json.dumps([fam.type, s.name, s.labels, repr(float(s.value))]))
"#;

/// Parses `body` with Python `prometheus_client`, in body order. `None` (with a notice) when
/// Python or the library is missing and VLLM_KEDA_ALLOW_MISSING_ORACLES=1 allows that; otherwise
/// panics with install instructions.
pub(crate) fn python_parse(body: &str) -> Option<Vec<PySample>> {
    let probe = Command::new("python3")
        .args(["-c", "import prometheus_client"])
        .output();
    if !probe.map(|o| o.status.success()).unwrap_or(false) {
        let msg = "python3 with prometheus_client is needed for this test: \
                   python3 -m pip install -r tests/requirements.txt";
        // A missing oracle fails the test unless it is explicitly allowed, and then it says what
        // was not checked.
        if std::env::var_os("VLLM_KEDA_ALLOW_MISSING_ORACLES").is_none_or(|v| v != "1") {
            panic!("{msg} (or set VLLM_KEDA_ALLOW_MISSING_ORACLES=1 to skip this oracle)");
        }
        eprintln!("not checked: the prometheus_client oracle: {msg}");
        return None;
    }
    let mut child = Command::new("python3")
        .args(["-c", SCRIPT])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start python3");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "prometheus_client rejected the body: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    Some(
        text.lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                PySample {
                    name: v[1].as_str().unwrap().to_string(),
                    labels: v[2]
                        .as_object()
                        .unwrap()
                        .iter()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                        .collect(),
                    value: v[3].as_str().unwrap().parse().unwrap(),
                }
            })
            .collect(),
    )
}
