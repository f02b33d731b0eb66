//! Request shapes (prompt and output sizes) and arrival processes for the load test.
//!
//! Owns: parsing `--shape` (`fixed:P:O`, `uniform:PLO-PHI:OLO-OHI`, `trace:FILE`) and
//! `--arrivals` (`uniform`, `poisson`), and drawing sizes and gaps from them with a small
//! seeded generator so runs repeat exactly. Does not own: sending.

use std::path::PathBuf;
use std::sync::Arc;

use crate::trace::read_trace;
/// The seeded generator sizes and gaps are drawn from.
pub use vllm_keda_core::rng::SplitMix64;

/// Where request sizes come from.
#[derive(Debug, Clone, PartialEq)]
pub enum Shape {
    /// Every request has the same prompt and output size.
    Fixed {
        /// Prompt tokens.
        prompt_tokens: u32,
        /// Output tokens.
        output_tokens: u32,
    },
    /// Sizes drawn uniformly from inclusive ranges.
    Uniform {
        /// Prompt tokens, low and high.
        prompt_tokens: (u32, u32),
        /// Output tokens, low and high.
        output_tokens: (u32, u32),
    },
    /// Sizes taken in order (cycling) from a trace file's requests.
    Trace {
        /// The file.
        path: PathBuf,
        /// `(prompt, output)` of every request in arrival order.
        sizes: Arc<Vec<(u32, u32)>>,
    },
}

impl Shape {
    /// Parses a `--shape` value; trace files are read here.
    pub fn parse(text: &str) -> anyhow::Result<Shape> {
        let fix = "use fixed:PROMPT:OUTPUT (e.g. fixed:512:128), uniform:PLO-PHI:OLO-OHI (e.g. uniform:100-2000:10-300) \
                   or trace:FILE (an Azure 2023 CSV or Mooncake JSON-lines trace)";
        let bad = |why: &str| anyhow::anyhow!("--shape {text:?}: {why}; {fix}");
        let (kind, rest) = text
            .split_once(':')
            .ok_or_else(|| bad("missing the kind"))?;
        match kind {
            "fixed" => {
                let (p, o) = rest
                    .split_once(':')
                    .ok_or_else(|| bad("expected two sizes"))?;
                Ok(Shape::Fixed {
                    prompt_tokens: count(p)
                        .ok_or_else(|| bad("prompt size is not a positive whole number"))?,
                    output_tokens: count(o)
                        .ok_or_else(|| bad("output size is not a positive whole number"))?,
                })
            }
            "uniform" => {
                let (p, o) = rest
                    .split_once(':')
                    .ok_or_else(|| bad("expected two ranges"))?;
                Ok(Shape::Uniform {
                    prompt_tokens: range(p)
                        .ok_or_else(|| bad("prompt range is not LO-HI with 1 <= LO <= HI"))?,
                    output_tokens: range(o)
                        .ok_or_else(|| bad("output range is not LO-HI with 1 <= LO <= HI"))?,
                })
            }
            "trace" => {
                let path = PathBuf::from(rest);
                let trace = read_trace(&path)?;
                let sizes = trace
                    .requests
                    .iter()
                    .map(|r| (r.prompt_tokens.max(1), r.output_tokens.max(1)))
                    .collect();
                Ok(Shape::Trace {
                    path,
                    sizes: Arc::new(sizes),
                })
            }
            _ => Err(bad("unknown kind")),
        }
    }

    /// A short description for reports.
    pub fn describe(&self) -> String {
        match self {
            Shape::Fixed {
                prompt_tokens,
                output_tokens,
            } => format!("fixed {prompt_tokens} prompt / {output_tokens} output tokens"),
            Shape::Uniform {
                prompt_tokens: (pl, ph),
                output_tokens: (ol, oh),
            } => format!("uniform {pl}-{ph} prompt / {ol}-{oh} output tokens"),
            Shape::Trace { path, sizes } => {
                let file = path.file_name().map_or_else(
                    || path.display().to_string(),
                    |f| f.to_string_lossy().into_owned(),
                );
                format!("sizes of the {} requests of {file}, in order", sizes.len())
            }
        }
    }
}

fn count(s: &str) -> Option<u32> {
    s.trim().parse::<u32>().ok().filter(|v| *v > 0)
}

fn range(s: &str) -> Option<(u32, u32)> {
    let (lo, hi) = s.split_once('-')?;
    let (lo, hi) = (count(lo)?, count(hi)?);
    (lo <= hi).then_some((lo, hi))
}

/// How arrivals are spaced within a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Arrivals {
    /// Evenly spaced (a constant arrival rate, like k6's constant-arrival-rate).
    #[default]
    Uniform,
    /// A Poisson process (exponential gaps): bursts like real traffic.
    Poisson,
}

/// Draws request sizes from a shape.
#[derive(Debug, Clone)]
pub struct SizeSampler {
    shape: Shape,
    rng: SplitMix64,
    next: usize,
}

impl SizeSampler {
    /// A sampler with a seed.
    pub fn new(shape: Shape, seed: u64) -> Self {
        Self {
            shape,
            rng: SplitMix64::new(seed),
            next: 0,
        }
    }
    /// The next `(prompt, output)` tokens.
    pub fn sample(&mut self) -> (u32, u32) {
        match &self.shape {
            Shape::Fixed {
                prompt_tokens,
                output_tokens,
            } => (*prompt_tokens, *output_tokens),
            Shape::Uniform {
                prompt_tokens,
                output_tokens,
            } => (
                self.rng.between(prompt_tokens.0, prompt_tokens.1),
                self.rng.between(output_tokens.0, output_tokens.1),
            ),
            Shape::Trace { sizes, .. } => {
                let s = sizes[self.next % sizes.len().max(1)];
                self.next += 1;
                s
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_parse_and_bad_ones_say_the_fix() {
        assert_eq!(
            Shape::parse("fixed:512:128").unwrap(),
            Shape::Fixed {
                prompt_tokens: 512,
                output_tokens: 128
            }
        );
        let Shape::Uniform { prompt_tokens, .. } = Shape::parse("uniform:10-20:1-5").unwrap()
        else {
            panic!("uniform")
        };
        assert_eq!(prompt_tokens, (10, 20));
        for bad in [
            "fixed:0:1",
            "fixed:12",
            "uniform:20-10:1-2",
            "normal:1:2",
            "512",
            "trace:no/such/file.csv",
        ] {
            let e = Shape::parse(bad).unwrap_err().to_string();
            assert!(e.contains(bad.split(':').next().unwrap()), "{bad}: {e}");
        }
        let trace = Shape::parse(concat!(
            "trace:",
            env!("CARGO_MANIFEST_DIR"),
            "/../../data/traces/azure-llm-2023-code.csv"
        ))
        .unwrap();
        assert!(
            trace
                .describe()
                .contains("8819 requests of azure-llm-2023-code.csv")
        );
        let mut t = SizeSampler::new(trace, 1);
        assert_eq!(t.sample(), (4808, 10), "the first row of the trace");
        let mut s = SizeSampler::new(Shape::parse("uniform:10-20:1-5").unwrap(), 7);
        for _ in 0..1000 {
            let (p, o) = s.sample();
            assert!((10..=20).contains(&p) && (1..=5).contains(&o));
        }
    }
}
