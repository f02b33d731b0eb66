//! Fleet simulator: replay request traces through emulated replicas in virtual time under
//! several scaling policies, and report what users pay (GPU-hours) and get (SLO attainment).
//!
//! Owns: the virtual clock, the fleet of engine models, the actuation path (KEDA, the HPA),
//! the peer policies and the report. Does not own: the engine model ([`vllm_emulator`]),
//! signals or policy: ours runs the production code on rendered `/metrics` bodies.
//!
//! Data flow: [`scenario`] (requests) -> [`fleet`] (engines, routing, lifecycles) <->
//! [`controllers`] (ours via signals + policy + [`hpa`]; the guide's chain via [`prometheus`]
//! + [`hpa`]; Knative's KPA, actuating directly; static; oracle) -> [`report`].

pub mod controllers;
pub mod fleet;
pub mod prometheus;
pub mod report;
pub mod scenario;

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;

use crate::plot::{Axis, Chart, Series};
use crate::seconds;
use vllm_emulator::EngineConfig;
use vllm_keda_core::config::ScalerConfig;
use vllm_keda_core::policy::proactive::Persisted;
use vllm_keda_core::policy::proactive::hindsight;

use controllers::{
    Apa, ApaSettings, Kpa, KpaSettings, Oracle, OracleSettings, Ours, PrometheusKeda,
    PrometheusKedaSettings, PrometheusKedaTuned, PrometheusKedaTunedSettings, Restart, Static,
};
use fleet::{Autoscaler, FleetSettings, RunResult, StartupDraws, StartupSpread};
use report::{PolicyReport, SloTargets};
use scenario::Scenario;

/// What `simulate` replays and compares. [`Default`] is the command line's defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct SimulateOptions {
    /// Traces to replay: files (Azure 2023 CSV or Mooncake JSONL), built-in scenarios
    /// (azure-code, azure-conv, mooncake, step), generated scenarios, or `poisson:NAME`.
    pub traces: Vec<String>,
    /// Replay a named set of generated scenarios (`training`, `held-out` or `held-out-2`)
    /// instead of `traces`.
    pub scenario_set: Option<String>,
    /// Multiply the trace's request rate (requests are replicated; a generated scenario's
    /// curve is multiplied).
    pub rate_multiplier: f64,
    /// Divide the trace's timestamps (same requests, faster).
    pub time_compression: f64,
    /// Only the first this many seconds of each trace (after reshaping).
    pub duration_seconds: Option<f64>,
    /// Policies to compare, each as [`PolicySpec::parse`] reads it.
    pub policies: Vec<String>,
    /// Scaler metadata for `ours` (`key=value`, as in a ScaledObject trigger).
    pub metadata: Vec<String>,
    /// Lowest replica count for every policy.
    pub min_replicas: u32,
    /// Highest replica count for every policy.
    pub max_replicas: u32,
    /// Seconds from asking for a replica to it serving: `300`, a uniform range `120..600`,
    /// or `lognormal:MEDIAN:SIGMA`.
    pub startup_delay: String,
    /// Which start-up draw a replica asked for gets: `order` (the k-th asked, the k-th draw;
    /// the evaluation's protocol) or `slot` (the fleet position's own draws).
    pub startup_draws: String,
    /// A client gives up after this many seconds (the request is a miss and is aborted).
    pub client_timeout_seconds: Option<f64>,
    /// The engine profile every replica runs ([`vllm_emulator::EngineConfig::profile`]).
    pub engine: String,
    /// Prometheus scrape interval of the prometheus-keda chains.
    pub prometheus_scrape_seconds: f64,
    /// SLO: time to first token, seconds.
    pub ttft_slo_seconds: f64,
    /// SLO: mean time per output token, seconds.
    pub tpot_slo_seconds: f64,
    /// End-to-end target reported beside the SLO, seconds.
    pub e2e_slo_seconds: f64,
    /// The SLO attainment `static:best` and `clairvoyant` aim at (0..1).
    pub slo_target: f64,
    /// Seed of the arrival process (generated and `poisson:` scenarios), the jitter of
    /// replicated requests, and the start-up draws.
    pub seed: u64,
    /// Several seeds (each a run of every policy); the tables show mean and spread. Empty:
    /// `seed` alone.
    pub seeds: Vec<u64>,
    /// Also run each policy family's knob sweep and draw the SLO-attainment / GPU-hours
    /// Pareto plot per scenario (needs `out`).
    pub sweep: bool,
    /// Print one JSON list (one object per policy, scenario and seed) instead of Markdown.
    pub json: bool,
    /// Write report.md, report.json and the SVG plots into this directory.
    pub out: Option<PathBuf>,
    /// Warm start: each `ours` run first runs once on the same scenario drawn with the seed
    /// plus [`WARM_SEED_OFFSET`] (a day before, with other arrivals and start-ups) and starts
    /// from what it learned there, as a scaler pod starts from `--learned-state-configmap`.
    pub warm: bool,
    /// With `warm`: the time between the day before's end and the run's start, seconds; what
    /// was learned is that much older (its hindsight floor and demand history age by it).
    /// Zero (the default) joins the two days.
    pub warm_gap_seconds: f64,
    /// With `warm`, in place of `warm_gap_seconds`: the day before began this many seconds
    /// before the run (86,400 puts it at the same hours a calendar day earlier). What was
    /// learned ages by this less the day before's own length (until its work was done), so a
    /// scenario of a few hours is not read as a day that ended as the run began.
    pub warm_day_seconds: Option<f64>,
    /// Every `ours` run's scaler pod restarts once, this many seconds into the run.
    pub restart_at_seconds: Option<f64>,
    /// With `restart_at_seconds`: the new pod starts from nothing, as without
    /// `--learned-state-configmap`, instead of from what the old one learned.
    pub restart_forgets: bool,
    /// Judge every autoscaled row against the static fleets that could dominate it (each is
    /// simulated for the check). `false` runs the policies alone, as when timing one, and
    /// marks every row as not judged.
    pub judge_statics: bool,
}

/// What a warm start adds to a seed to draw the day it learns from.
pub const WARM_SEED_OFFSET: u64 = 1000;

impl Default for SimulateOptions {
    fn default() -> Self {
        Self {
            traces: vec!["azure-conv".to_owned()],
            scenario_set: None,
            rate_multiplier: 1.0,
            time_compression: 1.0,
            duration_seconds: None,
            policies: ["ours", "prometheus-keda", "static:4", "clairvoyant"]
                .map(str::to_owned)
                .to_vec(),
            metadata: Vec::new(),
            min_replicas: 1,
            max_replicas: 20,
            startup_delay: "300".to_owned(),
            startup_draws: "order".to_owned(),
            client_timeout_seconds: None,
            engine: vllm_emulator::DEFAULT_PROFILE.to_owned(),
            prometheus_scrape_seconds: 15.0,
            ttft_slo_seconds: 2.0,
            tpot_slo_seconds: 0.1,
            e2e_slo_seconds: 5.0,
            slo_target: 0.99,
            seed: 1,
            seeds: Vec::new(),
            sweep: false,
            json: false,
            out: None,
            warm: false,
            warm_gap_seconds: 0.0,
            warm_day_seconds: None,
            restart_at_seconds: None,
            restart_forgets: false,
            judge_statics: true,
        }
    }
}

/// Reads `--startup-draws`: `order` or `slot`.
pub fn parse_startup_draws(text: &str) -> anyhow::Result<StartupDraws> {
    StartupDraws::ALL
        .iter()
        .find(|(name, _)| *name == text)
        .map(|(_, d)| *d)
        .ok_or_else(|| anyhow::anyhow!("--startup-draws {text:?}: expected order or slot"))
}

/// Reads `--startup-delay-seconds`: `S`, `LOW..HIGH` (uniform) or `lognormal:MEDIAN:SIGMA`.
pub fn parse_startup(text: &str) -> anyhow::Result<(Duration, StartupSpread)> {
    let text = text.trim();
    let secs = |v: &str| -> anyhow::Result<f64> {
        v.trim()
            .parse::<f64>()
            .ok()
            .filter(|s| s.is_finite() && (0.0..=86_400.0).contains(s))
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "--startup-delay-seconds {text:?}: expected seconds from 0 to 86400 (S), \
                     a uniform range LOW..HIGH, or lognormal:MEDIAN:SIGMA"
                )
            })
    };
    if let Some(rest) = text.strip_prefix("lognormal:") {
        let (median, sigma) = rest.split_once(':').ok_or_else(|| {
            anyhow::anyhow!("--startup-delay-seconds {text:?}: expected lognormal:MEDIAN:SIGMA")
        })?;
        let median = secs(median)?;
        let sigma: f64 = sigma
            .trim()
            .parse()
            .ok()
            .filter(|s: &f64| s.is_finite() && (0.0..=3.0).contains(s))
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "--startup-delay-seconds {text:?}: SIGMA must be a number from 0 to 3"
                )
            })?;
        return Ok((
            Duration::from_secs_f64(median),
            StartupSpread::LogNormal { median, sigma },
        ));
    }
    if let Some((low, high)) = text.split_once("..") {
        let (low, high) = (secs(low)?, secs(high)?);
        if low > high {
            anyhow::bail!("--startup-delay-seconds {text:?}: LOW must not exceed HIGH");
        }
        return Ok((
            Duration::from_secs_f64((low + high) / 2.0),
            StartupSpread::Uniform { low, high },
        ));
    }
    Ok((Duration::from_secs_f64(secs(text)?), StartupSpread::Fixed))
}

/// One policy to run.
#[derive(Debug, Clone, PartialEq)]
pub enum PolicySpec {
    /// Our scaler with the simulation's metadata.
    Ours,
    /// Our scaler with these metadata keys set over the simulation's (`ours:KEY=VALUE:...`).
    OursWith(Vec<(String, String)>),
    /// The source guide's Prometheus + KEDA setup.
    PrometheusKeda,
    /// The same chain as an expert would configure it.
    PrometheusKedaTuned(PrometheusKedaTunedSettings),
    /// The Knative Pod Autoscaler with this concurrency target per replica (before Knative's
    /// 70 % target utilisation).
    Kpa(f64),
    /// The Knative Pod Autoscaler with a target, a stable window and a scale-down delay.
    KpaWith(KpaSettings),
    /// AIBrix's APA.
    Apa(ApaSettings),
    /// A fixed fleet of N.
    Static(u32),
    /// The smallest static fleet meeting the SLO target in hindsight (else the best one).
    StaticBest,
    /// The future-knowing reference planner (`oracle` is an alias).
    Clairvoyant,
    /// The clairvoyant plan for a planner that learns the trace only once it is under way
    /// (`clairvoyant:from=burst|S[:utilisation=U][:lookahead=S]`): a reference for what knowing
    /// the trace after its first burst is worth in GPU-hours, not a policy one can run, and no
    /// bound on attainment (a policy that asks more at the burst serves more of it).
    ClairvoyantFrom(ClairvoyantFrom),
}

/// When [`PolicySpec::ClairvoyantFrom`] learns the trace, and the share of a replica's
/// saturation throughput its plan uses.
#[derive(Debug, Clone, PartialEq)]
pub struct ClairvoyantFrom {
    /// `None`: at the start of the first planning bucket whose work needs more replicas than
    /// the opening fleet at the full plan's utilisation, or from the start if none does
    /// (`from=burst`); else at this many seconds.
    pub from: Option<Duration>,
    /// As the clairvoyant planner's, without its search: the plan at this one utilisation.
    pub utilisation: f64,
    /// How far ahead the plan asks, the most any bucket within it needs: `None`, the start-up
    /// time the clairvoyant planner plans with; `Some(0)`, only the bucket under way, a
    /// perfectly sized reaction that knows nothing of the minutes to come (`lookahead=S`).
    pub lookahead: Option<Duration>,
}

/// A policy's positional knob (if any) and its `k=v` knobs.
type Knobs<'a> = (Option<&'a str>, Vec<(&'a str, &'a str)>);

/// Splits `NAME:A:k=v:...` into the positional value (if any) and the `k=v` pairs.
fn knobs<'a>(text: &'a str, rest: &'a str) -> anyhow::Result<Knobs<'a>> {
    let mut positional = None;
    let mut pairs = Vec::new();
    for (i, part) in rest.split(':').enumerate() {
        if let Some((k, v)) = part.split_once('=') {
            pairs.push((k.trim(), v.trim()));
        } else if i == 0 && !part.trim().is_empty() {
            positional = Some(part.trim());
        } else {
            anyhow::bail!(
                "--policies {text:?}: expected KEY=VALUE after the first ':' field, got {part:?}"
            );
        }
    }
    Ok((positional, pairs))
}

fn positive_number(text: &str, what: &str, v: &str) -> anyhow::Result<f64> {
    v.parse::<f64>()
        .ok()
        .filter(|t| t.is_finite() && *t > 0.0)
        .ok_or_else(|| {
            anyhow::anyhow!("--policies {text:?}: {what} must be a positive number, got {v:?}")
        })
}

fn non_negative_number(text: &str, what: &str, v: &str) -> anyhow::Result<f64> {
    v.parse::<f64>()
        .ok()
        .filter(|t| t.is_finite() && *t >= 0.0)
        .ok_or_else(|| {
            anyhow::anyhow!(
                "--policies {text:?}: {what} must be zero or a positive number, got {v:?}"
            )
        })
}

/// A policy knob in seconds (see [`crate::seconds`]), or an error naming the policy and knob.
fn knob_seconds(text: &str, what: &str, v: &str, zero: bool) -> anyhow::Result<Duration> {
    v.parse::<f64>()
        .ok()
        .filter(|t| seconds::fits(*t, zero))
        .map(Duration::from_secs_f64)
        .ok_or_else(|| {
            anyhow::anyhow!(
                "--policies {text:?}: {what} must be a number of seconds {}, got {v:?}",
                seconds::range(zero)
            )
        })
}

fn fmt_num(v: f64) -> String {
    format!("{v}")
}

const POLICY_HELP: &str = "ours, ours:KEY=VALUE[:...], prometheus-keda, prometheus-keda-tuned[:IN_FLIGHT][:ttft=S][:itl=S], kpa, kpa:TARGET[:stable=S][:delay=S], apa[:TARGET][:up=F][:down=F][:uprate=F][:downrate=F], static:N, static:best, clairvoyant (alias oracle), clairvoyant:from=burst|S[:utilisation=U][:lookahead=S]";

impl PolicySpec {
    /// Parses a policy: see [`POLICY_HELP`] for the forms.
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let t = text.trim();
        match t {
            "ours" => return Ok(Self::Ours),
            "prometheus-keda" => return Ok(Self::PrometheusKeda),
            "oracle" | "clairvoyant" => return Ok(Self::Clairvoyant),
            "static:best" => return Ok(Self::StaticBest),
            "kpa" => return Ok(Self::Kpa(controllers::KPA_DEFAULT_TARGET)),
            "prometheus-keda-tuned" => {
                return Ok(Self::PrometheusKedaTuned(
                    PrometheusKedaTunedSettings::default(),
                ));
            }
            "apa" => return Ok(Self::Apa(ApaSettings::default())),
            _ => {}
        }
        let (name, rest) = t.split_once(':').unwrap_or((t, ""));
        if t.contains(':') && rest.trim().is_empty() {
            anyhow::bail!("--policies {text:?}: nothing after ':'; expected {POLICY_HELP}");
        }
        match name {
            "ours" => {
                let (pos, pairs) = knobs(text, rest)?;
                if pos.is_some() || pairs.is_empty() {
                    anyhow::bail!("--policies {text:?}: expected ours:KEY=VALUE[:KEY=VALUE...]");
                }
                Ok(Self::OursWith(
                    pairs
                        .into_iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ))
            }
            "kpa" => {
                let (pos, pairs) = knobs(text, rest)?;
                let target = match pos {
                    Some(v) => positive_number(text, "TARGET (in-flight requests per replica)", v)?,
                    None => controllers::KPA_DEFAULT_TARGET,
                };
                if pairs.is_empty() {
                    return Ok(Self::Kpa(target));
                }
                let mut settings = KpaSettings::with_target(target);
                for (k, v) in pairs {
                    match k {
                        "stable" => {
                            let s = knob_seconds(text, "stable", v, false)?;
                            settings.stable_window = s;
                            settings.panic_window = s.mul_f64(0.1);
                        }
                        "delay" => {
                            settings.scale_down_delay = knob_seconds(text, "delay", v, true)?;
                        }
                        other => anyhow::bail!(
                            "--policies {text:?}: unknown kpa knob {other:?}; expected stable or delay"
                        ),
                    }
                }
                Ok(Self::KpaWith(settings))
            }
            "apa" => {
                let (pos, pairs) = knobs(text, rest)?;
                let mut settings = ApaSettings::default();
                if let Some(v) = pos {
                    settings.target =
                        positive_number(text, "TARGET (in-flight requests per pod)", v)?;
                }
                for (k, v) in pairs {
                    match k {
                        "up" => settings.up_tolerance = non_negative_number(text, "up", v)?,
                        "down" => {
                            settings.down_tolerance = non_negative_number(text, "down", v)?.min(1.0)
                        }
                        "uprate" => {
                            settings.max_scale_up_rate =
                                positive_number(text, "uprate", v)?.max(1.0)
                        }
                        "downrate" => {
                            settings.max_scale_down_rate =
                                positive_number(text, "downrate", v)?.max(1.0)
                        }
                        other => anyhow::bail!(
                            "--policies {text:?}: unknown apa knob {other:?}; expected up, down, uprate or downrate"
                        ),
                    }
                }
                Ok(Self::Apa(settings))
            }
            "prometheus-keda-tuned" => {
                let (pos, pairs) = knobs(text, rest)?;
                let mut settings = PrometheusKedaTunedSettings::default();
                if let Some(v) = pos {
                    settings.in_flight_per_replica =
                        positive_number(text, "IN_FLIGHT (running + waiting per replica)", v)?;
                }
                for (k, v) in pairs {
                    match k {
                        "ttft" => {
                            settings.ttft_threshold = positive_number(text, "ttft (seconds)", v)?
                        }
                        "itl" => {
                            settings.itl_threshold = positive_number(text, "itl (seconds)", v)?
                        }
                        other => anyhow::bail!(
                            "--policies {text:?}: unknown prometheus-keda-tuned knob {other:?}; expected ttft or itl"
                        ),
                    }
                }
                Ok(Self::PrometheusKedaTuned(settings))
            }
            "clairvoyant" | "oracle" => {
                let (pos, pairs) = knobs(text, rest)?;
                if let Some(p) = pos {
                    anyhow::bail!(
                        "--policies {text:?}: unexpected {p:?}; expected clairvoyant:from=burst|S[:utilisation=U][:lookahead=S]"
                    );
                }
                let mut from = None;
                let mut utilisation = OracleSettings::default().utilisation;
                let mut lookahead = None;
                for (k, v) in pairs {
                    match k {
                        "from" if v == "burst" => from = Some(None),
                        "from" => {
                            from = Some(Some(knob_seconds(text, "from (or burst)", v, true)?))
                        }
                        "utilisation" => {
                            utilisation = positive_number(text, "utilisation", v)?;
                            if utilisation > 2.0 {
                                anyhow::bail!(
                                    "--policies {text:?}: utilisation must be above 0 and at most 2, got {v:?}"
                                );
                            }
                        }
                        "lookahead" => lookahead = Some(knob_seconds(text, "lookahead", v, true)?),
                        other => anyhow::bail!(
                            "--policies {text:?}: unknown clairvoyant knob {other:?}; expected from, utilisation or lookahead"
                        ),
                    }
                }
                let Some(from) = from else {
                    anyhow::bail!(
                        "--policies {text:?}: expected from=burst or from=SECONDS (the full plan is plain clairvoyant)"
                    );
                };
                Ok(Self::ClairvoyantFrom(ClairvoyantFrom {
                    from,
                    utilisation,
                    lookahead,
                }))
            }
            "static" => {
                let n: u32 = rest.parse().ok().filter(|n| *n > 0).ok_or_else(|| {
                    anyhow::anyhow!(
                        "--policies {text:?}: expected static:N with N a positive whole number, or static:best"
                    )
                })?;
                Ok(Self::Static(n))
            }
            _ => anyhow::bail!("--policies {text:?}: unknown policy; expected {POLICY_HELP}"),
        }
    }

    /// The name used in reports (parses back to the same policy).
    pub fn name(&self) -> String {
        match self {
            Self::Ours => "ours".into(),
            Self::OursWith(pairs) => {
                let mut out = "ours".to_string();
                for (k, v) in pairs {
                    out.push_str(&format!(":{k}={v}"));
                }
                out
            }
            Self::PrometheusKeda => "prometheus-keda".into(),
            Self::PrometheusKedaTuned(s) => {
                let d = PrometheusKedaTunedSettings::default();
                let mut out = "prometheus-keda-tuned".to_string();
                if s.in_flight_per_replica != d.in_flight_per_replica {
                    out.push_str(&format!(":{}", fmt_num(s.in_flight_per_replica)));
                }
                if s.ttft_threshold != d.ttft_threshold {
                    out.push_str(&format!(":ttft={}", fmt_num(s.ttft_threshold)));
                }
                if s.itl_threshold != d.itl_threshold {
                    out.push_str(&format!(":itl={}", fmt_num(s.itl_threshold)));
                }
                out
            }
            Self::Kpa(t) if *t == controllers::KPA_DEFAULT_TARGET => "kpa".into(),
            Self::Kpa(t) => format!("kpa:{t}"),
            Self::KpaWith(s) => format!(
                "kpa:{}:stable={}:delay={}",
                fmt_num(s.target),
                fmt_num(s.stable_window.as_secs_f64()),
                fmt_num(s.scale_down_delay.as_secs_f64())
            ),
            Self::Apa(s) => {
                let d = ApaSettings::default();
                let mut out = "apa".to_string();
                if s.target != d.target {
                    out.push_str(&format!(":{}", fmt_num(s.target)));
                }
                for (k, v, dv) in [
                    ("up", s.up_tolerance, d.up_tolerance),
                    ("down", s.down_tolerance, d.down_tolerance),
                    ("uprate", s.max_scale_up_rate, d.max_scale_up_rate),
                    ("downrate", s.max_scale_down_rate, d.max_scale_down_rate),
                ] {
                    if v != dv {
                        out.push_str(&format!(":{k}={}", fmt_num(v)));
                    }
                }
                out
            }
            Self::Static(n) => format!("static:{n}"),
            Self::StaticBest => "static:best".into(),
            Self::Clairvoyant => "clairvoyant".into(),
            Self::ClairvoyantFrom(c) => {
                let mut out = match c.from {
                    None => "clairvoyant:from=burst".to_string(),
                    Some(d) => format!("clairvoyant:from={}", fmt_num(d.as_secs_f64())),
                };
                if c.utilisation != OracleSettings::default().utilisation {
                    out.push_str(&format!(":utilisation={}", fmt_num(c.utilisation)));
                }
                if let Some(d) = c.lookahead {
                    out.push_str(&format!(":lookahead={}", fmt_num(d.as_secs_f64())));
                }
                out
            }
        }
    }

    /// Whether a run of this policy is judged against the static fleets: every autoscaled
    /// policy and the `clairvoyant:from` bound; not the static fleets and the clairvoyant plan,
    /// which are references.
    pub fn judged(&self) -> bool {
        !matches!(self, Self::Static(_) | Self::StaticBest | Self::Clairvoyant)
    }

    /// The policy family, for grouping sweep points into one Pareto curve.
    pub fn family(&self) -> &'static str {
        match self {
            Self::Ours | Self::OursWith(_) => "ours",
            Self::PrometheusKeda => "prometheus-keda",
            Self::PrometheusKedaTuned(_) => "prometheus-keda-tuned",
            Self::Kpa(_) => "kpa",
            Self::KpaWith(_) => "kpa-delayed",
            Self::Apa(_) => "apa",
            Self::Static(_) | Self::StaticBest => "static",
            Self::Clairvoyant => "clairvoyant",
            // A plan that asks nothing ahead is a reaction: its own curve.
            Self::ClairvoyantFrom(c) if c.lookahead.is_some() => "clairvoyant-from-lookahead",
            Self::ClairvoyantFrom(_) => "clairvoyant-from",
        }
    }
}

/// Static runs already made, by scenario identity and fleet size (`static:best`, the
/// clairvoyant planner and sweeps share them). The stored runs keep their series and events,
/// not the per-request outcomes.
#[derive(Debug, Clone, Default)]
pub struct StaticRuns(RefCell<HashMap<StaticKey, (RunResult, PolicyReport)>>);

/// A static run's identity: scenario name, request count, last arrival (ns), fleet size.
type StaticKey = (String, usize, u128, u32);

/// Everything a simulation needs besides the scenario.
#[derive(Debug, Clone)]
pub struct Simulation {
    /// The fleet's behaviour.
    pub fleet: FleetSettings,
    /// Our scaler's validated configuration.
    pub ours: ScalerConfig,
    /// The metadata `ours` was configured from (`ours:KEY=VALUE` policies override it).
    pub ours_metadata: Vec<(String, String)>,
    /// The guide's chain settings.
    pub prometheus_keda: PrometheusKedaSettings,
    /// The oracle's planning settings.
    pub oracle: OracleSettings,
    /// Replica bounds for every policy.
    pub min_replicas: u32,
    /// Replica bounds for every policy.
    pub max_replicas: u32,
    /// The SLO.
    pub slo: SloTargets,
    /// The SLO attainment `static:best` and `clairvoyant` aim at.
    pub slo_target: f64,
    /// The seed the scenario was drawn with, for reports.
    pub seed: u64,
    /// Static runs made so far.
    pub static_runs: StaticRuns,
    /// A scaler pod restart in every `ours` run.
    pub restart: Option<Restart>,
    /// Whether each autoscaled row is judged against the static fleets that could dominate it.
    pub judge_statics: bool,
}

impl Default for Simulation {
    fn default() -> Self {
        Self {
            fleet: FleetSettings::default(),
            ours: Self::ours_config(&[], 1, 20).expect("the default metadata is valid"),
            ours_metadata: Vec::new(),
            prometheus_keda: PrometheusKedaSettings::default(),
            oracle: OracleSettings::default(),
            min_replicas: 1,
            max_replicas: 20,
            slo: SloTargets::default(),
            slo_target: 0.99,
            seed: 1,
            static_runs: StaticRuns::default(),
            restart: None,
            judge_statics: true,
        }
    }
}

impl Simulation {
    /// Our scaler's configuration from metadata pairs, with the simulator's replica bounds
    /// unless the metadata sets them.
    pub fn ours_config(
        metadata: &[(String, String)],
        min_replicas: u32,
        max_replicas: u32,
    ) -> anyhow::Result<ScalerConfig> {
        let mut map: HashMap<String, String> = metadata.iter().cloned().collect();
        map.entry("endpoints".into())
            .or_insert_with(|| "127.0.0.1:8000".into());
        map.entry("minReplicas".into())
            .or_insert_with(|| min_replicas.to_string());
        map.entry("maxReplicas".into())
            .or_insert_with(|| max_replicas.to_string());
        ScalerConfig::from_metadata(&map).context("--metadata for ours")
    }

    /// The fluid lower bound on GPU-hours of a scenario (see
    /// [`controllers::fluid_lower_bound_hours`]).
    pub fn lower_bound_hours(&self, scenario: &Scenario) -> f64 {
        controllers::fluid_lower_bound_hours(&scenario.requests, &self.fleet.engine)
    }

    fn oracle_for(&self, scenario: &Scenario, settings: &OracleSettings) -> Oracle {
        self.oracle_looking(scenario, settings, self.planning_delay())
    }

    /// The start-up time the clairvoyant planner asks ahead by.
    fn planning_delay(&self) -> Duration {
        self.fleet
            .startup_spread
            .planning_delay(self.fleet.startup_delay)
    }

    fn oracle_looking(
        &self,
        scenario: &Scenario,
        settings: &OracleSettings,
        lookahead: Duration,
    ) -> Oracle {
        Oracle::new(
            &scenario.requests,
            &self.fleet.engine,
            settings,
            lookahead,
            self.min_replicas,
            self.max_replicas,
        )
    }

    fn summarise(&self, name: &str, scenario: &Scenario, result: &RunResult) -> PolicyReport {
        let mut report = report::summarise(
            name,
            &result.outcomes,
            &self.slo,
            result.replica_seconds,
            result.events.clone(),
            &scenario.load_steps,
            result.end,
        );
        report.scenario = scenario.name.clone();
        report.seed = self.seed;
        report.gpu_hours_lower_bound = self.lower_bound_hours(scenario);
        report.gpu_hours_withdrawn = result.withdrawn_seconds / 3600.0;
        report.hindsight.clone_from(&result.hindsight);
        report
    }

    /// Runs one policy on one scenario. Every autoscaled policy starts from the fleet the
    /// scenario's opening minutes need (as the clairvoyant planner plans it), so none is judged
    /// on a cold start the others are spared.
    pub fn run_policy(
        &self,
        scenario: &Scenario,
        policy: &PolicySpec,
    ) -> anyhow::Result<(RunResult, PolicyReport)> {
        self.run_policy_from(scenario, policy, None)
    }

    /// As [`Self::run_policy`], with `ours` starting from what an earlier run learned
    /// (`inherited`, from [`RunResult::learned_state`]) as a scaler pod starts from its
    /// learned-state ConfigMap; the peers start as they always do.
    pub fn run_policy_from(
        &self,
        scenario: &Scenario,
        policy: &PolicySpec,
        inherited: Option<&Persisted>,
    ) -> anyhow::Result<(RunResult, PolicyReport)> {
        let (initial, mut controller) = match policy {
            PolicySpec::Static(n) => return Ok(self.run_static(scenario, *n, true)),
            PolicySpec::StaticBest => return Ok(self.run_static_best(scenario)),
            PolicySpec::Clairvoyant => return Ok(self.run_clairvoyant(scenario)),
            PolicySpec::ClairvoyantFrom(c) => {
                // Judged as the autoscaled rows are: whether a static fleet dominates even a
                // plan that knows the trace from its first burst on is the question it answers.
                let (result, mut report) = self.run_clairvoyant_from(scenario, c);
                if self.judge_statics {
                    report.dominated_by_static = self.dominating_statics(scenario, &report);
                } else {
                    report.statics_not_judged = true;
                }
                return Ok((result, report));
            }
            _ => self.autoscaler(scenario, policy, inherited)?,
        };
        let result = fleet::run(
            &scenario.requests,
            &self.fleet,
            initial,
            controller.as_mut(),
        );
        let mut report = self.summarise(&policy.name(), scenario, &result);
        // Every autoscaled row, ours and the peers, is judged by the same rule, unless the
        // run asked for the policies alone; then the row says it was not judged.
        if self.judge_statics {
            report.dominated_by_static = self.dominating_statics(scenario, &report);
        } else {
            report.statics_not_judged = true;
        }
        Ok((result, report))
    }

    /// What `policy` (ours) has learned by the end of `scenario`, for a warm start: the run
    /// alone, neither summarised nor judged against static fleets. `None` for the peers and
    /// under the guide's policy.
    pub fn learned_on(
        &self,
        scenario: &Scenario,
        policy: &PolicySpec,
    ) -> anyhow::Result<Option<Persisted>> {
        Ok(self.learned_by_end(scenario, policy)?.map(|(l, _)| l))
    }

    /// As [`Self::learned_on`], with the time the record was taken: when the run's work was
    /// done.
    pub fn learned_by_end(
        &self,
        scenario: &Scenario,
        policy: &PolicySpec,
    ) -> anyhow::Result<Option<(Persisted, Duration)>> {
        if !matches!(policy, PolicySpec::Ours | PolicySpec::OursWith(_)) {
            return Ok(None);
        }
        let (initial, mut controller) = self.autoscaler(scenario, policy, None)?;
        let result = fleet::run(
            &scenario.requests,
            &self.fleet,
            initial,
            controller.as_mut(),
        );
        Ok(result.learned_state.map(|l| (l, result.end)))
    }

    /// An autoscaled policy's controller and the fleet it opens with: the fleet the
    /// scenario's opening minutes need, as the clairvoyant planner plans it; `ours` starts
    /// from `inherited` when given. Static fleets and the clairvoyant plan are not
    /// controllers: an error.
    fn autoscaler(
        &self,
        scenario: &Scenario,
        policy: &PolicySpec,
        inherited: Option<&Persisted>,
    ) -> anyhow::Result<(u32, Box<dyn Autoscaler>)> {
        let opening = self.oracle_for(scenario, &self.oracle).initial();
        Ok(match policy {
            PolicySpec::Ours | PolicySpec::OursWith(_) => {
                let config = match policy {
                    PolicySpec::OursWith(pairs) => {
                        let mut metadata = self.ours_metadata.clone();
                        metadata.extend(pairs.iter().cloned());
                        Self::ours_config(&metadata, self.min_replicas, self.max_replicas)
                            .with_context(|| format!("--policies {}", policy.name()))?
                    }
                    _ => self.ours.clone(),
                };
                let initial = opening.clamp(config.policy.min_replicas, config.policy.max_replicas);
                let mut ours = Ours::new(&config, initial).restarting(self.restart);
                if let Some(learned) = inherited {
                    ours.inherit(learned);
                }
                (initial, Box::new(ours))
            }
            PolicySpec::PrometheusKeda => (
                opening,
                Box::new(PrometheusKeda::new(
                    self.prometheus_keda.clone(),
                    self.min_replicas,
                    self.max_replicas,
                    opening,
                )),
            ),
            PolicySpec::PrometheusKedaTuned(settings) => (
                opening,
                Box::new(PrometheusKedaTuned::new(
                    PrometheusKedaTunedSettings {
                        scrape_interval: self.prometheus_keda.scrape_interval,
                        ..settings.clone()
                    },
                    self.min_replicas,
                    self.max_replicas,
                    opening,
                )),
            ),
            PolicySpec::Kpa(target) => (
                opening,
                Box::new(Kpa::new(
                    KpaSettings::with_target(*target),
                    self.min_replicas,
                    self.max_replicas,
                    opening,
                )),
            ),
            PolicySpec::KpaWith(settings) => (
                opening,
                Box::new(Kpa::new(
                    settings.clone(),
                    self.min_replicas,
                    self.max_replicas,
                    opening,
                )),
            ),
            PolicySpec::Apa(settings) => (
                opening,
                Box::new(Apa::new(
                    settings.clone(),
                    self.min_replicas,
                    self.max_replicas,
                )),
            ),
            PolicySpec::Static(_)
            | PolicySpec::StaticBest
            | PolicySpec::Clairvoyant
            | PolicySpec::ClairvoyantFrom(_) => {
                anyhow::bail!("{} is not an autoscaler", policy.name())
            }
        })
    }

    /// Every static fleet that dominates `run` by the rule (the policy's own hindsight
    /// judges by the same [`hindsight::beats`]: at least 1 point more SLO attainment with at
    /// most 97 % of its GPU-hours), smallest first: fleets from the lower bound up, until one
    /// spends more than that share (a static fleet's GPU-hours grow with its size). Static runs
    /// are shared with `static:best` and the clairvoyant planner.
    fn dominating_statics(
        &self,
        scenario: &Scenario,
        run: &PolicyReport,
    ) -> Vec<report::DominatingFleet> {
        let mut found = Vec::new();
        for n in self.min_replicas.max(1)..=self.max_replicas {
            let (_, fleet) = self.run_static(scenario, n, false);
            if fleet.gpu_hours > hindsight::beaten_share() * run.gpu_hours {
                break;
            }
            if hindsight::beats(
                fleet.slo_attainment * 100.0,
                fleet.gpu_hours,
                run.slo_attainment * 100.0,
                run.gpu_hours,
            ) {
                found.push(report::DominatingFleet {
                    replicas: n,
                    slo_attainment: fleet.slo_attainment,
                    gpu_hours: fleet.gpu_hours,
                });
            }
        }
        found
    }

    fn scenario_key(scenario: &Scenario, n: u32) -> StaticKey {
        (
            scenario.name.clone(),
            scenario.requests.len(),
            scenario.requests.last().map_or(0, |r| r.arrival.as_nanos()),
            n,
        )
    }

    /// `static:N`, from the cache when it ran before (then without per-request outcomes unless
    /// `outcomes` asks to run it again).
    fn run_static(&self, scenario: &Scenario, n: u32, outcomes: bool) -> (RunResult, PolicyReport) {
        let key = Self::scenario_key(scenario, n);
        if !outcomes {
            if let Some(hit) = self.static_runs.0.borrow().get(&key) {
                return hit.clone();
            }
        }
        let result = fleet::run(&scenario.requests, &self.fleet, n, &mut Static);
        let mut report = self.summarise(&format!("static:{n}"), scenario, &result);
        report.static_replicas = Some(n);
        let kept = RunResult {
            outcomes: Vec::new(),
            ..result.clone()
        };
        self.static_runs
            .0
            .borrow_mut()
            .insert(key, (kept, report.clone()));
        (result, report)
    }

    /// `static:best`: the smallest N in 1..=max whose static fleet meets the SLO target in
    /// hindsight, by bisection (attainment grows with N); if even `max` misses it, `max` (the
    /// best attainment). The report is named `static:best` and gives N.
    fn run_static_best(&self, scenario: &Scenario) -> (RunResult, PolicyReport) {
        let meets =
            |n: u32| self.run_static(scenario, n, false).1.slo_attainment >= self.slo_target;
        let (mut lo, mut hi) = (self.min_replicas.max(1), self.max_replicas);
        let chosen = if !meets(hi) {
            hi
        } else {
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if meets(mid) {
                    hi = mid;
                } else {
                    lo = mid + 1;
                }
            }
            hi
        };
        let (result, mut report) = self.run_static(scenario, chosen, false);
        report.policy = "static:best".into();
        (result, report)
    }

    /// The clairvoyant planner: knows every arrival and the start-up delay. It tries capacity
    /// plans at decreasing planned utilisation until one meets the SLO target (the engine
    /// model's closed-form capacity is optimistic for bursty, prefill-heavy mixes, so each plan
    /// is verified by running it), then also every static fleet that could cost no more than
    /// that plan. Of all it tried it keeps the cheapest plan that meets the target, else the
    /// one with the best attainment (fewer GPU-hours on a tie), so no static fleet reaches a
    /// higher attainment with no more GPU-hours. A reference, not a policy one can run.
    fn run_clairvoyant(&self, scenario: &Scenario) -> (RunResult, PolicyReport) {
        let mut tried: Vec<(RunResult, PolicyReport)> = Vec::new();
        for utilisation in [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.25, 0.2, 0.15, 0.1] {
            let settings = OracleSettings {
                utilisation,
                ..self.oracle.clone()
            };
            let mut oracle = self.oracle_for(scenario, &settings);
            let initial = oracle.initial();
            let result = fleet::run(&scenario.requests, &self.fleet, initial, &mut oracle);
            let report = self.summarise("clairvoyant", scenario, &result);
            let met = report.slo_attainment >= self.slo_target;
            tried.push((result, report));
            if met {
                break;
            }
        }
        let pick = |tried: &[(RunResult, PolicyReport)]| -> usize {
            let better = |a: &PolicyReport, b: &PolicyReport| {
                let (am, bm) = (
                    a.slo_attainment >= self.slo_target,
                    b.slo_attainment >= self.slo_target,
                );
                match (am, bm) {
                    (true, false) => true,
                    (false, true) => false,
                    (true, true) => {
                        a.gpu_hours < b.gpu_hours
                            || (a.gpu_hours == b.gpu_hours && a.slo_attainment > b.slo_attainment)
                    }
                    (false, false) => {
                        a.slo_attainment > b.slo_attainment
                            || (a.slo_attainment == b.slo_attainment && a.gpu_hours < b.gpu_hours)
                    }
                }
            };
            let mut best = 0;
            for i in 1..tried.len() {
                if better(&tried[i].1, &tried[best].1) {
                    best = i;
                }
            }
            best
        };
        let planned = pick(&tried);
        let budget = tried[planned].1.gpu_hours;
        // A static fleet of N bills at least N x the last arrival: only those within the
        // budget can match the plan at no more GPU-hours.
        let span_hours = scenario
            .requests
            .last()
            .map_or(0.0, |r| r.arrival.as_secs_f64() / 3600.0);
        let most = if span_hours > 0.0 {
            ((budget / span_hours).floor() as u32).min(self.max_replicas)
        } else {
            self.max_replicas
        };
        for n in self.min_replicas.max(1)..=most {
            let (result, mut report) = self.run_static(scenario, n, false);
            report.policy = "clairvoyant".into();
            tried.push((result, report));
        }
        let best = pick(&tried);
        tried.swap_remove(best)
    }

    /// The clairvoyant plan at one utilisation for a planner that learns the trace at
    /// `spec.from`: before then it holds the fleet every autoscaled policy opens with, as a
    /// policy that has seen nothing of the load yet would. With `from=burst` it learns at the
    /// start of the first minute whose work needs more than that fleet at the full plan's
    /// utilisation (from the start, if none does), before any policy could see the burst, so
    /// its row bounds what one that reacts to it can reach within this plan's shape.
    fn run_clairvoyant_from(
        &self,
        scenario: &Scenario,
        spec: &ClairvoyantFrom,
    ) -> (RunResult, PolicyReport) {
        let opening = self.oracle_for(scenario, &self.oracle).initial();
        let settings = OracleSettings {
            utilisation: spec.utilisation,
            ..self.oracle.clone()
        };
        // The burst is where the opening fleet, sized as the full plan sizes it, stops
        // covering the load: the same minute at every utilisation, so a plan that sizes the
        // quiet start above that fleet does not learn of the burst from the quiet start. A
        // load the opening fleet covers throughout hides nothing from the plan.
        let from = spec.from.unwrap_or_else(|| {
            let needed =
                Oracle::needed_per_bucket(&scenario.requests, &self.fleet.engine, &self.oracle);
            Oracle::first_need_above(&needed, opening, self.oracle.bucket).unwrap_or(Duration::ZERO)
        });
        let lookahead = spec.lookahead.unwrap_or_else(|| self.planning_delay());
        let mut oracle = self
            .oracle_looking(scenario, &settings, lookahead)
            .learning_at(from, opening);
        let result = fleet::run(&scenario.requests, &self.fleet, opening, &mut oracle);
        let name = PolicySpec::ClairvoyantFrom(spec.clone()).name();
        let report = self.summarise(&name, scenario, &result);
        (result, report)
    }
}

/// The plot of one scenario: offered load and queue on the left, replicas per policy on the
/// right.
pub fn scenario_chart(scenario: &str, runs: &[(String, RunResult)]) -> Chart {
    let mut chart = Chart::new(format!("simulate: {scenario}"))
        .x_label("time (minutes)")
        .y_label("requests per second / waiting requests")
        .y2_label("replicas");
    if let Some((_, first)) = runs.first() {
        chart = chart.series(
            Series::new(
                "offered RPS",
                first
                    .series
                    .iter()
                    .map(|p| (p.t_seconds / 60.0, p.offered_rps))
                    .collect(),
            )
            .color("#999999"),
        );
    }
    for (name, run) in runs {
        chart = chart
            .series(
                Series::new(
                    format!("{name}: queue"),
                    run.series
                        .iter()
                        .map(|p| (p.t_seconds / 60.0, p.queue as f64))
                        .collect(),
                )
                .dashed(),
            )
            .series(
                Series::new(
                    format!("{name}: replicas"),
                    run.series
                        .iter()
                        .map(|p| (p.t_seconds / 60.0, f64::from(p.desired)))
                        .collect(),
                )
                .axis(Axis::Right)
                .step(),
            );
    }
    chart
}

fn parse_metadata(pairs: &[String]) -> anyhow::Result<Vec<(String, String)>> {
    pairs
        .iter()
        .map(|p| {
            p.split_once('=')
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                .ok_or_else(|| anyhow::anyhow!("--metadata {p:?}: expected KEY=VALUE"))
        })
        .collect()
}

/// The knob sweep of a policy family, for its Pareto curve: the policy at each knob value.
pub fn sweep_of(policy: &PolicySpec, max_replicas: u32) -> Vec<PolicySpec> {
    match policy {
        PolicySpec::Ours | PolicySpec::OursWith(_) => [0.05, 0.06, 0.07, 0.08, 0.1]
            .iter()
            .map(|v| PolicySpec::OursWith(vec![("itlSloSeconds".into(), v.to_string())]))
            .collect(),
        PolicySpec::PrometheusKedaTuned(_) => [32.0, 64.0, 96.0, 128.0, 192.0, 256.0]
            .iter()
            .map(|v| {
                PolicySpec::PrometheusKedaTuned(PrometheusKedaTunedSettings {
                    in_flight_per_replica: *v,
                    ..PrometheusKedaTunedSettings::default()
                })
            })
            .collect(),
        PolicySpec::Kpa(_) => [16.0, 32.0, 64.0, 128.0, 256.0]
            .iter()
            .map(|v| PolicySpec::Kpa(*v))
            .collect(),
        PolicySpec::KpaWith(s) => [16.0, 32.0, 64.0, 128.0, 256.0]
            .iter()
            .map(|v| {
                PolicySpec::KpaWith(KpaSettings {
                    target: *v,
                    ..s.clone()
                })
            })
            .collect(),
        PolicySpec::Apa(s) => [32.0, 64.0, 96.0, 128.0, 192.0, 256.0]
            .iter()
            .map(|v| {
                PolicySpec::Apa(ApaSettings {
                    target: *v,
                    ..s.clone()
                })
            })
            .collect(),
        PolicySpec::Static(_) | PolicySpec::StaticBest => {
            (1..=max_replicas).map(PolicySpec::Static).collect()
        }
        PolicySpec::PrometheusKeda | PolicySpec::Clairvoyant => vec![policy.clone()],
        PolicySpec::ClairvoyantFrom(c) => [1.0, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3]
            .iter()
            .map(|u| {
                PolicySpec::ClairvoyantFrom(ClairvoyantFrom {
                    utilisation: *u,
                    ..c.clone()
                })
            })
            .collect(),
    }
}

/// Mean and sample standard deviation.
pub fn mean_sd(values: &[f64]) -> (f64, f64) {
    if values.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let sd = if values.len() > 1 {
        (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
    } else {
        0.0
    };
    (mean, sd)
}

/// The table of one scenario over several seeds: per policy, the mean and standard deviation
/// (and range) of SLO attainment and GPU-hours, with the fluid lower bound and static sizes.
pub fn seeds_table(scenario: &str, seeds: &[u64], rows: &[Vec<PolicyReport>]) -> String {
    let mut out = format!(
        "### {scenario} ({} seeds: {})\n\n| policy | SLO attainment % mean ± sd [min, max] | GPU-hours mean ± sd [min, max] | GPU-h / lower bound | static size | scale events | flaps | TTFT p95 s | timed out |\n|---|---|---|---|---|---|---|---|---|\n",
        seeds.len(),
        seeds
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    );
    let Some(first) = rows.first() else {
        return out;
    };
    for (i, policy) in first.iter().enumerate() {
        let per: Vec<&PolicyReport> = rows.iter().filter_map(|r| r.get(i)).collect();
        let att: Vec<f64> = per.iter().map(|r| r.slo_attainment * 100.0).collect();
        let gpu: Vec<f64> = per.iter().map(|r| r.gpu_hours).collect();
        let ratio: Vec<f64> = per
            .iter()
            .map(|r| r.gpu_hours / r.gpu_hours_lower_bound.max(1e-9))
            .collect();
        let events: Vec<f64> = per.iter().map(|r| r.scale_events as f64).collect();
        let flaps: Vec<f64> = per.iter().map(|r| r.flaps as f64).collect();
        let ttft: Vec<f64> = per.iter().filter_map(|r| r.ttft_p95_seconds).collect();
        let timed: Vec<f64> = per.iter().map(|r| r.timed_out as f64).collect();
        let sizes: Vec<String> = per
            .iter()
            .filter_map(|r| r.static_replicas.map(|n| n.to_string()))
            .collect();
        let min = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
        let max = |v: &[f64]| v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let (am, asd) = mean_sd(&att);
        let (gm, gsd) = mean_sd(&gpu);
        out.push_str(&format!(
            "| {} | {am:.2} ± {asd:.2} [{:.2}, {:.2}] | {gm:.2} ± {gsd:.2} [{:.2}, {:.2}] | {:.2} | {} | {:.1} | {:.1} | {} | {:.0} |\n",
            policy.policy,
            min(&att),
            max(&att),
            min(&gpu),
            max(&gpu),
            mean_sd(&ratio).0,
            if sizes.is_empty() {
                "-".to_string()
            } else {
                sizes.join("/")
            },
            mean_sd(&events).0,
            mean_sd(&flaps).0,
            if ttft.is_empty() {
                "-".to_string()
            } else {
                format!("{:.2}", mean_sd(&ttft).0)
            },
            mean_sd(&timed).0,
        ));
    }
    let (lb, _) = mean_sd(
        &rows
            .iter()
            .filter_map(|r| r.first().map(|p| p.gpu_hours_lower_bound))
            .collect::<Vec<_>>(),
    );
    out.push_str(&format!(
        "\nFluid lower bound on GPU-hours (mean over seeds): {lb:.2}.\n"
    ));
    out
}

/// One point of a Pareto plot: a policy (one knob value), its mean attainment and GPU-hours
/// over the seeds.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ParetoPoint {
    /// Policy family (one curve).
    pub family: String,
    /// The policy with its knob.
    pub policy: String,
    /// Mean SLO attainment, 0..1.
    pub slo_attainment: f64,
    /// Mean GPU-hours.
    pub gpu_hours: f64,
    /// On how many of how many seeds a static fleet dominates the point, for a row judged
    /// against them (an autoscaled policy or a bound); `None` for the references and for a run
    /// that judged none (`--no-static-judging`).
    pub dominated_seeds: Option<(usize, usize)>,
}

/// One sweep point's runs over the seeds, before they are averaged into a [`ParetoPoint`].
#[derive(Debug, Default)]
struct SweepRuns {
    policy: String,
    family: String,
    slo_attainment: Vec<f64>,
    gpu_hours: Vec<f64>,
    /// Per seed, whether a static fleet dominates the run; `None` where it is not judged.
    dominated: Vec<Option<bool>>,
}

/// The SLO-attainment versus GPU-hours plot of one scenario: one curve per policy family
/// (its knob swept), the fluid lower bound as a vertical line.
pub fn pareto_chart(scenario: &str, points: &[ParetoPoint], lower_bound: f64) -> Chart {
    let mut chart = Chart::new(format!("SLO attainment vs GPU-hours: {scenario}"))
        .x_label("GPU-hours")
        .y_label("SLO attainment (%)")
        .marker_colored(lower_bound, "fluid lower bound", "#666666");
    let mut families: Vec<&str> = Vec::new();
    for p in points {
        if !families.contains(&p.family.as_str()) {
            families.push(&p.family);
        }
    }
    for family in families {
        let mut pts: Vec<(f64, f64)> = points
            .iter()
            .filter(|p| p.family == family)
            .map(|p| (p.gpu_hours, p.slo_attainment * 100.0))
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut series = Series::new(family, pts).dots();
        if family == "static" {
            series = series.dashed().color("#999999");
        }
        chart = chart.series(series);
    }
    chart
}

/// Our policies' explained decisions of the first seed's runs, one per line (tab-separated:
/// policy, seconds, ready, target, reason, explanation), kept where the target or the reason
/// changed; empty when no run explained any.
fn decisions_tsv(runs: &[(String, RunResult)]) -> String {
    let mut out = String::new();
    for (policy, run) in runs {
        for d in &run.decisions {
            if out.is_empty() {
                out.push_str("policy\tseconds\tready\ttarget\treason\texplanation\n");
            }
            out.push_str(&format!(
                "{policy}\t{:.0}\t{}\t{}\t{}\t{}\n",
                d.t_seconds,
                d.ready,
                d.target,
                d.reason,
                d.explanation.replace(['\t', '\n'], " ")
            ));
        }
    }
    out
}

fn file_stem(name: &str) -> String {
    name.replace([' ', '/', ':'], "_")
}

/// Runs the command.
pub fn run(args: SimulateOptions) -> anyhow::Result<()> {
    if args.min_replicas == 0 || args.min_replicas > args.max_replicas {
        anyhow::bail!(
            "--min-replicas {} / --max-replicas {}: expected 1 <= min <= max",
            args.min_replicas,
            args.max_replicas
        );
    }
    let positive = |name: &str, v: f64| {
        if v.is_finite() && v > 0.0 {
            Ok(v)
        } else {
            Err(anyhow::anyhow!("--{name} {v}: expected a positive number"))
        }
    };
    if !(args.slo_target.is_finite() && args.slo_target > 0.0 && args.slo_target <= 1.0) {
        anyhow::bail!(
            "--slo-target {}: expected a share in (0, 1], e.g. 0.99",
            args.slo_target
        );
    }
    let policies: Vec<PolicySpec> = args
        .policies
        .iter()
        .map(|p| PolicySpec::parse(p))
        .collect::<anyhow::Result<_>>()?;
    let metadata = parse_metadata(&args.metadata)?;
    let engine = EngineConfig::profile(&args.engine).ok_or_else(|| {
        anyhow::anyhow!(
            "--engine {:?}: unknown profile; expected one of {}",
            args.engine,
            vllm_emulator::PROFILES
                .iter()
                .map(|p| p.name)
                .collect::<Vec<_>>()
                .join(", ")
        )
    })?;
    let (startup_delay, startup_spread) = parse_startup(&args.startup_delay)?;
    let startup_draws = parse_startup_draws(&args.startup_draws)?;
    let client_timeout = args
        .client_timeout_seconds
        .map(|t| seconds::flag("client-timeout-seconds", t, false))
        .transpose()?;
    let base = Simulation {
        fleet: FleetSettings {
            engine,
            startup_delay,
            startup_spread,
            startup_draws,
            client_timeout,
            ..FleetSettings::default()
        },
        ours: Simulation::ours_config(&metadata, args.min_replicas, args.max_replicas)?,
        ours_metadata: metadata,
        prometheus_keda: PrometheusKedaSettings {
            scrape_interval: seconds::flag(
                "prometheus-scrape-seconds",
                args.prometheus_scrape_seconds,
                false,
            )?,
            ..PrometheusKedaSettings::default()
        },
        oracle: OracleSettings::default(),
        min_replicas: args.min_replicas,
        max_replicas: args.max_replicas,
        slo: SloTargets {
            ttft_seconds: positive("ttft-slo-seconds", args.ttft_slo_seconds)?,
            tpot_seconds: positive("tpot-slo-seconds", args.tpot_slo_seconds)?,
            e2e_seconds: positive("e2e-slo-seconds", args.e2e_slo_seconds)?,
        },
        slo_target: args.slo_target,
        seed: args.seed,
        static_runs: StaticRuns::default(),
        restart: match args.restart_at_seconds {
            Some(at) => Some(Restart {
                at: seconds::flag("restart-at-seconds", at, false)?,
                keeps_learning: !args.restart_forgets,
            }),
            None if args.restart_forgets => anyhow::bail!(
                "--restart-forgets says how a restart starts, but no --restart-at-seconds sets one: add --restart-at-seconds S or drop --restart-forgets"
            ),
            None => None,
        },
        judge_statics: args.judge_statics,
    };
    let traces: Vec<String> = match &args.scenario_set {
        Some(set) => scenario::ScenarioSet::parse(set)?
            .names()
            .into_iter()
            .map(str::to_owned)
            .collect(),
        None => args.traces.clone(),
    };
    if args.warm_gap_seconds != 0.0 && !args.warm {
        anyhow::bail!(
            "--warm-gap-seconds says how long before the run the day before ended, but there is no --warm: add --warm or drop --warm-gap-seconds"
        );
    }
    if !seconds::fits(args.warm_gap_seconds, true) {
        anyhow::bail!(
            "--warm-gap-seconds {} is not a time: give the seconds between the day before's end and the run's start, {}",
            args.warm_gap_seconds,
            seconds::range(true)
        );
    }
    if let Some(day) = args.warm_day_seconds {
        if !args.warm {
            anyhow::bail!(
                "--warm-day-seconds says how long before the run the day before began, but there is no --warm: add --warm or drop --warm-day-seconds"
            );
        }
        if args.warm_gap_seconds != 0.0 {
            anyhow::bail!(
                "--warm-day-seconds and --warm-gap-seconds both place the day before: give one of them"
            );
        }
        if !seconds::fits(day, false) {
            anyhow::bail!(
                "--warm-day-seconds {day} is not a time: give the seconds from the day before's start to the run's start, 86400 for a calendar day, {}",
                seconds::range(false)
            );
        }
    }
    let seeds: Vec<u64> = if args.seeds.is_empty() {
        vec![args.seed]
    } else {
        args.seeds.clone()
    };
    if args.sweep && args.out.is_none() {
        anyhow::bail!("--sweep draws Pareto plots: give --out DIR as well");
    }
    let mut all_reports: Vec<serde_json::Value> = Vec::new();
    let mut sweep_rows: Vec<serde_json::Value> = Vec::new();
    let mut markdown = String::new();
    for spec in &traces {
        let mut per_seed: Vec<Vec<PolicyReport>> = Vec::new();
        let mut chart_runs: Vec<(String, RunResult)> = Vec::new();
        let mut scenario_name = spec.clone();
        let mut sweep: Vec<SweepRuns> = Vec::new();
        let mut lower_bounds = Vec::new();
        let load = |seed: u64| -> anyhow::Result<Scenario> {
            let mut scenario =
                scenario::load(spec, args.rate_multiplier, args.time_compression, seed)?;
            if let Some(limit) = args.duration_seconds {
                let limit = seconds::flag("duration-seconds", limit, false)?;
                scenario.requests.retain(|r| r.arrival <= limit);
                if scenario.requests.is_empty() {
                    anyhow::bail!(
                        "--duration-seconds {}: no request of {spec:?} arrives that early",
                        limit.as_secs_f64()
                    );
                }
            }
            Ok(scenario)
        };
        let simulation_for = |seed: u64| Simulation {
            seed,
            fleet: FleetSettings {
                startup_seed: seed,
                ..base.fleet.clone()
            },
            static_runs: StaticRuns::default(),
            ..base.clone()
        };
        for (k, &seed) in seeds.iter().enumerate() {
            let scenario = load(seed)?;
            scenario_name = scenario.name.clone();
            let simulation = simulation_for(seed);
            // Under --warm, the day before: the same scenario with other arrivals and
            // start-ups, which each `ours` run learns from first.
            let day_before = if args.warm {
                let before = seed.wrapping_add(WARM_SEED_OFFSET);
                Some((load(before)?, simulation_for(before)))
            } else {
                None
            };
            lower_bounds.push(simulation.lower_bound_hours(&scenario));
            let mut reports = Vec::new();
            for policy in &policies {
                eprintln!(
                    "simulating {} on {} (seed {seed}, {} requests)...",
                    policy.name(),
                    scenario.name,
                    scenario.requests.len()
                );
                let learned = match (&day_before, policy) {
                    (Some((before, sim)), PolicySpec::Ours | PolicySpec::OursWith(_)) => {
                        let learned = match sim.learned_by_end(before, policy)? {
                            Some((l, end)) => {
                                let gap = warm_gap(&args, end)?;
                                Some((l.aged(gap), gap))
                            }
                            None => None,
                        };
                        if let Some((l, gap)) = &learned {
                            eprintln!(
                                "  warm start from seed {} ({gap:.0} s after it ended): {}, {}, {}, {} minutes of demand history",
                                sim.seed,
                                l.capacity_per_replica.map_or("no capacity estimate".into(), |c| {
                                    format!("capacity {c:.2} req/s per replica")
                                }),
                                l.startup_seconds.map_or("start-up not learned".into(), |s| {
                                    format!("start-up {s:.0} s")
                                }),
                                l.hindsight_floor.map_or("no hindsight floor".into(), |f| format!(
                                    "hindsight floor {} replicas (found {:.0} s before this run)",
                                    f.replicas, f.age_seconds
                                )),
                                l.demand_history.len(),
                            );
                        }
                        learned.map(|(l, _)| l)
                    }
                    _ => None,
                };
                let (result, report) =
                    simulation.run_policy_from(&scenario, policy, learned.as_ref())?;
                eprintln!(
                    "  {}: SLO {:.2} %, {:.2} GPU-hours (lower bound {:.2}){}, {} scale events",
                    report.policy,
                    report.slo_attainment * 100.0,
                    report.gpu_hours,
                    report.gpu_hours_lower_bound,
                    report
                        .static_replicas
                        .map(|n| format!(", {n} replicas"))
                        .unwrap_or_default(),
                    report.scale_events
                );
                if let Some(h) = &report.hindsight {
                    eprintln!("  {}", h.describe());
                }
                if report.statics_not_judged {
                    eprintln!("  not judged against static fleets (--no-static-judging)");
                }
                if let Some(f) = report.dominated_by_static.first() {
                    eprintln!(
                        "  dominated: a static fleet of {} replicas serves {:.2} % for {:.2} GPU-hours (at least 1 point more for at most 97 % of the GPU-hours; {} such fleets)",
                        f.replicas,
                        f.slo_attainment * 100.0,
                        f.gpu_hours,
                        report.dominated_by_static.len()
                    );
                }
                all_reports.push(serde_json::to_value(&report)?);
                if k == 0 {
                    chart_runs.push((report.policy.clone(), result));
                }
                reports.push(report);
            }
            if args.sweep {
                let mut done: Vec<String> = Vec::new();
                for policy in &policies {
                    for point in sweep_of(policy, args.max_replicas) {
                        let name = point.name();
                        if done.contains(&name) {
                            continue;
                        }
                        done.push(name.clone());
                        eprintln!("  sweep {name} (seed {seed})");
                        let (_, mut report) = simulation.run_policy(&scenario, &point)?;
                        report.policy = name.clone();
                        let mut row = serde_json::to_value(&report)?;
                        row["family"] = serde_json::Value::String(point.family().to_string());
                        if let Some(obj) = row.as_object_mut() {
                            obj.remove("events");
                        }
                        sweep_rows.push(row);
                        let dominated = (point.judged() && !report.statics_not_judged)
                            .then_some(!report.dominated_by_static.is_empty());
                        let entry = match sweep.iter().position(|s| s.policy == name) {
                            Some(i) => &mut sweep[i],
                            None => {
                                sweep.push(SweepRuns {
                                    policy: name,
                                    family: point.family().to_string(),
                                    ..SweepRuns::default()
                                });
                                sweep.last_mut().expect("just pushed")
                            }
                        };
                        entry.slo_attainment.push(report.slo_attainment);
                        entry.gpu_hours.push(report.gpu_hours);
                        entry.dominated.push(dominated);
                    }
                }
            }
            per_seed.push(reports);
        }
        if seeds.len() == 1 {
            markdown.push_str(&report::markdown_table(&scenario_name, &per_seed[0]));
        } else {
            markdown.push_str(&seeds_table(&scenario_name, &seeds, &per_seed));
        }
        if let Some(r) = base.restart {
            markdown.push_str(&format!(
                "\nRestart: each `ours` run's scaler pod restarted {} s into the run and started {}.\n",
                r.at.as_secs_f64(),
                if r.keeps_learning {
                    "from what the old pod learned (--learned-state-configmap)"
                } else {
                    "from nothing"
                }
            ));
        }
        if args.warm {
            let placed = match args.warm_day_seconds {
                Some(day) => format!(", a day that began {day:.0} s before the run"),
                None if args.warm_gap_seconds > 0.0 => format!(
                    ", a day that ended {:.0} s before the run",
                    args.warm_gap_seconds
                ),
                None => ", a day that ended as the run began".to_owned(),
            };
            markdown.push_str(&format!(
                "\nWarm start: each `ours` run started from what the same policy learned on this scenario drawn with the seed plus {WARM_SEED_OFFSET}{placed}; the peers and static fleets start as always.\n"
            ));
        }
        markdown.push('\n');
        if let Some(dir) = &args.out {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("--out {}: cannot create the directory", dir.display()))?;
            let file = dir.join(format!("{}.svg", file_stem(&scenario_name)));
            scenario_chart(&scenario_name, &chart_runs)
                .write(&file)
                .with_context(|| format!("writing {}", file.display()))?;
            let decisions = decisions_tsv(&chart_runs);
            if !decisions.is_empty() {
                let file = dir.join(format!("{}-decisions.tsv", file_stem(&scenario_name)));
                std::fs::write(&file, decisions)
                    .with_context(|| format!("writing {}", file.display()))?;
            }
            if args.sweep {
                let points: Vec<ParetoPoint> = sweep
                    .iter()
                    .map(|runs| ParetoPoint {
                        family: runs.family.clone(),
                        policy: runs.policy.clone(),
                        slo_attainment: mean_sd(&runs.slo_attainment).0,
                        gpu_hours: mean_sd(&runs.gpu_hours).0,
                        dominated_seeds: runs
                            .dominated
                            .iter()
                            .copied()
                            .collect::<Option<Vec<bool>>>()
                            .map(|d| (d.iter().filter(|&&x| x).count(), d.len())),
                    })
                    .collect();
                let file = dir.join(format!("{}-pareto.svg", file_stem(&scenario_name)));
                pareto_chart(&scenario_name, &points, mean_sd(&lower_bounds).0)
                    .write(&file)
                    .with_context(|| format!("writing {}", file.display()))?;
                markdown.push_str(&pareto_table(&scenario_name, &points));
                markdown.push('\n');
            }
        }
    }
    let json = serde_json::to_string_pretty(&all_reports)?;
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("--out {}: cannot create the directory", dir.display()))?;
        std::fs::write(dir.join("report.md"), &markdown)?;
        std::fs::write(dir.join("report.json"), &json)?;
        if args.sweep {
            std::fs::write(
                dir.join("sweep.json"),
                serde_json::to_string_pretty(&sweep_rows)?,
            )?;
        }
    }
    if args.json {
        println!("{json}");
    } else {
        print!("{markdown}");
    }
    Ok(())
}

/// The sweep's points as a table (mean over seeds), by family then GPU-hours.
pub fn pareto_table(scenario: &str, points: &[ParetoPoint]) -> String {
    let mut sorted: Vec<&ParetoPoint> = points.iter().collect();
    sorted.sort_by(|a, b| {
        a.family
            .cmp(&b.family)
            .then(a.gpu_hours.total_cmp(&b.gpu_hours))
    });
    let mut out = format!(
        "#### {scenario}: knob sweeps (mean over seeds)\n\n| family | policy | SLO attainment % | GPU-hours | seeds a static fleet dominates |\n|---|---|---|---|---|\n"
    );
    for p in sorted {
        let dominated = match p.dominated_seeds {
            Some((n, of)) => format!("{n} of {of}"),
            None => "-".into(),
        };
        out.push_str(&format!(
            "| {} | {} | {:.2} | {:.2} | {dominated} |\n",
            p.family,
            p.policy,
            p.slo_attainment * 100.0,
            p.gpu_hours
        ));
    }
    out
}

/// How long before the run the day before's record was taken, for a warm start: `--warm-gap-seconds`,
/// or `--warm-day-seconds` less the day before's length (`ended`, when its work was done).
fn warm_gap(args: &SimulateOptions, ended: Duration) -> anyhow::Result<f64> {
    let Some(day) = args.warm_day_seconds else {
        return Ok(args.warm_gap_seconds);
    };
    let length = ended.as_secs_f64();
    if day < length {
        anyhow::bail!(
            "--warm-day-seconds {day} is shorter than the day before, which ran {length:.0} s: give at least that, 86400 for a calendar day"
        );
    }
    Ok(day - length)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kpa_policies_parse_with_the_default_or_a_given_target() {
        let kpa = PolicySpec::parse("kpa").unwrap();
        assert_eq!(kpa, PolicySpec::Kpa(controllers::KPA_DEFAULT_TARGET));
        assert_eq!(
            PolicySpec::parse("oracle").unwrap(),
            PolicySpec::Clairvoyant
        );
        assert_eq!(kpa.name(), "kpa");
        let k64 = PolicySpec::parse(" kpa:64 ").unwrap();
        assert_eq!(k64, PolicySpec::Kpa(64.0));
        assert_eq!(k64.name(), "kpa:64");
        assert_eq!(PolicySpec::parse("kpa:12.5").unwrap().name(), "kpa:12.5");
        for bad in ["kpa:", "kpa:0", "kpa:-3", "kpa:x", "kpa:inf", "kpa:NaN"] {
            assert!(PolicySpec::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn every_policy_form_parses_and_its_name_parses_back() {
        for text in [
            "ours",
            "ours:itlSloSeconds=0.08",
            "prometheus-keda",
            "prometheus-keda-tuned",
            "prometheus-keda-tuned:64",
            "prometheus-keda-tuned:64:ttft=1.5:itl=0.05",
            "kpa",
            "kpa:32",
            "kpa:64:stable=180:delay=300",
            "apa",
            "apa:64:up=0.2:downrate=4",
            "static:3",
            "static:best",
            "clairvoyant",
            "clairvoyant:from=burst",
            "clairvoyant:from=burst:utilisation=0.6",
            "clairvoyant:from=900:utilisation=1.2",
            "clairvoyant:from=0:lookahead=0",
        ] {
            let spec = PolicySpec::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(spec.name(), text, "{text}");
            assert_eq!(PolicySpec::parse(&spec.name()).unwrap(), spec, "{text}");
        }
        assert_eq!(PolicySpec::parse("oracle").unwrap().name(), "clairvoyant");
        for bad in [
            "static:0",
            "static:worst",
            "apa:x",
            "apa:64:sideways=1",
            "kpa:64:delay=-1",
            "prometheus-keda-tuned:0",
            "ours:",
            "ours:foo",
            "random",
            "clairvoyant:utilisation=0.6",
            "clairvoyant:from=soon",
            "clairvoyant:from=-1",
            "clairvoyant:from=burst:utilisation=0",
            "clairvoyant:from=burst:utilisation=3",
            "clairvoyant:from=burst:ahead=2",
            "clairvoyant:from=burst:lookahead=-60",
            "clairvoyant:from=1e300",
            "clairvoyant:from=burst:lookahead=1e300",
            "kpa:64:delay=1e300",
            "kpa:64:stable=1e300",
            "kpa:64:stable=0",
            "clairvoyant:burst",
        ] {
            let e = PolicySpec::parse(bad).unwrap_err().to_string();
            assert!(e.contains(bad), "{bad}: {e}");
        }
        assert_eq!(
            PolicySpec::parse("oracle:from=burst").unwrap(),
            PolicySpec::ClairvoyantFrom(ClairvoyantFrom {
                from: None,
                utilisation: 0.8,
                lookahead: None
            })
        );
        // The sweeps draw a curve per family: a plan and a reaction are two curves.
        assert_eq!(
            PolicySpec::parse("clairvoyant:from=burst")
                .unwrap()
                .family(),
            "clairvoyant-from"
        );
        assert_eq!(
            PolicySpec::parse("clairvoyant:from=burst:lookahead=0")
                .unwrap()
                .family(),
            "clairvoyant-from-lookahead"
        );
    }

    #[test]
    fn the_sweep_table_says_on_how_many_seeds_a_static_fleet_dominates_a_judged_point() {
        let point = |family: &str, policy: &str, gpu_hours, dominated_seeds| ParetoPoint {
            family: family.into(),
            policy: policy.into(),
            slo_attainment: 0.9,
            gpu_hours,
            dominated_seeds,
        };
        let table = pareto_table(
            "s",
            &[
                point("ours", "ours:itlSloSeconds=0.1", 9.5, Some((3, 10))),
                point("static", "static:3", 9.0, None),
                point(
                    "clairvoyant-from",
                    "clairvoyant:from=burst",
                    6.0,
                    Some((0, 10)),
                ),
            ],
        );
        assert!(
            table.contains("| seeds a static fleet dominates |"),
            "{table}"
        );
        assert!(
            table.contains("| ours | ours:itlSloSeconds=0.1 | 90.00 | 9.50 | 3 of 10 |"),
            "{table}"
        );
        assert!(
            table.contains("| static | static:3 | 90.00 | 9.00 | - |"),
            "{table}"
        );
        assert!(table.contains("| clairvoyant:from=burst | 90.00 | 6.00 | 0 of 10 |"));
        for (text, judged) in [
            ("ours", true),
            ("kpa", true),
            ("clairvoyant:from=burst", true),
            ("static:3", false),
            ("static:best", false),
            ("clairvoyant", false),
        ] {
            assert_eq!(PolicySpec::parse(text).unwrap().judged(), judged, "{text}");
        }
    }

    #[test]
    fn startup_draws_parse_by_name_and_refuse_others_naming_the_flag() {
        assert_eq!(parse_startup_draws("order").unwrap(), StartupDraws::Order);
        assert_eq!(parse_startup_draws("slot").unwrap(), StartupDraws::Slot);
        for bad in ["", "Slot", "random"] {
            let e = parse_startup_draws(bad).unwrap_err().to_string();
            assert!(
                e.contains("--startup-draws") && e.contains("order or slot"),
                "{e}"
            );
        }
    }

    #[test]
    fn startup_delays_parse_in_three_forms() {
        assert_eq!(
            parse_startup("300").unwrap(),
            (Duration::from_secs(300), StartupSpread::Fixed)
        );
        assert_eq!(
            parse_startup("120..600").unwrap().1,
            StartupSpread::Uniform {
                low: 120.0,
                high: 600.0
            }
        );
        assert_eq!(
            parse_startup("lognormal:300:0.4").unwrap().1,
            StartupSpread::LogNormal {
                median: 300.0,
                sigma: 0.4
            }
        );
        for bad in [
            "-1",
            "600..120",
            "lognormal:300",
            "lognormal:300:9",
            "x",
            "1e9",
        ] {
            let e = parse_startup(bad).unwrap_err().to_string();
            assert!(e.contains("--startup-delay-seconds"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_restart_needs_a_positive_time_and_forgetting_needs_a_restart() {
        for (at, forgets, expected) in [
            (None, true, "no --restart-at-seconds sets one"),
            (
                Some(-5.0),
                false,
                "--restart-at-seconds -5.0: expected a number of seconds above 0",
            ),
            (Some(f64::NAN), true, "--restart-at-seconds NaN"),
            (Some(1e300), false, "to 31536000 (a year)"),
        ] {
            let e = run(SimulateOptions {
                restart_at_seconds: at,
                restart_forgets: forgets,
                ..SimulateOptions::default()
            })
            .unwrap_err()
            .to_string();
            assert!(e.contains(expected), "{at:?} {forgets}: {e}");
        }
    }

    #[test]
    fn seconds_flags_beyond_a_year_are_refused_naming_the_flag_not_a_panic() {
        for (options, flag) in [
            (
                SimulateOptions {
                    client_timeout_seconds: Some(1e300),
                    ..SimulateOptions::default()
                },
                "--client-timeout-seconds 1",
            ),
            (
                SimulateOptions {
                    prometheus_scrape_seconds: 1e300,
                    ..SimulateOptions::default()
                },
                "--prometheus-scrape-seconds 1",
            ),
            (
                SimulateOptions {
                    duration_seconds: Some(1e300),
                    ..SimulateOptions::default()
                },
                "--duration-seconds 1",
            ),
        ] {
            let e = run(options).unwrap_err().to_string();
            assert!(
                e.contains(flag) && e.contains("to 31536000 (a year)"),
                "{flag}: {e}"
            );
        }
    }

    #[test]
    fn a_warm_gap_needs_a_warm_start_and_a_time() {
        for (warm, gap, expected) in [
            (false, 3600.0, "there is no --warm"),
            (true, -1.0, "--warm-gap-seconds -1 is not a time"),
            (true, f64::INFINITY, "--warm-gap-seconds inf is not a time"),
            (true, 1e300, "0 to 31536000 (a year)"),
        ] {
            let e = run(SimulateOptions {
                warm,
                warm_gap_seconds: gap,
                ..SimulateOptions::default()
            })
            .unwrap_err()
            .to_string();
            assert!(e.contains(expected), "{warm} {gap}: {e}");
        }
    }

    #[test]
    fn a_warm_day_needs_a_warm_start_a_time_and_no_gap_beside_it() {
        for (warm, gap, day, expected) in [
            (false, 0.0, 86_400.0, "there is no --warm"),
            (true, 3600.0, 86_400.0, "give one of them"),
            (true, 0.0, 0.0, "--warm-day-seconds 0 is not a time"),
            (true, 0.0, f64::NAN, "--warm-day-seconds NaN is not a time"),
            (true, 0.0, 1e300, "to 31536000 (a year)"),
        ] {
            let e = run(SimulateOptions {
                warm,
                warm_gap_seconds: gap,
                warm_day_seconds: Some(day),
                ..SimulateOptions::default()
            })
            .unwrap_err()
            .to_string();
            assert!(e.contains(expected), "{warm} {gap} {day}: {e}");
        }
    }

    #[test]
    fn a_warm_day_places_the_day_before_its_length_earlier() {
        let args = |day| SimulateOptions {
            warm: true,
            warm_day_seconds: day,
            warm_gap_seconds: if day.is_none() { 600.0 } else { 0.0 },
            ..SimulateOptions::default()
        };
        let ended = Duration::from_secs(7_300);
        assert_eq!(warm_gap(&args(Some(86_400.0)), ended).unwrap(), 79_100.0);
        assert_eq!(warm_gap(&args(Some(7_300.0)), ended).unwrap(), 0.0);
        assert_eq!(warm_gap(&args(None), ended).unwrap(), 600.0);
        let e = warm_gap(&args(Some(3_600.0)), ended)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--warm-day-seconds 3600 is shorter than the day before, which ran 7300 s"),
            "{e}"
        );
    }

    #[test]
    fn the_seeds_table_gives_mean_and_spread() {
        let row = |att: f64, gpu: f64| PolicyReport {
            slo_attainment: att,
            gpu_hours: gpu,
            gpu_hours_lower_bound: 1.0,
            ..report::summarise(
                "ours",
                &[],
                &SloTargets::default(),
                0.0,
                vec![],
                &[],
                Duration::ZERO,
            )
        };
        let table = seeds_table(
            "s",
            &[1, 2, 3],
            &[
                vec![row(0.9, 2.0)],
                vec![row(0.95, 3.0)],
                vec![row(1.0, 4.0)],
            ],
        );
        assert!(
            table.contains(
                "| ours | 95.00 ± 5.00 [90.00, 100.00] | 3.00 ± 1.00 [2.00, 4.00] | 3.00 |"
            ),
            "{table}"
        );
    }
}
