//! The proactive policy (`policy: proactive`) in the simulator, through the same `Scaler` the
//! service runs: on a rising load it asks for replicas before the queue builds (the guide's
//! reactive rules wait for the queue or a latency breach).

use std::time::Duration;

use vllm_emulator::{EngineConfig, RequestShape, SplitMix64};
use vllm_keda_tools::simulate::fleet::FleetSettings;
use vllm_keda_tools::simulate::scenario::Scenario;
use vllm_keda_tools::simulate::{PolicySpec, Simulation};
use vllm_keda_tools::trace::TraceRequest;

const PROMPT: u32 = 512;
const OUTPUT: u32 = 64;

/// Requests per second one default replica saturates at with these sizes.
fn saturation() -> f64 {
    EngineConfig::default()
        .predicted_saturation(RequestShape {
            prompt_tokens: PROMPT,
            output_tokens: OUTPUT,
        })
        .requests_per_second
}

/// A ramp in Poisson phases from 40 % to 120 % of one replica's saturation, 45 s each, after
/// 4 minutes at 30 % (for the capacity and the trend to be learned).
fn ramp(seed: u64) -> Scenario {
    let cap = saturation();
    let mut phases = vec![(0.3 * cap, 240.0)];
    phases.extend((1..=9).map(|i| ((0.3 + 0.1 * f64::from(i)) * cap, 45.0)));
    let mut rng = SplitMix64::new(seed);
    let mut requests = Vec::new();
    let mut load_steps = Vec::new();
    let mut start = 0.0;
    for (rate, seconds) in phases {
        load_steps.push(Duration::from_secs_f64(start));
        let mut t = start;
        loop {
            t += rng.next_exp(rate);
            if t >= start + seconds {
                break;
            }
            requests.push(TraceRequest {
                arrival: Duration::from_secs_f64(t),
                prompt_tokens: PROMPT,
                output_tokens: OUTPUT,
            });
        }
        start += seconds;
    }
    Scenario {
        name: "ramp".into(),
        requests,
        load_steps,
    }
}

fn simulation() -> Simulation {
    Simulation {
        fleet: FleetSettings {
            startup_delay: Duration::from_secs(120),
            ..FleetSettings::default()
        },
        ours: Simulation::ours_config(&[], 1, 6).unwrap(),
        min_replicas: 1,
        max_replicas: 6,
        ..Simulation::default()
    }
}

/// When the fleet's queue first reaches `n` waiting requests, seconds.
fn queue_builds(series: &[vllm_keda_tools::simulate::fleet::SeriesPoint], n: usize) -> f64 {
    series
        .iter()
        .find(|p| p.queue >= n)
        .map_or(f64::INFINITY, |p| p.t_seconds)
}

#[test]
fn proactive_scales_up_before_the_queue_builds() {
    let scenario = ramp(7);
    let sim = simulation();
    let proactive = PolicySpec::parse("ours:policy=proactive").unwrap();
    let (run, report) = sim.run_policy(&scenario, &proactive).unwrap();
    let first_up = report
        .events
        .iter()
        .find(|e| e.to > e.from)
        .unwrap_or_else(|| panic!("no scale-up: {:?}", report.events));
    let built = queue_builds(&run.series, 10);
    assert!(
        first_up.at_seconds < built,
        "asked at {} s, queue of 10 at {built} s",
        first_up.at_seconds
    );
    assert!(report.slo_attainment > 0.95, "{report:?}");
    // The run keeps every decision whose target or reason changed, explained: the first
    // scale-up carries the forecast and the capacity it was sized with.
    let notes = &run.decisions;
    assert_eq!(notes.first().map(|d| d.t_seconds), Some(0.0), "{notes:?}");
    for pair in notes.windows(2) {
        assert!(
            pair[0].target != pair[1].target || pair[0].reason != pair[1].reason,
            "{pair:?}"
        );
    }
    let up = notes
        .iter()
        .find(|d| d.target > 1)
        .unwrap_or_else(|| panic!("no explained scale-up: {notes:?}"));
    assert!(
        up.explanation.contains("forecast") && up.explanation.contains("req/s per replica"),
        "{up:?}"
    );
}

/// A flat load at 20 % of one replica's saturation for 35 minutes.
fn flat(seed: u64) -> Scenario {
    let cap = saturation();
    let mut rng = SplitMix64::new(seed);
    let mut requests = Vec::new();
    let mut t = 0.0;
    loop {
        t += rng.next_exp(0.2 * cap);
        if t >= 35.0 * 60.0 {
            break;
        }
        requests.push(TraceRequest {
            arrival: Duration::from_secs_f64(t),
            prompt_tokens: PROMPT,
            output_tokens: OUTPUT,
        });
    }
    Scenario {
        name: "flat".into(),
        requests,
        load_steps: vec![Duration::ZERO],
    }
}

#[test]
fn the_policy_reports_its_hindsight_against_static_fleets() {
    let scenario = flat(3);
    let sim = simulation();
    let (_, ours) = sim
        .run_policy(&scenario, &PolicySpec::parse("ours").unwrap())
        .unwrap();
    let h = ours
        .hindsight
        .as_ref()
        .unwrap_or_else(|| panic!("no hindsight after 35 minutes: {ours:?}"));
    assert!((30..=35).contains(&h.minutes), "{h:?}");
    // One replica carries a fifth of its capacity: ours held one, and one static replica
    // serves as much, for the same replica-hours; nothing beats ours.
    assert_eq!(h.as_much.replicas, 1, "{}", h.describe());
    assert!(h.ours_served_percent > 99.0, "{}", h.describe());
    assert!(!h.static_beats_ours, "{}", h.describe());
    // The model's replica-hours are the simulator's GPU-hours over the minutes it saw.
    let per_minute = ours.gpu_hours / 35.0;
    assert!(
        (h.ours_replica_hours - per_minute * f64::from(h.minutes)).abs() < 0.05,
        "{} vs {} GPU-h",
        h.describe(),
        ours.gpu_hours
    );
    // The peers make no such comparison.
    let (_, fixed) = sim
        .run_policy(&scenario, &PolicySpec::parse("static:1").unwrap())
        .unwrap();
    assert!(fixed.hindsight.is_none());
    let json = serde_json::to_value(&ours).unwrap();
    assert_eq!(json["hindsight"]["as_much"]["replicas"], 1, "{json}");
    assert!(
        serde_json::to_value(&fixed)
            .unwrap()
            .get("hindsight")
            .is_none()
    );
}
