//! Round trip against an independent implementation: Python `prometheus_client`'s text parser
//! (the library vLLM renders its metrics with) must see the same (name, labels, value) set as
//! ours on every fixture and on a generated body full of tricky but valid lines.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};

use vllm_keda_core::exposition::{self, MetricType};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/fixtures");

/// Reads a body on stdin, prints one JSON line per sample: [name, {labels}, repr(value)].
const PYTHON: &str = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
body = sys.stdin.buffer.read().decode("utf-8")
for family in text_string_to_metric_families(body):
    for s in family.samples:
        print(json.dumps([s.name, s.labels, repr(float(s.value))]))
"#;

/// (name, sorted labels, value bits with every NaN folded to one).
type Key = (String, Vec<(String, String)>, u64);

fn value_key(v: f64) -> u64 {
    if v.is_nan() {
        f64::NAN.to_bits()
    } else {
        v.to_bits()
    }
}

/// `false` (after printing why) when the oracle is missing outside CI; panics in CI.
fn python_available() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import prometheus_client"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        let how = "python3 with prometheus_client is needed: python3 -m pip install -r tests/requirements.txt";
        // A missing oracle fails the test unless it is explicitly allowed.
        if std::env::var_os("VLLM_KEDA_ALLOW_MISSING_ORACLES").is_none_or(|v| v != "1") {
            panic!("{how} (or set VLLM_KEDA_ALLOW_MISSING_ORACLES=1 to skip this oracle)");
        }
        eprintln!("not checked: the python round trip; {how}");
    }
    ok
}

fn python_samples(what: &str, body: &str) -> Vec<Key> {
    let mut child = Command::new("python3")
        .args(["-c", PYTHON])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn python3");
    let mut stdin = child.stdin.take().unwrap();
    let input = body.to_owned();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().expect("python3 output");
    writer.join().unwrap().expect("write body to python3");
    assert!(
        out.status.success(),
        "{what}: python parser failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut keys: Vec<Key> = String::from_utf8(out.stdout)
        .expect("utf-8 from python")
        .lines()
        .map(|line| {
            let (name, labels, value): (String, BTreeMap<String, String>, String) =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("{what}: {line}: {e}"));
            let value: f64 = value
                .parse()
                .unwrap_or_else(|e| panic!("{what}: {value}: {e}"));
            (name, labels.into_iter().collect(), value_key(value))
        })
        .collect();
    keys.sort();
    keys
}

fn our_samples(what: &str, body: &str) -> Vec<Key> {
    let exp = exposition::parse(body).unwrap_or_else(|e| panic!("{what}: {e}"));
    let mut keys: Vec<Key> = exp
        .samples
        .iter()
        .map(|s| {
            // Python renames the samples of a counter family declared without `_total` to
            // `<family>_total` (its OpenMetrics-style internal model); mirror that quirk.
            let counter_without_total =
                exp.metric_type(s.name) == Some(MetricType::Counter) && !s.name.ends_with("_total");
            let name = if counter_without_total {
                format!("{}_total", s.name)
            } else {
                s.name.to_owned()
            };
            let mut labels: Vec<(String, String)> = s
                .labels
                .iter()
                .map(|l| (l.name.to_owned(), l.value.clone().into_owned()))
                .collect();
            labels.sort();
            (name, labels, value_key(s.value))
        })
        .collect();
    keys.sort();
    keys
}

fn assert_same(what: &str, body: &str) {
    let ours = our_samples(what, body);
    let theirs = python_samples(what, body);
    let only_ours: Vec<_> = ours
        .iter()
        .filter(|k| !theirs.contains(k))
        .take(5)
        .collect();
    let only_theirs: Vec<_> = theirs
        .iter()
        .filter(|k| !ours.contains(k))
        .take(5)
        .collect();
    assert!(
        ours == theirs,
        "{what}: {} samples ours vs {} python; only ours: {only_ours:#?}; only python: {only_theirs:#?}",
        ours.len(),
        theirs.len()
    );
    assert!(!ours.is_empty(), "{what}: no samples compared");
}

#[test]
fn fixtures_match_python_prometheus_client() {
    if !python_available() {
        return;
    }
    let mut files: Vec<_> = std::fs::read_dir(FIXTURES)
        .expect("list fixtures")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "prom"))
        .collect();
    files.sort();
    assert!(files.len() >= 4);
    for path in files {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let body = std::fs::read_to_string(&path).unwrap();
        assert_same(&name, &body);
    }
}

/// A small deterministic generator (xorshift), so the body is the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[(self.next() % items.len() as u64) as usize]
    }
}

/// Valid lines exercising names with colons, escapes, UTF-8, special values, exponents,
/// timestamps, blank lines, CRLF, empty label sets, trailing commas and repeated metadata.
fn tricky_body() -> String {
    let mut body = String::from(
        "# HELP vllm:tricky A help with \\\\ and \\n escapes.\n\
         # TYPE vllm:tricky gauge\n\
         # TYPE vllm:tricky gauge\n\
         vllm:tricky{a=\"back\\\\slash\",b=\"quo\\\"te\",c=\"new\\nline\"} 1\n\
         vllm:tricky{a=\"} , # = {\"} 2\n\
         vllm:tricky{a=\"ümlaut 🚀 日本\"} -3.5e-7\n\
         vllm:tricky{} 4\n\
         vllm:tricky{a=\"trailing\",} 5\n\
         \n\
         \r\n\
         # a plain comment\n\
         :leading:colon 6 1712345678901\n\
         _under_score NaN\n\
         inf_values{s=\"+\"} +Inf\n\
         inf_values{s=\"-\"} -Inf\n\
         inf_values{s=\"bare\"} Inf\n\
         crlf_line{x=\"y\"} 7\r\n\
         # TYPE hist histogram\n\
         hist_bucket{le=\"0.1\"} 1\n\
         hist_bucket{le=\"+Inf\"} 3\n\
         hist_sum 1.7672580591200001e+09\n\
         hist_count 3\n\
         # TYPE plain_counter counter\n\
         plain_counter 8\n",
    );
    let names = ["vllm:gen_a", "vllm:gen_b", "gen_c", "Gen:D_e"];
    let label_names = ["model_name", "engine", "le", "_x", "A1"];
    let label_values = [
        "meta-llama/Llama-3.1-8B-Instruct",
        "0",
        "+Inf",
        "",
        "a\\\\b",
        "say \\\"hi\\\"",
        "two\\nlines",
        "ß∂ƒ",
        "{a=\\\"b\\\"}",
    ];
    let values = [
        "0",
        "0.0",
        "14.0",
        "0.9003",
        "1.144722e+06",
        "1e-05",
        "-2",
        "NaN",
        "+Inf",
        "-Inf",
        "6.0521304064e+10",
        "123456789012345678901234567890",
        "4.9e-324",
    ];
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for i in 0..400 {
        let name = rng.pick(&names);
        let n_labels = rng.next() % 4;
        let mut line = name.to_owned();
        if n_labels > 0 || rng.next() % 4 == 0 {
            line.push('{');
            // A distinct label per series keeps the samples distinct.
            line.push_str(&format!("series=\"{i}\""));
            for (j, label) in label_names.iter().take(n_labels as usize).enumerate() {
                let value = rng.pick(&label_values);
                line.push_str(&format!(",{label}{j}=\"{value}\""));
            }
            if rng.next() % 3 == 0 {
                line.push(',');
            }
            line.push('}');
        } else {
            line = format!("{name}_{i}");
        }
        line.push(' ');
        line.push_str(rng.pick(&values));
        if rng.next() % 5 == 0 {
            line.push_str(&format!(" {}", 1_700_000_000_000 + rng.next() % 1_000_000));
        }
        line.push_str(if rng.next() % 7 == 0 { "\r\n" } else { "\n" });
        body.push_str(&line);
    }
    body.push_str("# EOF\n");
    body
}

#[test]
fn tricky_body_matches_python_prometheus_client() {
    if !python_available() {
        return;
    }
    let body = tricky_body();
    assert_same("generated tricky body", &body);
}
