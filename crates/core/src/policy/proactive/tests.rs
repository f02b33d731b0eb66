use super::*;
use crate::signals::{Bucket, Quantiles, SignalSet};

fn config(proactive: &str) -> PolicyConfig {
    PolicyConfig {
        max_replicas: 20,
        proactive: parse_policy(proactive).unwrap(),
        ..PolicyConfig::default()
    }
}

/// A fleet of `ready` replicas finishing `rps` requests per second with `in_flight` running.
fn fleet(ready: usize, rps: f64, in_flight: f64) -> FleetSignals {
    FleetSignals {
        pods_total: ready,
        pods_healthy: ready,
        fleet: SignalSet {
            running: in_flight,
            requests_per_second: Some(rps),
            requests_finished_in_window: rps * 60.0,
            ttft_seconds: Quantiles {
                p95: Some(0.3),
                ..Quantiles::default()
            },
            itl_seconds: Quantiles {
                p95: Some(0.05), // within the 70 ms SLO, above half of it: no probing
                ..Quantiles::default()
            },
            ..SignalSet::default()
        },
        ..FleetSignals::default()
    }
}

/// The number that follows `marker` in a decision's explanation, up to the next space.
/// Asserts a decision's target and that its explanation says `phrase`, printing the
/// explanation when either fails.
#[track_caller]
fn assert_decides(d: &Decision, replicas: u32, phrase: &str) {
    assert_eq!(d.target_replicas, replicas, "{}", d.explanation);
    assert!(d.explanation.contains(phrase), "{}", d.explanation);
}

/// Whether no decision of a run says `phrase`.
fn never_says(run: &[(u64, Decision)], phrase: &str) -> bool {
    run.iter().all(|(_, d)| !d.explanation.contains(phrase))
}

fn number_after(explanation: &str, marker: &str) -> f64 {
    explanation
        .split(marker)
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|x| x.parse().ok())
        .unwrap_or_else(|| panic!("no number after {marker:?}: {explanation}"))
}

struct Run {
    policy: Policy,
    proactive: Proactive,
    state: PolicyState,
}

impl Run {
    fn new(metadata: &str, level: u32) -> Self {
        let c = config(metadata);
        Self {
            proactive: Proactive::new(c.proactive.clone().unwrap()),
            policy: Policy::new(c),
            state: PolicyState::with_previous_target(level),
        }
    }

    fn at(&mut self, t: u64, s: &FleetSignals) -> Decision {
        self.proactive
            .decide(&self.policy, Duration::from_secs(t), s, &mut self.state)
    }

    /// The same signals every 2 s from 0 to `until` seconds: the last decision.
    fn steady(&mut self, until: u64, s: &FleetSignals) -> Decision {
        (0..=until)
            .step_by(2)
            .map(|t| self.at(t, s))
            .last()
            .expect("at least one decision")
    }
}

#[test]
fn the_policy_value_is_read_with_its_settings() {
    assert_eq!(parse_policy("guide"), Ok(None));
    assert_eq!(
        parse_policy("proactive"),
        Ok(Some(ProactiveConfig::default()))
    );
    assert_eq!(
        parse_policy("proactive; utilization=0.7; capacity=15.2 startup=240"),
        Ok(Some(ProactiveConfig {
            target_utilization: 0.7,
            capacity_per_replica: Some(15.2),
            startup_seconds: Some(240.0),
            ..ProactiveConfig::default()
        }))
    );
    assert_eq!(
        parse_policy("proactive; periodic=off"),
        Ok(Some(ProactiveConfig {
            periodic: false,
            ..ProactiveConfig::default()
        }))
    );
    assert!(
        parse_policy("proactive; periodic=on")
            .unwrap()
            .unwrap()
            .periodic
    );
    assert_eq!(
        parse_policy("proactive; peak=3600; drain=0; trend=0.5; backstop=growing"),
        Ok(Some(ProactiveConfig {
            peak_window_seconds: 3600.0,
            drain_seconds: 0.0,
            backstop_always: false,
            trend_weight: 0.5,
            ..ProactiveConfig::default()
        }))
    );
    assert_eq!(
        parse_policy("proactive; attainment=0.9"),
        Ok(Some(ProactiveConfig {
            attainment: Some(0.9),
            ..ProactiveConfig::default()
        }))
    );
    assert_eq!(
        parse_policy("proactive; attainment=0.99; shares=ttft"),
        Ok(Some(ProactiveConfig {
            attainment: Some(0.99),
            attainment_shares_itl: false,
            ..ProactiveConfig::default()
        }))
    );
    assert_eq!(
        parse_policy("proactive; backlog=2; settle=on"),
        Ok(Some(ProactiveConfig {
            backlog_replicas: Some(2),
            settle: Settle::On,
            ..ProactiveConfig::default()
        }))
    );
    for (v, settle) in [
        ("off", Settle::Off),
        ("on", Settle::On),
        ("steady", Settle::Steady),
        ("band", Settle::Band),
    ] {
        let c = parse_policy(&format!("proactive; settle={v}"))
            .unwrap()
            .unwrap();
        assert_eq!(c.settle, settle, "{v}");
    }
    assert_eq!(
        parse_policy("proactive; hold=2.5"),
        Ok(Some(ProactiveConfig {
            hold_startups: 2.5,
            ..ProactiveConfig::default()
        }))
    );
    assert_eq!(
        parse_policy("proactive; onset=15"),
        Ok(Some(ProactiveConfig {
            onset_seconds: 15.0,
            ..ProactiveConfig::default()
        }))
    );
    // One setting each, against the default with that field changed; a default's own value
    // parses to the default.
    let d = ProactiveConfig::default;
    for (value, expected) in [
        (
            "proactive; breach=queued",
            ProactiveConfig {
                breach_needs_queue: true,
                ..d()
            },
        ),
        (
            "proactive; startups=each",
            ProactiveConfig {
                startup_each: true,
                ..d()
            },
        ),
        (
            "proactive; hindsight=advice",
            ProactiveConfig {
                hindsight_floor: false,
                ..d()
            },
        ),
        (
            "proactive; trendcap=off",
            ProactiveConfig {
                trend_capped_by_pattern: false,
                ..d()
            },
        ),
        (
            "proactive; troughs=floor",
            ProactiveConfig {
                floor_yields_to_troughs: false,
                ..d()
            },
        ),
        (
            "proactive; ceiling=off",
            ProactiveConfig {
                ceiling: Ceiling::Off,
                ..d()
            },
        ),
        (
            "proactive; ahead=1",
            ProactiveConfig {
                trough_ahead_startups: 1.0,
                ..d()
            },
        ),
        (
            "proactive; floorsize=latest",
            ProactiveConfig {
                floor_latest: true,
                ..d()
            },
        ),
        (
            "proactive; named=cheapest",
            ProactiveConfig {
                name_cheapest: true,
                ..d()
            },
        ),
        (
            "proactive; holdtroughs=keep",
            ProactiveConfig {
                hold_yields_to_troughs: false,
                ..d()
            },
        ),
        (
            "proactive; scalein=steady",
            ProactiveConfig {
                scale_in_steady: true,
                ..d()
            },
        ),
        (
            "proactive; breachwhile=queued",
            ProactiveConfig {
                breach_while_growing: false,
                ..d()
            },
        ),
        (
            "proactive; peakat=need",
            ProactiveConfig {
                peak_at: PeakAt::Need,
                ..d()
            },
        ),
        (
            "proactive; peakwhen=halved",
            ProactiveConfig {
                peak_when_halved: true,
                ..d()
            },
        ),
        (
            "proactive; peaks=dropped",
            ProactiveConfig {
                peak_dropped_only: true,
                ..d()
            },
        ),
        (
            "proactive; tail=p95",
            ProactiveConfig {
                tail_lighter: false,
                ..d()
            },
        ),
        (
            "proactive; periods=1.5",
            ProactiveConfig {
                pattern_periods: 1.5,
                ..d()
            },
        ),
        (
            "proactive; early=0",
            ProactiveConfig {
                pattern_early: 0.0,
                ..d()
            },
        ),
        (
            "proactive; levels=0.5",
            ProactiveConfig {
                pattern_levels: 0.5,
                ..d()
            },
        ),
        ("proactive; levels=0", d()),
        ("proactive; probe=0", ProactiveConfig { probe: 0.0, ..d() }),
        (
            "proactive; probecap=1.25",
            ProactiveConfig {
                probe_cap: 1.25,
                ..d()
            },
        ),
        (
            "proactive; probecap=0",
            ProactiveConfig {
                probe_cap: 0.0,
                ..d()
            },
        ),
        ("proactive; probecap=1.5", d()),
        (
            "proactive; breachcap=probe",
            ProactiveConfig {
                breach_cap: BreachCap::Probe,
                ..d()
            },
        ),
        (
            "proactive; breachcap=estimate",
            ProactiveConfig {
                breach_cap: BreachCap::Estimate,
                ..d()
            },
        ),
        ("proactive; breachcap=off", d()),
        (
            "proactive; itltest=mean",
            ProactiveConfig {
                itl_test: ItlTest::Mean,
                ..d()
            },
        ),
        (
            "proactive; itltest=request",
            ProactiveConfig {
                itl_test: ItlTest::Request,
                ..d()
            },
        ),
        ("proactive; itltest=p95", d()),
        (
            "proactive; backstopitl=test",
            ProactiveConfig {
                backstop_itl_test: true,
                ..d()
            },
        ),
        ("proactive; backstopitl=p95", d()),
        (
            "proactive; saturated=0.9",
            ProactiveConfig {
                saturated: 0.9,
                ..d()
            },
        ),
        (
            "proactive; saturated=0",
            ProactiveConfig {
                saturated: 0.0,
                ..d()
            },
        ),
        ("proactive; saturated=0.8", d()),
        (
            "proactive; saturation=queued",
            ProactiveConfig {
                saturation_queued: true,
                ..d()
            },
        ),
        ("proactive; saturation=window", d()),
        (
            "proactive; untested=2",
            ProactiveConfig {
                untested_bound: 2.0,
                ..d()
            },
        ),
        ("proactive; untested=0", d()),
        (
            "proactive; breachedif=untested",
            ProactiveConfig {
                breached_if: BreachLesson::Untested,
                ..d()
            },
        ),
        (
            "proactive; breachedif=above",
            ProactiveConfig {
                breached_if: BreachLesson::Above,
                ..d()
            },
        ),
        (
            "proactive; breachedif=always",
            ProactiveConfig {
                breached_if: BreachLesson::Always,
                ..d()
            },
        ),
        ("proactive; breachedif=light", d()),
        (
            "proactive; inherit=verified",
            ProactiveConfig {
                inherit_verified: true,
                ..d()
            },
        ),
        ("proactive; inherit=estimate", d()),
        (
            "proactive; floorat=estimate",
            ProactiveConfig {
                floor_at_estimate: true,
                ..d()
            },
        ),
        ("proactive; floorat=named", d()),
        (
            "proactive; breached=0",
            ProactiveConfig {
                breached: 0.0,
                ..d()
            },
        ),
        ("proactive; breached=0.8", d()),
        ("proactive; served=finished", d()),
        (
            "proactive; served=completed",
            ProactiveConfig {
                served_completed: true,
                ..d()
            },
        ),
        ("proactive; startups=ask", d()),
        ("proactive; hindsight=floor", d()),
        ("proactive; trendcap=pattern", d()),
        ("proactive; troughs=pattern", d()),
        ("proactive; ceiling=seen", d()),
        ("proactive; backstopstep=0", d()),
        (
            "proactive; floorlapse=3600",
            ProactiveConfig {
                floor_lapse_seconds: 3600.0,
                ..d()
            },
        ),
        (
            "proactive; oursby=counted",
            ProactiveConfig {
                ours_counted: true,
                ..d()
            },
        ),
        (
            "proactive; missprice=5",
            ProactiveConfig {
                miss_price: 5.0,
                ..d()
            },
        ),
        (
            "proactive; lapsegap=2",
            ProactiveConfig {
                lapse_gap_factor: 2.0,
                ..d()
            },
        ),
        (
            "proactive; lapsegapmax=7200",
            ProactiveConfig {
                lapse_gap_max_seconds: 7200.0,
                ..d()
            },
        ),
        (
            "proactive; confirm=30",
            ProactiveConfig {
                confirm_seconds: 30.0,
                ..d()
            },
        ),
        (
            "proactive; breachload=0.5",
            ProactiveConfig {
                breach_load: 0.5,
                ..d()
            },
        ),
        (
            "proactive; period=best",
            ProactiveConfig {
                period_pick: PeriodPick::Best,
                ..d()
            },
        ),
        (
            "proactive; period=fundamental",
            ProactiveConfig {
                period_pick: PeriodPick::Fundamental,
                ..d()
            },
        ),
        ("proactive; period=divisor", d()),
        (
            "proactive; backstopstep=2",
            ProactiveConfig {
                backstop_step: 2,
                ..d()
            },
        ),
        (
            "proactive; ceiling=breach",
            ProactiveConfig {
                ceiling: Ceiling::Breach,
                ..d()
            },
        ),
        (
            "proactive; ceiling=history",
            ProactiveConfig {
                ceiling: Ceiling::History,
                ..d()
            },
        ),
        (
            "proactive; ceiling=at99",
            ProactiveConfig {
                ceiling: Ceiling::At99,
                ..d()
            },
        ),
        ("proactive; troughs=pattern; ahead=2", d()),
        ("proactive; floorsize=largest", d()),
        ("proactive; named=at99", d()),
        ("proactive; holdtroughs=pattern", d()),
        ("proactive; peak=1800", d()),
        ("proactive; peakat=limit", d()),
        (
            "proactive; peakat=full",
            ProactiveConfig {
                peak_at: PeakAt::Full,
                ..d()
            },
        ),
        ("proactive; hindsightat=estimate", d()),
        (
            "proactive; hindsightat=need",
            ProactiveConfig {
                hindsight_at: HindsightAt::Need,
                ..d()
            },
        ),
        ("proactive; arrivals=rate", d()),
        (
            "proactive; arrivals=count",
            ProactiveConfig {
                arrivals: Arrivals::Count,
                ..d()
            },
        ),
        (
            "proactive; arrivals=history",
            ProactiveConfig {
                arrivals: Arrivals::History,
                ..d()
            },
        ),
        ("proactive; trendreach=horizon", d()),
        (
            "proactive; trendreach=history",
            ProactiveConfig {
                trend_reach_history: true,
                ..d()
            },
        ),
        ("proactive; ramp=recent", d()),
        (
            "proactive; ramp=halves",
            ProactiveConfig {
                ramp_in_halves: true,
                ..d()
            },
        ),
        (
            "proactive; hindsightat=limit",
            ProactiveConfig {
                hindsight_at: HindsightAt::Limit,
                ..d()
            },
        ),
        ("proactive; peakwhen=any", d()),
        ("proactive; peaks=any", d()),
        ("proactive; breachwhile=growing", d()),
        ("proactive; scalein=any", d()),
        ("proactive; periods=2", d()),
        ("proactive; early=1.5", d()),
        ("proactive; probe=0.03", d()),
        ("proactive; tail=lighter", d()),
    ] {
        assert_eq!(parse_policy(value), Ok(Some(expected)), "{value}");
    }
    assert_eq!(
        parse_policy("proactive; breach=any"),
        Ok(Some(ProactiveConfig::default()))
    );
    assert_eq!(
        parse_policy("proactive; hold=3"),
        Ok(Some(ProactiveConfig::default()))
    );
    assert_eq!(
        parse_policy("proactive; release=120; rise=90"),
        Ok(Some(ProactiveConfig {
            release_seconds: 120.0,
            rise_seconds: 90.0,
            ..ProactiveConfig::default()
        }))
    );
    for bad in [
        "",
        "reactive",
        "proactive; release=-1",
        "proactive; rise=x",
        "proactive; release=100000",
        "guide; utilization=0.5",
        "proactive; utilization=1.5",
        "proactive; capacity=-1",
        "proactive; capacity",
        "proactive; speed=2",
        "proactive; capacity=0",
        "proactive; peak=-1",
        "proactive; drain=x",
        "proactive; trend=2",
        "proactive; backstop=never",
        "proactive; periodic=yes",
        "proactive; backlog=1.5",
        "proactive; backlog=-1",
        "proactive; backstopstep=1.5",
        "proactive; floorlapse=-1",
        "proactive; missprice=-1",
        "proactive; oursby=both",
        "proactive; missprice=2000000",
        "proactive; lapsegap=11",
        "proactive; lapsegap=-1",
        "proactive; lapsegapmax=86401",
        "proactive; lapsegapmax=-1",
        "proactive; confirm=601",
        "proactive; confirm=-1",
        "proactive; breachload=1.5",
        "proactive; breachload=-0.1",
        "proactive; breachload=some",
        "proactive; period=shortest",
        "proactive; backstopstep=21",
        "proactive; settle=yes",
        "proactive; hold=-1",
        "proactive; hold=101",
        "proactive; hold=x",
        "proactive; onset=-5",
        "proactive; onset=3601",
        "proactive; breach=queue",
        "proactive; startups=all",
        "proactive; breach=",
        "proactive; attainment=0",
        "proactive; attainment=1.5",
        "proactive; attainment=95%",
        "proactive; shares=itl",
        "proactive; hindsight=on",
        "proactive; trendcap=on",
        "proactive; troughs=off",
        "proactive; ceiling=on",
        "proactive; ceiling=always",
        "proactive; floorsize=smallest",
        "proactive; named=smallest",
        "proactive; holdtroughs=on",
        "proactive; scalein=never",
        "proactive; periods=1",
        "proactive; periods=5",
        "proactive; early=1",
        "proactive; early=5",
        "proactive; early=-1",
        "proactive; levels=1.5",
        "proactive; levels=-0.5",
        "proactive; ahead=0.5",
        "proactive; ahead=11",
        "proactive; probe=0.2",
        "proactive; probe=-0.01",
        "proactive; probecap=0.5",
        "proactive; probecap=5",
        "proactive; breachcap=on",
        "proactive; peaks=some",
        "proactive; saturated=1.5",
        "proactive; peakat=most",
        "proactive; hindsightat=full",
        "proactive; arrivals=counted",
        "proactive; ramp=both",
        "proactive; trendreach=forever",
        "proactive; saturated=-0.1",
        "proactive; saturated=most",
        "proactive; served=all",
        "proactive; itltest=median",
        "proactive; backstopitl=on",
        "proactive; saturation=always",
        "proactive; untested=0.5",
        "proactive; untested=21",
        "proactive; untested=-1",
        "proactive; breached=1.5",
        "proactive; breached=-0.1",
    ] {
        let e = parse_policy(bad).unwrap_err();
        assert!(e.contains("expected"), "{bad:?}: {e}");
    }
    // A setting with named values lists them.
    for (bad, words) in [
        ("itltest=median", "is not `p95`, `mean` or `request`"),
        ("breachcap=on", "is not `off`, `probe` or `estimate`"),
        (
            "settle=yes",
            "is not `on`, `off`, `steady`, `band` or `stay`",
        ),
    ] {
        let e = parse_policy(&format!("proactive; {bad}")).unwrap_err();
        assert!(e.contains(words), "{bad}: {e}");
    }
}

#[test]
fn a_measured_capacity_is_written_as_a_setting_the_parser_reads_back() {
    for (x, text) in [
        (1.421_347, "capacity=1.421"),
        (25.0, "capacity=25.00"),
        (1234.5, "capacity=1234"),
        (0.000_142_13, "capacity=0.0001421"),
    ] {
        let written = capacity_setting(x);
        assert_eq!(written, text);
        let policy = parse_policy(&format!("proactive; {written}"))
            .expect("the metadata reads it")
            .expect("proactive");
        let read = policy.capacity_per_replica.expect("a capacity prior");
        assert!((read / x - 1.0).abs() < 1e-3, "{x} written as {written}");
    }
}

#[test]
fn a_rising_trend_scales_up_before_any_latency_breaks() {
    // 10 req/s per replica at the SLO, sized at 80 %: 8 req/s per replica.
    let mut r = Run::new("proactive; capacity=10; startup=300", 2);
    let mut first_up = None;
    for t in (0..=900).step_by(2) {
        let rps = 12.0 + 0.02 * t as f64; // 12 -> 30 req/s over 15 minutes
        let d = r.at(t, &fleet(2, rps, 20.0));
        assert!(!d.reason.is_scale_out(), "no guide trigger fires: {d:?}");
        if d.target_replicas > 2 && first_up.is_none() {
            first_up = Some((t, d));
        }
    }
    let (t, d) = first_up.expect("scaled up");
    // The demand itself reaches 16 req/s (2 replicas at 80 %) at t = 200 s; the forecast over
    // 300 s sees it earlier, once the trend window is a third full (100 s).
    assert!(t < 200, "up at {t} s: {d:?}");
    assert!(d.explanation.contains("forecast"), "{}", d.explanation);
    assert!(d.explanation.contains("in 300 s"), "{}", d.explanation);
    assert!(
        d.explanation
            .contains("capacity 10 req/s per replica (prior) at 80 %")
    );
}

/// The fleet of 2 saturated at 20 req/s while arrivals jump to 60 req/s at `from`: the
/// backlog grows by 40 requests per second.
fn saturated(t: u64, from: u64) -> FleetSignals {
    fleet(2, 20.0, 20.0 + 40.0 * t.saturating_sub(from) as f64)
}

/// A fleet of `ready` replicas finishing `rps` requests per second with `queue` waiting and
/// `s` with `aborted` of its finished requests per second finished aborted (clients that gave
/// up) and the rest stopped.
fn with_aborted(mut s: FleetSignals, aborted: f64) -> FleetSignals {
    let finished = s.fleet.requests_per_second.unwrap_or(0.0);
    s.fleet.finished_per_second_by_reason = [
        ("abort".to_owned(), aborted),
        ("stop".to_owned(), finished - aborted),
    ]
    .into();
    s
}

/// P95 TTFT at 5 s, far over its SLO: every replica busy.
fn queued(ready: usize, rps: f64, queue: f64) -> FleetSignals {
    let mut s = fleet(ready, rps, 8.0 * ready as f64);
    s.fleet.queue_depth = queue;
    s.fleet.ttft_seconds.p95 = Some(5.0);
    s
}

#[test]
fn a_saturated_fleet_teaches_capacity_unless_saturated_is_off() {
    // Two replicas kept above their need (a floor) showed 3 req/s each; the estimate is 6. A
    // burst then queues on them, and they finish 13 req/s each.
    let run = |metadata: &str, aborted: f64| {
        let mut r = Run::new(metadata, 2);
        for t in (0..=120).step_by(2) {
            r.at(t, &fleet(2, 6.0, 4.0));
        }
        let mut burst = queued(2, 26.0, 60.0);
        if aborted > 0.0 {
            burst = with_aborted(burst, aborted);
        }
        (122..=240)
            .step_by(2)
            .map(|t| (t, r.at(t, &burst)))
            .collect::<Vec<_>>()
    };
    let off = run(
        "proactive; capacity=6; startup=300; peak=0; saturated=0",
        0.0,
    );
    let on = run(
        "proactive; capacity=6; startup=300; peak=0; saturated=0.9",
        0.0,
    );
    let taught = on
        .iter()
        .find(|(_, d)| d.explanation.contains("a saturated fleet served"));
    let (t, d) = taught.expect("the estimate learned from the saturated fleet");
    // Not before the queue has lasted the stable part of the rate window (50 s).
    assert!(*t >= 172, "at {t} s: {}", d.explanation);
    assert!(
        d.explanation.contains(
            "capacity 11.7 req/s per replica (learned: 90 % of the 13 req/s per replica a saturated fleet served)"
        ),
        "{}",
        d.explanation
    );
    // The same backlog asks for fewer replicas at the higher estimate.
    let last = |v: &[(u64, Decision)]| v.last().unwrap().1.target_replicas;
    assert!(last(&on) < last(&off), "{} vs {}", last(&on), last(&off));
    assert!(
        off.iter()
            .all(|(_, d)| !d.explanation.contains("saturated fleet")),
        "off"
    );
    let default = run("proactive; capacity=6; startup=300; peak=0", 0.0);
    assert!(
        default
            .last()
            .unwrap()
            .1
            .explanation
            .contains("capacity 10.4 req/s per replica (learned: 80 % of the 13 req/s per replica"),
        "{}",
        default.last().unwrap().1.explanation
    );
    // Under `saturation=queued` the queue teaches from its first decision, before it has
    // lasted the window.
    let queued_now = run(
        "proactive; capacity=6; startup=300; peak=0; saturated=0.9; saturation=queued",
        0.0,
    );
    let (t, d) = queued_now
        .iter()
        .find(|(_, d)| d.explanation.contains("a saturated fleet served"))
        .expect("the estimate learned from the queue at once");
    assert_eq!(*t, 122, "{}", d.explanation);
    // Clients that gave up in the queue finish too (reason abort), but were not served: of 26
    // finished per second, 6 aborted, so the replicas completed 10 each.
    let aborted = run(
        "proactive; capacity=6; startup=300; peak=0; saturated=0.9",
        6.0,
    );
    let (_, d) = aborted.last().unwrap();
    assert!(
        d.explanation
            .contains("capacity 9 req/s per replica (learned: 90 % of the 10 req/s per replica"),
        "{}",
        d.explanation
    );
}

/// Two replicas serving 1 req/s each for five minutes from the cold start (the estimate is
/// what that light load showed, unless `metadata` sets a prior), then `crowd` for two: the
/// decisions during the crowd.
fn light_then(metadata: &str, crowd: &FleetSignals) -> Vec<(u64, Decision)> {
    let mut r = Run::new(metadata, 2);
    for t in (0..=300).step_by(2) {
        r.at(t, &fleet(2, 2.0, 1.0));
    }
    (302..=420)
        .step_by(2)
        .map(|t| (t, r.at(t, crowd)))
        .collect()
}

#[test]
fn under_untested_a_light_loads_estimate_asks_for_at_most_k_times_the_ready_replicas() {
    // A burst queues on the light load's two replicas; they finish 8 req/s each.
    let run = |metadata: &str| light_then(metadata, &queued(2, 16.0, 40.0));
    let tested_at = |v: &[(u64, Decision)]| {
        v.iter()
            .find(|(_, d)| d.explanation.contains("a saturated fleet served"))
            .map(|(t, _)| *t)
            .expect("the queue tests the estimate once it has lasted the window")
    };
    let most_before = |v: &[(u64, Decision)], until: u64| {
        v.iter()
            .filter(|(t, _)| *t < until)
            .map(|(_, d)| d.target_replicas)
            .max()
            .unwrap()
    };
    let default = run("proactive; startup=300; peak=0");
    let untested = run("proactive; startup=300; peak=0; untested=2");
    let at = tested_at(&untested);
    assert_eq!(
        at,
        tested_at(&default),
        "the bound does not delay the lesson"
    );
    // Before the test the default sizes the burst from 1 req/s per replica; the bound asks
    // for at most twice the two ready replicas, and says why.
    assert!(most_before(&default, at) > 4, "{default:?}");
    assert_eq!(most_before(&untested, at), 4);
    let (_, d) = untested.iter().find(|(t, _)| *t == at - 2).unwrap();
    assert!(
        d.explanation.contains(
            "need capped at 4 replicas (2 times the 2 ready, at least one more): the capacity estimate has met no replica's limit yet"
        ),
        "{}",
        d.explanation
    );
    // Once tested, the bound is gone and both size the burst alike.
    let (_, d) = untested.last().unwrap();
    assert!(
        !d.explanation.contains("need capped at"),
        "{}",
        d.explanation
    );
    // A prior is a tested estimate: nothing is bounded.
    let prior = run("proactive; capacity=1; startup=300; peak=0; untested=2");
    assert!(never_says(&prior, "untested="), "{prior:?}");
}

#[test]
fn under_breached_replicas_that_breach_above_a_light_loads_estimate_teach_it() {
    // A crowd comes to the light load's two replicas: they serve 13 req/s each with P95 TTFT
    // over its SLO and no queue.
    let mut crowd = fleet(2, 26.0, 16.0);
    crowd.fleet.ttft_seconds.p95 = Some(5.0);
    let run = |metadata: &str| light_then(metadata, &crowd);
    let last = |v: &[(u64, Decision)]| v.last().unwrap().1.clone();
    let without = last(&run("proactive; startup=300; peak=0; breached=0"));
    let breached = last(&run("proactive; startup=300; peak=0; breached=0.8"));
    // The default since the fifty-ninth round: this breach is the first to test the light
    // load's estimate (`breachedif=light`).
    let default = last(&run("proactive; startup=300; peak=0"));
    assert_eq!(default.target_replicas, breached.target_replicas);
    assert!(
        breached.explanation.contains(
            "capacity 10.4 req/s per replica (learned: 80 % of the 13 req/s per replica completed through a sustained breach (breached))"
        ),
        "{}",
        breached.explanation
    );
    // Without the lesson the light load's estimate stays and sizes the crowd.
    assert!(
        without.target_replicas > breached.target_replicas + 4,
        "{} vs {}",
        without.target_replicas,
        breached.target_replicas
    );
    assert_eq!(without.target_replicas, 20, "{}", without.explanation);
}

#[test]
fn under_served_completed_aborted_requests_teach_no_capacity() {
    // One replica within its SLOs finishes 12 req/s, 4 of them aborted (clients that gave
    // up): it served 8.
    let s = with_aborted(fleet(1, 12.0, 2.0), 4.0);
    let learn = |metadata: &str| {
        let mut r = Run::new(metadata, 1);
        for t in (0..=120).step_by(2) {
            r.at(t, &s);
        }
        r.proactive.capacity()
    };
    assert_eq!(
        learn("proactive; capacity=6"),
        Some(12.0),
        "finished by default"
    );
    assert_eq!(learn("proactive; capacity=6; served=completed"), Some(8.0));
}

#[test]
fn one_step_up_to_the_need() {
    let mut r = Run::new("proactive; capacity=10; startup=300", 2);
    for t in (0..=60).step_by(2) {
        r.at(t, &fleet(2, 10.0, 20.0));
    }
    // Within the minute the growth window needs, the demand reads 60 req/s: 60 / 8 = 7.5 -> 8.
    let mut last = 2;
    let mut steps = Vec::new();
    for t in (62..=122).step_by(2) {
        let d = r.at(t, &saturated(t, 60));
        if d.target_replicas != last {
            steps.push((t, last, d.target_replicas, d.explanation.clone()));
            last = d.target_replicas;
        }
    }
    assert!(last >= 8, "{steps:?}");
    assert!(steps.len() <= 8, "{steps:?}");
    assert!(
        steps[0].3.contains("one step up to the need: target 2 ->"),
        "{steps:?}"
    );
}

#[test]
fn capacity_still_starting_is_withdrawn_when_no_longer_needed() {
    let mut r = Run::new("proactive; capacity=10; startup=300; peak=0", 2);
    for t in (0..=60).step_by(2) {
        r.at(t, &fleet(2, 10.0, 20.0));
    }
    let mut up = 2;
    for t in (62..=80).step_by(2) {
        up = r.at(t, &saturated(t, 60)).target_replicas;
    }
    assert!(up > 2);
    // The burst was a blip: back to 10 req/s; the asked-for replicas are still starting.
    let mut last = up;
    let mut withdrawn_at = None;
    for t in (82..=400).step_by(2) {
        let d = r.at(t, &fleet(2, 10.0, 20.0));
        if d.target_replicas < last && withdrawn_at.is_none() {
            withdrawn_at = Some(t);
            assert!(
                d.explanation
                    .contains("still starting are no longer needed"),
                "{d:?}"
            );
        }
        last = d.target_replicas;
    }
    let t = withdrawn_at.expect("withdrawn");
    assert!(
        t >= 80 + 60,
        "withdrawn only after the need stayed low for 60 s: {t}"
    );
    assert_eq!(last, 2);
}

#[test]
fn scale_in_goes_to_the_need_in_one_step_after_the_calm_period() {
    let mut r = Run::new("proactive; capacity=10; startup=300; release=0", 10);
    let mut downs = Vec::new();
    let mut last = 10;
    for t in (0..=900).step_by(2) {
        let d = r.at(t, &fleet(10, 12.0, 10.0)); // needs 2 replicas at 80 %
        if d.target_replicas != last {
            downs.push((t, last, d.target_replicas, d.reason));
            last = d.target_replicas;
        }
    }
    assert_eq!(downs.len(), 1, "{downs:?}");
    let (t, from, to, reason) = downs[0];
    assert_eq!((from, to, reason), (10, 2, Reason::ScaleInCalm));
    assert!(t >= 300, "only after the 300 s calm period: {t}");
}

#[test]
fn the_guides_triggers_stay_as_a_backstop() {
    // The prior overstates capacity (100 req/s per replica): the forecast asks for nothing,
    // but a queue of 200 over 2 replicas is the guide's queue trigger, after its 30 s. The
    // queue stands (neither grows nor drains): `backstop=always` follows it (the default,
    // `growing`, follows only a growing one: `a_growing_backstop_...` below).
    let mut r = Run::new("proactive; capacity=100; startup=300; backstop=always", 2);
    let mut s = fleet(2, 10.0, 20.0);
    s.fleet.queue_depth = 200.0;
    let mut up = None;
    for t in (0..=60).step_by(2) {
        let d = r.at(t, &s);
        if d.target_replicas > 2 && up.is_none() {
            up = Some(d);
        }
    }
    let d = up.expect("the queue trigger scaled out");
    assert_eq!(d.reason, Reason::QueueDepth, "{d:?}");
    assert!(d.explanation.contains("forecast"), "{}", d.explanation);
}

#[test]
fn under_backstopstep_the_backstop_adds_at_most_k_while_the_need_is_met() {
    // The prior says one replica carries the demand; 3 are ready and a standing queue fires
    // the guide's queue trigger. The guide steps 3 -> 5; with `backstopstep=1` the backstop
    // takes one replica and says why.
    let first_step = |metadata: &str| {
        let mut r = Run::new(metadata, 3);
        let mut s = fleet(3, 5.0, 2.0);
        s.fleet.queue_depth = 200.0;
        (0..=120)
            .step_by(2)
            .map(|t| r.at(t, &s))
            .find(|d| d.target_replicas > 3)
            .expect("the queue trigger scales out")
    };
    let metadata = "proactive; capacity=100; startup=300; backstop=always";
    let guide = first_step(metadata);
    assert_eq!(guide.target_replicas, 5, "{}", guide.explanation);
    assert!(
        !guide.explanation.contains("backstopstep"),
        "{}",
        guide.explanation
    );
    assert_decides(
        &first_step(&format!("{metadata}; backstopstep=1")),
        4,
        "the backstop steps to 4, not the guide's 5: the demand's need of 1 is within the target of 3 (backstopstep=1)",
    );
    // A need above the target (a burst) leaves the guide's step as it is.
    let burst = first_step("proactive; capacity=1; startup=300; backstop=always; backstopstep=1");
    assert!(burst.target_replicas >= 5, "{}", burst.explanation);
}

#[test]
fn the_backstops_step_is_not_withdrawn_while_its_breach_is_recent() {
    // The prior overstates capacity: the forecast needs 1 replica, the queue trigger asks for
    // more. Those replicas are still starting (1 ready) while the queue stays; they must not
    // be withdrawn the next decision (which would restart their start-up), only 60 s after the
    // last breach.
    // A standing queue: followed with `backstop=always`.
    let mut r = Run::new("proactive; capacity=100; startup=300; backstop=always", 1);
    let mut s = fleet(1, 5.0, 2.0);
    s.fleet.queue_depth = 100.0;
    let mut highest = 1;
    let mut lowered_while_queued = Vec::new();
    for t in (0..=120).step_by(2) {
        let d = r.at(t, &s);
        if d.target_replicas < highest {
            lowered_while_queued.push((t, d.target_replicas, d.explanation));
        }
        highest = highest.max(d.target_replicas);
    }
    assert!(highest > 1, "the queue trigger scaled out");
    assert!(lowered_while_queued.is_empty(), "{lowered_while_queued:?}");
    // The queue is gone at 122 s: kept for 60 s after the last breach, explained, then
    // withdrawn to the need.
    s.fleet.queue_depth = 0.0;
    let mut withdrawn_at = None;
    for t in (122..=300).step_by(2) {
        let d = r.at(t, &s);
        if t < 170 {
            assert_eq!(d.target_replicas, highest, "{t}: {d:?}");
        }
        if t == 150 {
            assert!(
                d.explanation.contains("are kept although the need is 1")
                    && d.explanation.contains("the guide's backstop asked for"),
                "{d:?}"
            );
        }
        if d.target_replicas < highest && withdrawn_at.is_none() {
            withdrawn_at = Some(t);
            assert!(d.explanation.contains("no longer needed"), "{d:?}");
            assert_eq!(d.target_replicas, 1, "{d:?}");
        }
    }
    let t = withdrawn_at.expect("withdrawn once the breach is a minute old");
    assert!((180..=184).contains(&t), "withdrawn at {t}");
}

#[test]
fn without_a_prior_capacity_is_learned_and_until_then_the_guide_decides() {
    let mut r = Run::new("proactive", 2);
    let mut s = fleet(2, 20.0, 20.0);
    s.fleet.ttft_seconds.p95 = Some(5.0); // breaking the SLO: nothing learned
    let d = r.at(0, &s);
    assert!(d.explanation.contains("no capacity estimate yet"), "{d:?}");
    assert_eq!(r.proactive.capacity(), None);
    // A throughput teaches capacity once the ready replicas stayed the same for 50 s.
    for t in (2..50).step_by(2) {
        r.at(t, &fleet(2, 20.0, 20.0));
    }
    assert_eq!(r.proactive.capacity(), None);
    r.at(50, &fleet(2, 20.0, 20.0));
    assert_eq!(r.proactive.capacity(), Some(10.0));
    let d = r.at(52, &fleet(2, 20.0, 20.0));
    assert!(d.explanation.contains("(learned)"), "{d:?}");
}

#[test]
fn a_breach_right_after_replicas_arrive_does_not_lower_capacity() {
    // 2 replicas at 10 req/s each within the SLO; 4 more arrive while the backlog of the
    // shortage is still served: the rate still counts the 2 replicas' work (20 req/s over 6,
    // 3.3 per replica) and TTFT breaks its SLO. That says nothing about capacity...
    let mut r = Run::new("proactive; capacity=10; startup=300", 6);
    for t in (0..=60).step_by(2) {
        r.at(t, &fleet(2, 20.0, 20.0));
    }
    let mut late = fleet(6, 20.0, 20.0);
    late.fleet.ttft_seconds.p95 = Some(5.0);
    late.fleet.queue_depth = 30.0;
    for t in (62..=100).step_by(2) {
        r.at(t, &late);
    }
    assert_eq!(r.proactive.capacity(), Some(10.0));
    // ...but the same breach with 6 replicas ready for a whole minute does.
    for t in (102..=200).step_by(2) {
        r.at(t, &late);
    }
    let c = r.proactive.capacity().unwrap();
    assert!(c < 10.0, "{c}");
}

/// Five minutes of the same signals, every 2 s, from a level of 4: the capacity estimate after
/// them and the last decision.
fn capacity_after_five_minutes(metadata: &str, s: &FleetSignals) -> (f64, Decision) {
    let mut r = Run::new(metadata, 4);
    let last = r.steady(300, s);
    (r.proactive.capacity().unwrap(), last)
}

#[test]
fn under_breach_queued_a_ttft_breach_without_a_queue_is_not_counted_against_capacity() {
    // Four replicas at 8 req/s each, ITL within its SLO, nothing waiting, and a P95 TTFT of
    // 3 s (long prompts' own prefill) for five minutes.
    let mut long_prompts = fleet(4, 32.0, 40.0);
    long_prompts.fleet.ttft_seconds.p95 = Some(3.0);
    let run = capacity_after_five_minutes;
    // By default such a breach, sustained, lowers the estimate towards 8...
    let (c, _) = run("proactive; capacity=10; startup=300", &long_prompts);
    assert!(c < 10.0, "{c}");
    // ...under `breach=queued` it does not, and the decision says why.
    let (c, d) = run(
        "proactive; capacity=10; startup=300; breach=queued",
        &long_prompts,
    );
    assert_eq!(c, 10.0);
    assert!(
        d.explanation
            .contains("P95 TTFT 3 s over the SLO of 2 s with no queue: the prompts' own prefill"),
        "{}",
        d.explanation
    );
    // With requests waiting (beyond one per ready replica) the same breach counts again.
    let mut queued = long_prompts.clone();
    queued.fleet.queue_depth = 20.0;
    let (c, d) = run(
        "proactive; capacity=10; startup=300; breach=queued",
        &queued,
    );
    assert!(c < 10.0, "{c}");
    assert!(
        !d.explanation.contains("prompts' own prefill"),
        "{}",
        d.explanation
    );
    // An ITL breach counts without a queue, as before.
    let mut slow_decode = fleet(4, 32.0, 40.0);
    slow_decode.fleet.itl_seconds.p95 = Some(0.2);
    let (c, _) = run(
        "proactive; capacity=10; startup=300; breach=queued",
        &slow_decode,
    );
    assert!(c < 10.0, "{c}");
}

/// TTFT buckets (vLLM's bounds around the 2 s SLO) with `within` of 100 first tokens at or
/// below 1 s and the rest between 2.5 and 5 s: a P95 of 2.5 s or more whenever fewer than 95
/// are within.
fn ttft_buckets(within: f64) -> Vec<crate::signals::Bucket> {
    [
        (0.5, within / 2.0),
        (1.0, within),
        (2.5, within),
        (5.0, 100.0),
        (f64::INFINITY, 100.0),
    ]
    .into_iter()
    .map(|(le, count)| crate::signals::Bucket { le, count })
    .collect()
}

#[test]
fn under_attainment_a_share_of_requests_within_the_slo_is_what_capacity_holds_to() {
    // Four replicas at 8 req/s each, nothing waiting, ITL within its SLO; 92 of every 100
    // first tokens within 1 s and 8 over 2.5 s (long prompts): the P95 TTFT is over the 2 s
    // SLO, 92 % are within it. Five minutes of it.
    let mut mixed = fleet(4, 32.0, 40.0);
    mixed.fleet.ttft_buckets = ttft_buckets(92.0);
    mixed.fleet.ttft_seconds.p95 =
        crate::signals::histogram_quantile(0.95, &mixed.fleet.ttft_buckets);
    assert!(mixed.fleet.ttft_seconds.p95.unwrap() > 2.0);
    let run = capacity_after_five_minutes;
    // By default (P95 within the SLO) that is a sustained breach: the estimate falls to 8.
    let (c, _) = run("proactive; capacity=10; startup=300", &mixed);
    assert!(c < 10.0, "{c}");
    // Holding to 90 % within, 92 % is within the SLO: no breach (and the ITL's P95, above half
    // its SLO, leaves no room to probe upwards), and the decision shows the share it read.
    let (c, d) = run(
        "proactive; capacity=10; startup=300; attainment=0.9; shares=ttft",
        &mixed,
    );
    assert_eq!(c, 10.0);
    assert!(
        d.explanation
            .contains("; first tokens within the SLO: 92 % (capacity holds to 90 %)"),
        "{}",
        d.explanation
    );
    // Holding to 95 % it is the P95 test again: a breach.
    let (c, _) = run(
        "proactive; capacity=10; startup=300; attainment=0.95",
        &mixed,
    );
    assert!(c < 10.0, "{c}");
    // 85 % within breaks a 90 % hold.
    let mut worse = mixed.clone();
    worse.fleet.ttft_buckets = ttft_buckets(85.0);
    let (c, _) = run(
        "proactive; capacity=10; startup=300; attainment=0.9",
        &worse,
    );
    assert!(c < 10.0, "{c}");
}

/// A fleet of four with `within` of every 100 first tokens within the TTFT SLO, its P95 read
/// from the same buckets.
fn long_prompts(rps: f64, within: f64) -> FleetSignals {
    let mut s = fleet(4, rps, rps * 1.25);
    s.fleet.ttft_buckets = ttft_buckets(within);
    s.fleet.ttft_seconds.p95 = crate::signals::histogram_quantile(0.95, &s.fleet.ttft_buckets);
    s
}

/// Five minutes at light load (4 req/s on four replicas of a prior 10), then five minutes at
/// `busy`, every 2 s: the estimate after them and every decision.
fn light_then_busy(
    metadata: &str,
    light: &FleetSignals,
    busy: &FleetSignals,
) -> (f64, Vec<Decision>) {
    let mut r = Run::new(metadata, 4);
    let mut decisions: Vec<Decision> = (0..300).step_by(2).map(|t| r.at(t, light)).collect();
    decisions.extend((300..=600).step_by(2).map(|t| r.at(t, busy)));
    (r.proactive.capacity().unwrap(), decisions)
}

fn highest_target(decisions: &[Decision]) -> u32 {
    decisions.iter().map(|d| d.target_replicas).max().unwrap()
}

/// Whether the guide's TTFT trigger fired in any of `decisions` (followed or not).
fn ttft_trigger_fired(decisions: &[Decision]) -> bool {
    decisions
        .iter()
        .any(|d| d.reason == Reason::TtftSlo || d.explanation.contains("(ttft_slo)"))
}

#[test]
fn under_tail_lighter_a_ttft_tail_light_load_shows_too_is_no_breach_and_no_trigger() {
    let metadata = "proactive; capacity=10; startup=300; tail=p95";
    let lighter = "proactive; capacity=10; startup=300; tail=lighter";
    // 93 of every 100 first tokens within the SLO at 1 req/s per replica and at 8: a P95 over
    // the SLO at any load (the prompts' own prefill).
    let (light, busy) = (long_prompts(4.0, 93.0), long_prompts(32.0, 93.0));
    assert!(busy.fleet.ttft_seconds.p95.unwrap() > 2.0);
    // Under `tail=p95` (the default before section 37) the tail fires the guide's TTFT trigger
    // and lowers the estimate, to 1 req/s per replica within the light stretch, so the busy
    // one asks for the maximum of 20.
    let (c, decisions) = light_then_busy(metadata, &light, &busy);
    assert!(c < 1.5, "{c}");
    assert!(ttft_trigger_fired(&decisions));
    assert_eq!(highest_target(&decisions), 20);
    // Under `tail=lighter`, the default, light load's 93 % sets the bar at 91 %: neither, and
    // it says so. 32 req/s at 10 per replica and 80 % is 4 replicas; the step's rising trend
    // forecasts more for a few minutes, at most 10.
    let (c, decisions) = light_then_busy(lighter, &light, &busy);
    let default = light_then_busy("proactive; capacity=10; startup=300", &light, &busy);
    assert_eq!((c, &decisions), (default.0, &default.1));
    assert!(c >= 10.0, "{c}");
    // (Only in the first minute, before the fleet has been stable at light load, is the tail
    // the guide's as by default: its trigger fires once, at 30 s.)
    assert!(ttft_trigger_fired(&decisions[..30]));
    assert!(!ttft_trigger_fired(&decisions[30..]));
    let highest = highest_target(&decisions);
    assert!((4..=10).contains(&highest), "{highest}");
    let last = &decisions.last().unwrap().explanation;
    assert!(
        last.contains("P95 TTFT 3.21 s over the SLO is the tail light load shows too (93 % within, at least 91 %): no guide trigger (tail=lighter)"),
        "{last}"
    );
    // 85 % within at load is worse than light load's by more than the margin: a breach that
    // lowers the estimate (to the 8 req/s per replica it serves), and the guide reads the P95.
    let worse = long_prompts(32.0, 85.0);
    let (c, decisions) = light_then_busy(lighter, &light, &worse);
    assert!(c < 10.0, "{c}");
    assert!(
        decisions[150..]
            .iter()
            .all(|d| !d.explanation.contains("no guide trigger")),
    );
    assert!(
        decisions.last().unwrap().explanation.contains(
            "first tokens within the SLO: 85 %, at light load 93 %: a TTFT tail counts against capacity below 91 % (tail=lighter)"
        ),
        "{}",
        decisions.last().unwrap().explanation
    );
    // Where light load keeps 97 % or more within, `tail=lighter` is `tail=p95`, decision for
    // decision.
    let (light, busy) = (long_prompts(4.0, 98.0), long_prompts(32.0, 90.0));
    let (c_default, d_default) = light_then_busy(metadata, &light, &busy);
    let (c_lighter, d_lighter) = light_then_busy(lighter, &light, &busy);
    assert_eq!(c_default, c_lighter);
    assert!(c_default < 10.0, "{c_default}");
    assert_eq!(d_default, d_lighter);
}

#[test]
fn under_shares_ttft_the_inter_token_gaps_keep_their_p95_test() {
    // Every first token within 1 s; 97 of every 100 inter-token gaps within 50 ms and 3
    // between 100 and 250 ms: the P95 gap (49 ms) is within the 70 ms SLO, 97 % of the gaps
    // are. Four replicas at 8 req/s each for five minutes, prior 10.
    let mut s = fleet(4, 32.0, 40.0);
    s.fleet.ttft_buckets = ttft_buckets(100.0);
    s.fleet.itl_buckets = [
        (0.05, 97.0),
        (0.1, 97.0),
        (0.25, 100.0),
        (f64::INFINITY, 100.0),
    ]
    .into_iter()
    .map(|(le, count)| crate::signals::Bucket { le, count })
    .collect();
    s.fleet.itl_seconds.p95 = crate::signals::histogram_quantile(0.95, &s.fleet.itl_buckets);
    let run = |metadata: &str| capacity_after_five_minutes(metadata, &s);
    // Holding both to 99 %, 97 % of the gaps is a breach.
    let (c, d) = run("proactive; capacity=10; startup=300; attainment=0.99; shares=both");
    assert!(
        d.explanation
            .contains("; within the SLO: TTFT 100 %, ITL 97 % (capacity holds to 99 %)"),
        "{}",
        d.explanation
    );
    assert!(c < 10.0, "{c}");
    // First tokens only: 100 % within, and the gaps' P95 is within: no breach (and the P95
    // gap above half its SLO is no room to probe).
    let (c, d) = run("proactive; capacity=10; startup=300; attainment=0.99; shares=ttft");
    assert_eq!(c, 10.0);
    assert!(
        d.explanation
            .contains("; first tokens within the SLO: 100 % (capacity holds to 99 %)"),
        "{}",
        d.explanation
    );
}

#[test]
fn under_startups_each_every_replica_answers_the_oldest_ask() {
    // One replica ready; a demand of 30 req/s at 10 req/s per replica and 80 % asks for 4 at
    // once (t = 0). The three replicas arrive at 100, 200 and 300 s. A few requests wait
    // throughout, so the throughput per replica does not teach capacity: the prior stays
    // (`saturated=0`, since a queue that waits throughout is a saturated fleet's).
    let ready_at =
        |t: u64| 1 + usize::from(t >= 100) + usize::from(t >= 200) + usize::from(t >= 300);
    let signals = |t: u64| {
        let mut s = fleet(ready_at(t), 30.0, 30.0);
        s.fleet.queue_depth = 10.0;
        s
    };
    let mut r = Run::new("proactive; capacity=10; startups=each; saturated=0", 1);
    let mut first = None;
    for t in (0..=320).step_by(2) {
        let d = r.at(t, &signals(t));
        first.get_or_insert(d.desired_replicas);
    }
    assert_eq!(r.proactive.capacity(), Some(10.0));
    assert_eq!(first, Some(4));
    // Samples 100, 200 and 300 s: their mean, not the last (the ask answered) nor the first.
    assert_eq!(r.proactive.horizon_seconds(), 200.0);
    // Under `startups=ask` the same run learns the time to the whole ask.
    let mut r = Run::new("proactive; capacity=10; saturated=0", 1);
    for t in (0..=320).step_by(2) {
        r.at(t, &signals(t));
    }
    assert_eq!(r.proactive.horizon_seconds(), 300.0);
}

#[test]
fn the_start_up_time_is_learned_from_answered_asks() {
    let mut r = Run::new("proactive; capacity=10", 2);
    assert_eq!(r.proactive.horizon_seconds(), DEFAULT_STARTUP_SECONDS);
    for t in (0..=60).step_by(2) {
        r.at(t, &fleet(2, 10.0, 20.0));
    }
    let d = r.at(62, &saturated(62, 60));
    assert!(d.target_replicas > 2, "{d:?}");
    // The new replicas answer 120 s after the ask (the level may rise meanwhile).
    let mut up = d.target_replicas;
    for t in (64..182).step_by(2) {
        up = r.at(t, &fleet(2, 20.0, 100.0)).target_replicas;
    }
    r.at(182, &fleet(up as usize, 30.0, 20.0));
    assert_eq!(r.proactive.horizon_seconds(), 120.0);
}

#[test]
fn no_ready_replica_is_the_guides_no_data() {
    let mut r = Run::new("proactive; capacity=10", 3);
    let d = r.at(0, &FleetSignals::default());
    assert_eq!(d.reason, Reason::NoData);
    assert_eq!(d.target_replicas, 3);
}

#[test]
fn an_unknown_finished_rate_is_not_recorded_as_no_demand() {
    // A scaler restarts on 4 replicas serving 30 req/s: at its first scrape no pod's rate is
    // known yet.
    let mut r = Run::new("proactive; capacity=10; startup=300", 4);
    let mut first = fleet(4, 30.0, 60.0);
    first.fleet.requests_per_second = None;
    assert_decides(
        &r.at(0, &first),
        4,
        "; no demand sample recorded: the fleet's finished requests per second are not known yet (no pod scraped twice)",
    );
    // A hundred seconds on, the trend is flat: the unknown rate was no sample of 0 req/s
    // (recorded as one, it read +0.03 req/s per s and a forecast of 40.18 req/s, 6 replicas).
    let mut last = None;
    for t in (2..=100).step_by(2) {
        last = Some(r.at(t, &fleet(4, 30.0, 60.0)));
    }
    let d = last.unwrap();
    assert_decides(
        &d,
        4,
        "forecast 30 req/s in 300 s (start-up observed or set; trend +0 req/s per s",
    );
    assert!(
        !d.explanation.contains("no demand sample recorded"),
        "{}",
        d.explanation
    );
    // Nor a minute of 0 req/s in the history the next pod inherits: the first minute's mean
    // is the 30 req/s its known samples read (with the unknown one as 0, 29).
    let kept = r.proactive.persisted().demand_history;
    let first_minute = kept.iter().max_by_key(|m| m.seconds_ago()).unwrap();
    assert_eq!(first_minute.seconds_ago(), 100, "{kept:?}");
    assert_eq!(first_minute.1, 30.0, "{kept:?}");
}

/// Runs 2 replicas at 10 req/s, a burst that needs 8 (60 req/s) from 62 s to 120 s, then
/// 10 req/s again on however many replicas were asked for; the targets over time.
fn burst_then_calm(metadata: &str, until: u64) -> Vec<(u64, Decision)> {
    let mut r = Run::new(metadata, 2);
    let mut out = Vec::new();
    for t in (0..=60).step_by(2) {
        out.push((t, r.at(t, &fleet(2, 10.0, 20.0))));
    }
    let mut level = 2;
    for t in (62..=120).step_by(2) {
        let d = r.at(t, &saturated(t, 60));
        level = d.target_replicas;
        out.push((t, d));
    }
    // The replicas asked for are ready; the burst is over, its backlog served.
    for t in (122..=until).step_by(2) {
        let d = r.at(t, &fleet(level as usize, 10.0, 20.0));
        level = d.target_replicas;
        out.push((t, d));
    }
    out
}

#[test]
fn the_peak_floor_holds_capacity_for_a_recent_burst_then_releases_it() {
    // Without a floor, the calm period after the burst brings the fleet back to 2. (The
    // hindsight floor is off here: after half an hour it would name the 4 replicas that serve
    // the burst for less than the peak floor's 8.)
    let none = burst_then_calm(
        "proactive; capacity=10; startup=300; peak=0; release=0; hindsight=advice",
        1200,
    );
    let high = none.iter().map(|d| d.1.target_replicas).max().unwrap();
    assert!(high >= 8, "the burst scaled out: {high}");
    assert_eq!(none.last().unwrap().1.target_replicas, 2);
    // With a 30-minute floor: held at the burst's need until the window has passed.
    let floor = burst_then_calm(
        "proactive; capacity=10; startup=300; peak=1800; peakat=need; release=0; hindsight=advice",
        3000,
    );
    let at = |t: u64| floor.iter().find(|d| d.0 == t).unwrap().1.clone();
    let held = at(1200);
    assert!(held.target_replicas >= 8, "{held:?}");
    assert!(
        held.explanation.contains("floor: peak") && held.explanation.contains("(window 1800 s)"),
        "{}",
        held.explanation
    );
    let late = floor.last().unwrap().1.clone();
    assert_eq!(late.target_replicas, 2, "{late:?}");
    assert_eq!(late.reason, Reason::Hold);
    let down = floor
        .iter()
        .find(|d| d.1.target_replicas == 2 && d.0 > 120)
        .unwrap();
    // The burst's last minute (2) leaves the window at minute 33 (1980 s); then the calm
    // period (300 s) runs before the scale-in.
    assert!(
        (1980 + 300..=1980 + 400).contains(&down.0),
        "{}: {:?}",
        down.0,
        down.1
    );
    assert_eq!(down.1.reason, Reason::ScaleInCalm);
}

#[test]
fn under_peakat_full_the_peak_floor_holds_the_fleet_that_carries_the_peak_at_capacity() {
    let held = |metadata: &str| {
        let run = burst_then_calm(metadata, 1200);
        run.iter().find(|d| d.0 == 1200).unwrap().1.clone()
    };
    let need = held(
        "proactive; capacity=10; startup=300; peak=1800; peakat=need; release=0; hindsight=advice",
    );
    let full = held(
        "proactive; capacity=10; startup=300; peak=1800; peakat=full; release=0; hindsight=advice",
    );
    // The peak the floor read, from the explanation: "floor: peak X req/s".
    let peak = number_after(&full.explanation, "floor: peak ");
    assert!(peak > 40.0, "the burst's minute: {peak}");
    // At the capacity estimate (10 req/s) rather than at 80 % of it.
    assert_eq!(
        full.target_replicas,
        (peak / 10.0).ceil() as u32,
        "{full:?}"
    );
    assert_eq!(need.target_replicas, (peak / 8.0).ceil() as u32, "{need:?}");
    assert!(full.target_replicas < need.target_replicas);
    assert!(
        full.explanation
            .contains("at the full capacity estimate (peakat=full)"),
        "{}",
        full.explanation
    );
    assert!(!need.explanation.contains("peakat"), "{}", need.explanation);
}

/// A steady 60 req/s on 8 replicas for ten minutes, a decline to 40 req/s (two thirds of the
/// peak) for fifteen, then 10 req/s (a sixth): the decisions, every two seconds.
fn decline_then_drop(metadata: &str) -> Vec<(u64, Decision)> {
    let mut r = Run::new(metadata, 8);
    let mut out = Vec::new();
    let mut level = 8;
    for (from, to, rps) in [(0, 600, 60.0), (602, 1500, 40.0), (1502, 2100, 10.0)] {
        for t in (from..=to).step_by(2) {
            let d = r.at(t, &fleet(level as usize, rps, rps * 0.5));
            level = d.target_replicas;
            out.push((t, d));
        }
    }
    out
}

#[test]
fn under_peakwhen_halved_the_peak_floor_holds_only_once_the_demand_has_halved() {
    let settings = "proactive; capacity=10; startup=300; peak=1800; peakat=full; release=0; \
                    hindsight=advice; periodic=off";
    let any = decline_then_drop(settings);
    let halved = decline_then_drop(&format!("{settings}; peakwhen=halved"));
    // Fifteen minutes into the decline: under `any` the floor holds the peak's 6 replicas
    // (60 req/s at 10 each); under `halved` the demand (two thirds of the peak) sizes the fleet.
    let (a, h) = (decision_at(&any, 1500), decision_at(&halved, 1500));
    assert!(a.explanation.contains("floor: peak"), "{}", a.explanation);
    assert_eq!(a.target_replicas, 6, "{a:?}");
    assert!(h.target_replicas < a.target_replicas, "{h:?}");
    assert!(
        h.explanation
            .contains("is at least half its peak (peakwhen=halved)"),
        "{}",
        h.explanation
    );
    assert!(!h.explanation.contains("floor: peak"), "{}", h.explanation);
    // Once the demand has fallen below half the window's peak, the floor holds under both.
    let (a, h) = (decision_at(&any, 2100), decision_at(&halved, 2100));
    assert!(h.explanation.contains("floor: peak"), "{}", h.explanation);
    assert!(h.target_replicas >= 4, "{h:?}");
    assert_eq!(h.target_replicas, a.target_replicas, "{h:?} {a:?}");
}

#[test]
fn under_peaks_dropped_the_peak_floor_holds_only_a_peak_the_demand_fell_from() {
    let settings = "proactive; capacity=10; startup=300; peak=1800; peakat=full; release=0; \
                    hindsight=advice; periodic=off";
    let any = decline_then_drop(settings);
    let dropped = decline_then_drop(&format!("{settings}; peaks=dropped"));
    // Fifteen minutes into the decline from 60 to 40 req/s, which is not below half: under
    // `any` the floor holds the peak's 6 replicas; under `dropped` there is no floor.
    let (a, d) = (decision_at(&any, 1500), decision_at(&dropped, 1500));
    assert_eq!(a.target_replicas, 6, "{a:?}");
    assert!(d.target_replicas < a.target_replicas, "{d:?}");
    assert!(!d.explanation.contains("floor: peak"), "{}", d.explanation);
    // After the drop to 10 req/s, the 40 it fell from within ten minutes is held (4 replicas
    // at 10 req/s each); the 60, which fell only to 40, is not.
    let (a, d) = (decision_at(&any, 2100), decision_at(&dropped, 2100));
    assert_eq!(a.target_replicas, 6, "{a:?}");
    assert_eq!(d.target_replicas, 4, "{d:?}");
    assert!(
        d.explanation
            .contains("which the demand fell from to below half within 600 s (peaks=dropped)"),
        "{}",
        d.explanation
    );
}

#[test]
fn a_probe_at_its_bound_says_so() {
    // One replica serving 4 req/s with every P95 under half its SLO: without a bound the probe
    // reads it as twice that; by default it stops at 1.5 times what was served, and says so.
    let run = |metadata: &str| {
        let mut s = fleet(1, 4.0, 2.0);
        s.fleet.itl_seconds.p95 = Some(0.02);
        Run::new(metadata, 1).steady(600, &s)
    };
    let bounded = run("proactive; startup=300");
    assert!(
        bounded.explanation.contains(
            "capacity 6 req/s per replica (learned: probed up to 1.5 times the 4 req/s per replica served (probecap))"
        ),
        "{}",
        bounded.explanation
    );
    let free = run("proactive; startup=300; probecap=0");
    assert!(
        free.explanation.contains("per replica (learned)"),
        "{}",
        free.explanation
    );
    assert!(
        !free.explanation.contains("capacity 6 req/s"),
        "{}",
        free.explanation
    );
}

#[test]
fn under_breachcap_a_sustained_breach_stops_the_probe_from_climbing_back() {
    // Two replicas serve 8 req/s each within the SLO for ten minutes; then their P95 ITL
    // breaks its SLO at 7 each for 100 s, the in-flight requests steady; then at 6 each every
    // P95 is under half its SLO for ten minutes.
    let run = |metadata: &str| {
        let mut r = Run::new(metadata, 2);
        let mut last = None;
        for t in (0..=1_300).step_by(2) {
            let (rps, itl) = match t {
                0..600 => (16.0, 0.05),
                600..700 => (14.0, 0.09),
                _ => (12.0, 0.02),
            };
            let mut s = fleet(2, rps, 4.0);
            s.fleet.itl_seconds.p95 = Some(itl);
            last = Some(r.at(t, &s));
        }
        last.expect("decisions")
    };
    // By default the probe climbs back to its bound, 1.5 times the 8 served.
    let default = run("proactive; startup=300; peak=0");
    assert!(
        default.explanation.contains(
            "capacity 12 req/s per replica (learned: probed up to 1.5 times the 8 req/s per replica served (probecap))"
        ),
        "{}",
        default.explanation
    );
    // Under `breachcap=probe` the breach at 7 per replica stops it: the estimate stays where
    // the breach's corrections left it, between 7 and 8.
    let bounded = run("proactive; startup=300; peak=0; breachcap=probe");
    assert!(
        bounded.explanation.contains("capacity 7.")
            && bounded
                .explanation
                .contains("req/s per replica (learned) at 80 %"),
        "{}",
        bounded.explanation
    );
}

#[test]
fn under_itltest_the_capacity_estimate_tests_the_statistic_it_names() {
    // Two replicas serve 12 req/s each for ten minutes. The inter-token gaps' P95 is over the
    // 70 ms SLO, their mean well within it; each request's own time per output token has a
    // P95 of `request` (None: the engine does not expose it).
    let run = |metadata: &str, request: Option<f64>| {
        let mut r = Run::new(metadata, 2);
        let mut s = fleet(2, 24.0, 4.0);
        s.fleet.itl_seconds.p95 = Some(0.09);
        s.fleet.itl_mean_seconds = Some(0.04);
        s.fleet.request_tpot_seconds.p95 = request;
        r.steady(600, &s);
        let l = r.proactive.learned();
        (l.capacity_per_replica, l.capacity_source)
    };
    let base = "proactive; capacity=10; startup=300; peak=0";
    // By default the gaps' P95 is over its SLO: nothing is served within it, the prior stays.
    assert_eq!(run(base, Some(0.05)), (Some(10.0), "prior"));
    // Tested by the mean, or by the requests' own P95, the 12 per replica were within it.
    let learned = (Some(12.0), "learned");
    assert_eq!(run(&format!("{base}; itltest=mean"), None), learned);
    assert_eq!(
        run(&format!("{base}; itltest=request"), Some(0.05)),
        learned
    );
    // The requests' own P95 over the SLO is a breach above the estimate: the prior stays.
    assert_eq!(
        run(&format!("{base}; itltest=request"), Some(0.08)),
        (Some(10.0), "prior")
    );
    // Without the per-request histogram, `request` falls back to the gaps' P95.
    assert_eq!(
        run(&format!("{base}; itltest=request"), None),
        (Some(10.0), "prior")
    );
}

#[test]
fn under_backstopitl_test_the_guides_itl_trigger_reads_what_itltest_names() {
    // Two replicas serve 8 req/s each, far below the prior of 20: the inter-token gaps' P95
    // is over the 70 ms SLO, each request's own time per output token well within it.
    let run = |metadata: &str| {
        let mut r = Run::new(metadata, 2);
        let mut s = fleet(2, 16.0, 4.0);
        s.fleet.itl_seconds.p95 = Some(0.09);
        s.fleet.request_tpot_seconds.p95 = Some(0.05);
        r.steady(120, &s)
    };
    // (`backstop=always`: the guide's triggers are followed with the in-flight requests
    // steady too.)
    let base = "proactive; capacity=20; startup=300; peak=0; backstop=always; itltest=request";
    // By default the guide's trigger reads the gaps' P95 and scales out.
    let p95 = run(base);
    assert!(
        p95.target_replicas > 2 && p95.explanation.contains("(itl_slo)"),
        "{}",
        p95.explanation
    );
    // Reading what the capacity estimate tests, it does not, and the decision says so.
    let test = run(&format!("{base}; backstopitl=test"));
    assert!(
        test.target_replicas <= 2 && !test.explanation.contains("itl_slo"),
        "{}",
        test.explanation
    );
    assert!(
        test.explanation.contains(
            "the guide's ITL trigger read the P95 of each request's own time per output token, 0.05 s (backstopitl=test)"
        ),
        "{}",
        test.explanation
    );
}

#[test]
fn without_the_backlog_term_the_fleet_is_sized_for_demand() {
    // A standing backlog of 600 with arrivals equal to what finishes (10 req/s): draining it
    // within a minute asks for ceil((10 + 10) / 8) = 3 replicas; sized for demand, 2.
    let run = |metadata: &str| {
        let mut s = fleet(2, 10.0, 20.0);
        s.fleet.queue_depth = 600.0;
        s.fleet.ttft_seconds.p95 = Some(0.5);
        Run::new(metadata, 2).steady(20, &s)
    };
    // (`settle=off`: with it on, the default, the 2 ready replicas cover the demand's need
    // and the backlog drains on them.)
    let drain = run("proactive; capacity=10; startup=300; drain=60; settle=off");
    assert!(drain.target_replicas >= 3, "{drain:?}");
    assert!(
        drain.explanation.contains("+ backlog 10 req/s"),
        "{drain:?}"
    );
    let demand = run("proactive; capacity=10; startup=300; drain=0");
    assert_eq!(demand.target_replicas, 2, "{demand:?}");
    assert!(!demand.explanation.contains("backlog"), "{demand:?}");
}

#[test]
fn the_trend_weight_scales_the_extrapolation() {
    let forecast_at = |metadata: &str| {
        let mut r = Run::new(metadata, 2);
        let mut d = None;
        for t in (0..=300).step_by(2) {
            d = Some(r.at(t, &fleet(2, 10.0 + 0.02 * t as f64, 20.0)));
        }
        d.unwrap().explanation
    };
    // 16 req/s now, +0.02 req/s per s: 22 in 300 s at full weight, 19 at half, 16 at none.
    assert!(forecast_at("proactive; capacity=10; startup=300").contains("forecast 22 req/s"));
    assert!(
        forecast_at("proactive; capacity=10; startup=300; trend=0.5").contains("forecast 19 req/s")
    );
    assert!(
        forecast_at("proactive; capacity=10; startup=300; trend=0").contains("forecast 16 req/s")
    );
}

#[test]
fn under_trendreach_history_a_trend_is_carried_no_further_than_the_history_it_was_fitted_on() {
    let explained = |metadata: &str, until: u64| {
        let mut r = Run::new(metadata, 2);
        let mut d = None;
        for t in (0..=until).step_by(2) {
            d = Some(r.at(t, &fleet(2, 10.0 + 0.02 * t as f64, 20.0)));
        }
        d.unwrap().explanation
    };
    // Two minutes after the scaler started: 12.4 req/s now, +0.02 req/s per s. Over the
    // 300 s horizon that is 18.4; over the 120 s of history, 14.8.
    let horizon = explained("proactive; capacity=10; startup=300", 120);
    assert_eq!(
        horizon,
        explained(
            "proactive; capacity=10; startup=300; trendreach=horizon",
            120
        )
    );
    assert!(
        horizon.contains("forecast 18.4 req/s in 300 s"),
        "{horizon}"
    );
    assert!(!horizon.contains("trendreach"), "{horizon}");
    let history = explained(
        "proactive; capacity=10; startup=300; trendreach=history",
        120,
    );
    assert!(
        history.contains("forecast 14.8 req/s in 300 s"),
        "{history}"
    );
    assert!(
        history.contains(
            "; trend carried 120 s ahead, not the 300 s horizon: the demand history is no longer (trendreach=history)"
        ),
        "{history}"
    );
    // With as much history as the horizon, the two are the same.
    let full = |m: &str| explained(m, 300);
    assert_eq!(
        full("proactive; capacity=10; startup=300"),
        full("proactive; capacity=10; startup=300; trendreach=history")
    );
    assert!(full("proactive; capacity=10; startup=300").contains("forecast 22 req/s"));
}

#[test]
fn a_growing_backstop_ignores_triggers_while_the_backlog_drains() {
    // The prior overstates capacity (100 req/s per replica): the forecast asks for nothing.
    // A queue of 200 over 2 replicas fires the guide's queue trigger after its 30 s.
    let run = |metadata: &str, growing: bool| {
        let mut r = Run::new(metadata, 2);
        let mut last = None;
        let mut reasons = Vec::new();
        for t in (0..=90).step_by(2) {
            let mut s = fleet(2, 10.0, 20.0);
            // Draining: 400 -> 220 over the 90 s, or growing: 200 -> 380.
            s.fleet.queue_depth = if growing {
                200.0 + 2.0 * t as f64
            } else {
                400.0 - 2.0 * t as f64
            };
            let d = r.at(t, &s);
            reasons.push(d.reason);
            last = Some(d);
        }
        (last.unwrap(), reasons)
    };
    let (draining, _) = run(
        "proactive; capacity=100; startup=300; backstop=growing",
        false,
    );
    assert_eq!(draining.target_replicas, 2, "{draining:?}");
    assert!(
        draining
            .explanation
            .contains("guide trigger (queue_depth) not followed"),
        "{}",
        draining.explanation
    );
    let (growing, reasons) = run(
        "proactive; capacity=100; startup=300; backstop=growing",
        true,
    );
    assert!(growing.target_replicas > 2, "{growing:?}");
    assert!(reasons.contains(&Reason::QueueDepth), "{reasons:?}");
    // The step is kept while its replicas start, and the trigger does not stack on them.
    assert!(
        growing.explanation.contains(
            "guide trigger (queue_depth) not stacked: 2 replicas asked for are still starting"
        ),
        "{}",
        growing.explanation
    );
    let (always, _) = run(
        "proactive; capacity=100; startup=300; backstop=always",
        false,
    );
    assert!(always.target_replicas > 2, "{always:?}");
}

#[test]
fn a_breach_at_a_bursts_onset_does_not_lower_capacity_until_it_lasted_the_rate_window() {
    // One replica at 10 req/s within the SLO for two minutes; then a burst breaks TTFT while
    // the rate still counts the calm before it (10 req/s).
    let mut r = Run::new("proactive; capacity=20; startup=300", 1);
    for t in (0..=120).step_by(2) {
        r.at(t, &fleet(1, 10.0, 300.0));
    }
    let mut onset = fleet(1, 10.0, 20.0);
    onset.fleet.ttft_seconds.p95 = Some(5.0);
    onset.fleet.queue_depth = 40.0;
    onset.fleet.running = 300.0;
    for t in (122..=170).step_by(2) {
        r.at(t, &onset);
    }
    assert_eq!(r.proactive.capacity(), Some(20.0), "48 s of breach");
    // Latency over the SLO while the in-flight requests shrink with nothing waiting (the tail
    // of a backlog being served) says nothing either, however long it lasts.
    for t in (172..=300).step_by(2) {
        let mut aftermath = onset.clone();
        aftermath.fleet.queue_depth = 1.0;
        aftermath.fleet.running = 440.0 - t as f64;
        r.at(t, &aftermath);
    }
    assert_eq!(r.proactive.capacity(), Some(20.0), "no queue");
    // A breach that lasted the whole rate window does say the replica serves less.
    for t in (302..=420).step_by(2) {
        r.at(t, &onset);
    }
    let c = r.proactive.capacity().unwrap();
    assert!(c < 20.0, "{c}");
}

#[test]
fn under_breachwhile_growing_a_draining_queue_does_not_lower_capacity() {
    // One replica within the SLO for two minutes, then four minutes of a backlog draining: TTFT
    // over its SLO, 40 requests still waiting, the in-flight requests shrinking.
    let drain = |metadata: &str| {
        let mut r = Run::new(metadata, 1);
        for t in (0..=120).step_by(2) {
            r.at(t, &fleet(1, 10.0, 300.0));
        }
        for t in (122..=360).step_by(2) {
            // 300 in flight before, 40 of them waiting now, one fewer every 2 s.
            let mut s = fleet(1, 10.0, 260.0 - (t - 120) as f64 / 2.0);
            s.fleet.ttft_seconds.p95 = Some(5.0);
            s.fleet.queue_depth = 40.0;
            r.at(t, &s);
        }
        r.proactive.capacity().unwrap()
    };
    // Under `breachwhile=queued` a queue left counts: the estimate moves towards the 10 req/s
    // served.
    let queued = drain("proactive; capacity=20; startup=300; breachwhile=queued");
    assert!(queued < 19.0, "{queued}");
    // Under `breachwhile=growing`, the default, the drain is the backlog's aftermath.
    let growing = drain("proactive; capacity=20; startup=300");
    assert_eq!(growing, 20.0);
}

/// 6 req/s with 8-minute bursts of 40 req/s every 45 minutes from minute 20, on `ready`
/// replicas that serve 10 req/s each within the SLO (beyond that TTFT breaks): the fleet's
/// signals at `t`, and the demand offered.
fn repeating_bursts(t: u64, ready: usize) -> (FleetSignals, f64) {
    let m = t / 60;
    let offered: f64 = if m >= 20 && (m - 20) % 45 < 8 {
        40.0
    } else {
        6.0
    };
    let served = offered.min(10.0 * ready as f64);
    let mut s = fleet(ready, served, 20.0);
    if served < offered {
        s.fleet.ttft_seconds.p95 = Some(5.0);
    }
    (s, offered)
}

#[test]
fn a_burst_that_repeats_is_asked_for_a_start_up_ahead_of_its_next_arrival() {
    // 10 req/s per replica at the SLO (8 at 80 %); 6 req/s with 8-minute bursts of 40 req/s
    // every 45 minutes from minute 20.
    for (metadata, periodic) in [
        ("proactive; capacity=10; startup=300", true),
        ("proactive; capacity=10; startup=300; periodic=off", false),
    ] {
        let mut r = Run::new(metadata, 1);
        let mut ready = 1usize;
        let mut before_third = 0;
        let mut explanation = String::new();
        for t in (0..=110 * 60).step_by(2) {
            let d = r.at(t, &repeating_bursts(t, ready).0);
            // Replicas arrive at once here: what matters is when they are asked for.
            ready = d.target_replicas as usize;
            if t == 109 * 60 {
                before_third = d.target_replicas;
                explanation = d.explanation.clone();
            }
        }
        if periodic {
            // Bursts at minutes 20 and 65: at minute 109 the third (minute 110) is expected.
            assert_eq!(before_third, 5, "{explanation}");
            assert!(
                explanation.contains("repeats every 45 min")
                    && explanation.contains("-> 5 replicas"),
                "{explanation}"
            );
        } else {
            assert_eq!(before_third, 1, "{explanation}");
            assert!(!explanation.contains("repeats"), "{explanation}");
        }
    }
}

#[test]
fn the_default_keeps_a_pattern_whose_multiple_correlates_a_little_better() {
    // 4 req/s with 6-minute bursts every 20 minutes from minute 15, the even bursts at 38 req/s
    // and the odd at 50, on replicas that serve 10 req/s each: from about minute 100 the
    // 40-minute lag correlates a little better than the 20 minutes, and `period=best` loses
    // the pattern; the default reads the 20 minutes still.
    let offered = |t: u64| forecast::alternating_bursts(t / 60);
    let read = |metadata: &str| {
        let mut r = Run::new(metadata, 1);
        let mut ready = 1usize;
        let mut last = String::new();
        for t in (0..=118 * 60).step_by(2) {
            let served = offered(t).min(10.0 * ready as f64);
            let mut s = fleet(ready, served, 20.0);
            if served < offered(t) {
                s.fleet.ttft_seconds.p95 = Some(5.0);
            }
            let d = r.at(t, &s);
            ready = d.target_replicas as usize;
            last = d.explanation.clone();
        }
        last
    };
    let default = read("proactive; capacity=10; startup=120");
    assert!(default.contains("repeats every 20 min"), "{default}");
    let best = read("proactive; capacity=10; startup=120; period=best");
    assert!(!best.contains("repeats"), "{best}");
}

#[test]
fn the_surplus_of_a_burst_that_has_passed_is_released_before_the_calm_period() {
    // 10 ready replicas serving 12 req/s need 2 (8 req/s per replica at 80 %): at most half
    // the fleet is needed, so with `release=120` (and a start-up of 60 s) the surplus goes
    // after 120 s, not 300 s. Without the hold (`hold=0`; the default's three start-ups are
    // the next test's).
    let (t, d) = first_down(
        "proactive; capacity=10; startup=60; release=120; hold=0",
        12.0,
    );
    assert!((120..=130).contains(&t), "{t}: {d:?}");
    assert_eq!(d.target_replicas, 2, "{d:?}");
    assert_eq!(d.reason, Reason::ScaleInCalm);
    assert!(
        d.explanation.contains(
            "at most half of the 10 replicas: the surplus of a burst that has passed is released after 120 s (release, no shorter than the set start-up time of 60 s), not the calm period of 300 s: scale in 10 -> 2"
        ),
        "{}",
        d.explanation
    );
    // `release=60`, the default, releases it after a minute here; `release=0` waits for the
    // calm period.
    let (t, d) = first_down(
        "proactive; capacity=10; startup=60; release=60; hold=0",
        12.0,
    );
    assert!((60..=70).contains(&t), "{t}: {d:?}");
    assert!(d.explanation.contains("released after 60 s"), "{d:?}");
    let (t, d) = first_down("proactive; capacity=10; startup=60; hold=0", 12.0);
    assert!((60..=70).contains(&t), "{t}: {d:?}");
    assert!(d.explanation.contains("released after 60 s"), "{d:?}");
    let (t, d) = first_down(
        "proactive; capacity=10; startup=60; release=0; hold=0",
        12.0,
    );
    assert!(t >= 300, "{t}: {d:?}");
    assert!(!d.explanation.contains("released after"), "{d:?}");
    // A need of 6 of 10 (48 req/s) is more than half the fleet: no early release.
    let (t, d) = first_down(
        "proactive; capacity=10; startup=60; release=120; hold=0",
        48.0,
    );
    assert!(t >= 300, "{t}: {d:?}");
    assert_eq!(d.target_replicas, 6, "{d:?}");
}

/// When a fleet of 10 ready replicas serving `rps` is first scaled in, and the decision.
fn first_down(metadata: &str, rps: f64) -> (u64, Decision) {
    let mut r = Run::new(metadata, 10);
    (0..=900)
        .step_by(2)
        .map(|t| (t, r.at(t, &fleet(10, rps, 10.0))))
        .find(|d| d.1.target_replicas < 10)
        .expect("scaled in")
}

#[test]
fn a_surplus_is_not_released_before_the_start_up_time() {
    // A set start-up of 200 s: `release=60` waits 200 s, since a replica released sooner could
    // not be back for a load that returns within a start-up; the decision says why.
    let (t, d) = first_down(
        "proactive; capacity=10; startup=200; peak=0; release=60; hold=0",
        12.0,
    );
    assert!((200..=210).contains(&t), "{t}: {d:?}");
    assert_eq!(d.target_replicas, 2, "{d:?}");
    assert!(
        d.explanation.contains(
            "released after 200 s, the set start-up time (release of 60 s is shorter: capacity released sooner would not be back for a load that returns within a start-up), not the calm period of 300 s: scale in 10 -> 2"
        ),
        "{}",
        d.explanation
    );
    // A start-up at least the calm period: the calm period scales in first, as without a
    // release.
    let (t, d) = first_down(
        "proactive; capacity=10; startup=400; peak=0; release=60; hold=0",
        12.0,
    );
    assert!(t >= 300, "{t}: {d:?}");
    assert!(!d.explanation.contains("released after"), "{d:?}");

    // A learned start-up: 10 replicas asked for at 0 s answer at 150 s; then the load falls.
    let mut r = Run::new("proactive; capacity=10; peak=0; release=60; hold=0", 2);
    let mut ready = 2;
    let mut learned = None;
    let mut down = None;
    for t in (0..=1500).step_by(2) {
        if t == 150 {
            ready = 10;
        }
        let rps: f64 = if t < 400 { 70.0 } else { 12.0 };
        let d = r.at(t, &fleet(ready, rps.min(10.0 * ready as f64), 20.0));
        if t == 150 {
            learned = Some(r.proactive.horizon_seconds());
        }
        if d.reason == Reason::ScaleInCalm {
            down = Some((t, d));
            break;
        }
    }
    let learned = learned.unwrap();
    assert!((149.0..=151.0).contains(&learned), "{learned}");
    let (t, d) = down.expect("scaled in");
    // The need falls to half the fleet at 400 s: released a learned start-up (150 s) later,
    // not a minute later, and before the calm period, to the highest need of those 150 s.
    assert!((550..=560).contains(&t), "{t}: {d:?}");
    assert!(d.target_replicas <= 5, "{d:?}");
    assert!(d.explanation.contains("released after 150 s"), "{d:?}");
    assert!(
        d.explanation
            .contains("the learned start-up time (release of 60 s is shorter"),
        "{}",
        d.explanation
    );
}

/// The explanation of the decision at `until` seconds on 6 ready replicas whose finished rate
/// follows `rate` (in-flight steady: the demand is the finished rate), decided every 2 s.
fn explanation_at(metadata: &str, rate: &dyn Fn(u64) -> f64, until: u64) -> String {
    let mut r = Run::new(metadata, 6);
    let mut d = None;
    for t in (0..=until).step_by(2) {
        d = Some(r.at(t, &fleet(6, rate(t), 20.0)));
    }
    d.unwrap().explanation
}

#[test]
fn a_step_that_has_happened_is_not_extrapolated_as_a_ramp() {
    // 10 req/s for 5 minutes, then a step to 30 req/s (in-flight steady: demand = finished).
    let last = explanation_at;
    let step = |t: u64| if t < 300 { 10.0 } else { 30.0 };
    // Three minutes after the step the 5-minute slope is still steep; the last 2 minutes are
    // flat.
    let plain = last("proactive; capacity=10; startup=300; rise=0", &step, 480);
    assert!(!plain.contains("forecast 30 req/s"), "{plain}");
    // The default is `rise=180`: the last 3 minutes are flat too.
    let default = last("proactive; capacity=10; startup=300", &step, 480);
    assert_eq!(
        default,
        last("proactive; capacity=10; startup=300; rise=180", &step, 480)
    );
    assert!(default.contains("forecast 30 req/s"), "{default}");
    let rise = last("proactive; capacity=10; startup=300; rise=120", &step, 480);
    assert!(rise.contains("forecast 30 req/s"), "{rise}");
    assert!(
        rise.contains("; trend from the last 120 s: 0 req/s per s, below the 300 s slope of"),
        "{rise}"
    );
    // A steady ramp rises over both windows alike: the same forecast, no note.
    let ramp = |t: u64| 10.0 + 0.02 * t as f64;
    let plain = last("proactive; capacity=10; startup=300; rise=0", &ramp, 300);
    let rise = last("proactive; capacity=10; startup=300; rise=120", &ramp, 300);
    assert!(plain.contains("forecast 22 req/s"), "{plain}");
    assert!(rise.contains("forecast 22 req/s"), "{rise}");
    assert!(!rise.contains("trend from the last"), "{rise}");
}

#[test]
fn under_ramp_halves_a_step_still_inside_the_recent_window_is_not_extrapolated() {
    let last = explanation_at;
    // 10 req/s, then a step to 30 req/s at 300 s, read 100 s later: the step is inside the
    // last 180 s, so their slope still rises and the default carries it over the horizon.
    let step = |t: u64| if t < 300 { 10.0 } else { 30.0 };
    let recent = last("proactive; capacity=10; startup=300", &step, 400);
    assert_eq!(
        recent,
        last(
            "proactive; capacity=10; startup=300; ramp=recent",
            &step,
            400
        )
    );
    assert!(!recent.contains("forecast 30 req/s"), "{recent}");
    // Under `ramp=halves` the older half (220-310 s) holds the step and the newer half
    // (310-400 s) is flat: the slower of the two does not rise.
    let halves = last(
        "proactive; capacity=10; startup=300; ramp=halves",
        &step,
        400,
    );
    assert!(halves.contains("forecast 30 req/s"), "{halves}");
    assert!(
        halves.contains("; trend from the slower half of the last 180 s ("),
        "{halves}"
    );
    assert!(
        halves.contains(" then 0 req/s per s; ramp=halves): 0 req/s per s"),
        "{halves}"
    );
    // A steady ramp rises in both halves alike: the same forecast as without the cap, no note.
    let ramp = |t: u64| 10.0 + 0.02 * t as f64;
    let plain = last("proactive; capacity=10; startup=300; rise=0", &ramp, 300);
    let halves = last(
        "proactive; capacity=10; startup=300; ramp=halves",
        &ramp,
        300,
    );
    assert!(plain.contains("forecast 22 req/s"), "{plain}");
    assert!(halves.contains("forecast 22 req/s"), "{halves}");
    assert!(!halves.contains("trend from"), "{halves}");
}

#[test]
fn the_backlog_term_is_capped_at_k_replicas_beyond_the_demands_need() {
    // A standing backlog of 3000 with arrivals equal to what finishes (10 req/s): draining it
    // within a minute asks for ceil((10 + 50) / 8) = 8 replicas; the demand alone needs 2.
    let run = |metadata: &str| {
        let mut s = fleet(2, 10.0, 20.0);
        s.fleet.queue_depth = 3000.0;
        s.fleet.ttft_seconds.p95 = Some(0.5);
        Run::new(metadata, 2).steady(20, &s)
    };
    // (`settle=off`: with it on, the default, the 2 ready replicas cover the demand's need
    // and the backlog is not sized for at all.)
    let settled = run("proactive; capacity=10; startup=300");
    assert_eq!(settled.target_replicas, 2, "{settled:?}");
    let uncapped = run("proactive; capacity=10; startup=300; settle=off");
    assert_eq!(uncapped.target_replicas, 8, "{uncapped:?}");
    assert!(!uncapped.explanation.contains("capped"), "{uncapped:?}");
    let capped = run("proactive; capacity=10; startup=300; settle=off; backlog=1");
    assert_eq!(capped.target_replicas, 3, "{capped:?}");
    assert!(
        capped.explanation.contains(
            "backlog capped at 1 replicas beyond the demand's 2 (backlog=1): 8 -> 3 replicas"
        ),
        "{capped:?}"
    );
    // A cap the backlog does not reach changes nothing.
    let loose = run("proactive; capacity=10; startup=300; settle=off; backlog=10");
    assert_eq!(loose.target_replicas, 8, "{loose:?}");
}

#[test]
fn once_the_ready_replicas_cover_the_demand_the_backlog_drains_on_them() {
    // After a burst, arrivals of 30 req/s with a standing backlog of 1200 (20 req/s over a
    // minute): with it the need is ceil((30 + 20) / 8) = 7, the demand alone needs
    // ceil(30 / 8) = 4.
    let run = |metadata: &str| {
        let mut r = Run::new(metadata, 2);
        for t in (0..=60).step_by(2) {
            r.at(t, &fleet(2, 10.0, 20.0));
        }
        let mut asked = 2;
        for t in (62..=80).step_by(2) {
            asked = r.at(t, &saturated(t, 60)).target_replicas;
        }
        let mut decisions = Vec::new();
        // Long enough for the burst's rise to leave the 5-minute trend.
        for t in (82..=560).step_by(2) {
            // 3 replicas ready serve 30 req/s at their limit; a fourth arrives at 500 s.
            let ready = if t < 500 { 3 } else { 4 };
            let mut s = fleet(ready, 30.0, 40.0);
            s.fleet.queue_depth = 1200.0;
            decisions.push((t, r.at(t, &s)));
        }
        (asked, decisions)
    };
    let (asked, settled) = run("proactive; capacity=10; startup=300; peak=0; settle=on");
    assert!(asked > 2, "asked for {asked}");
    // Before the ready replicas cover the demand, the backlog is sized for as without `settle`.
    let before = &settled.iter().find(|(t, _)| *t == 498).unwrap().1;
    assert!(before.target_replicas >= 7, "{before:?}");
    let (t, d) = settled
        .iter()
        .find(|(_, d)| d.target_replicas == 4)
        .expect("withdrawn to the ready 4");
    assert_eq!(*t, 500, "at once, not after a rate window: {d:?}");
    assert!(
        d.explanation.contains(
            "no longer needed: the 4 ready cover the demand's need of 4 and the backlog drains on them (settle): target"
        ),
        "{d:?}"
    );
    assert!(d.explanation.contains("backlog not sized for"), "{d:?}");
    // Without it the backlog keeps the starting replicas.
    let (_, kept) = run("proactive; capacity=10; startup=300; peak=0; settle=off");
    let last = &kept.last().unwrap().1;
    assert!(last.target_replicas >= 7, "{last:?}");
}

#[test]
fn a_passed_bursts_capacity_is_held_for_k_start_ups_then_released() {
    // Without a hold (`hold=0`), the burst's surplus goes after the calm period (the highest
    // need of the last 300 s, scaled in once that need is 2).
    let none = burst_then_calm("proactive; capacity=10; startup=300; peak=0; hold=0", 1500);
    let high = none.iter().map(|d| d.1.target_replicas).max().unwrap();
    assert!(high >= 8, "the burst scaled out: {high}");
    let back = none
        .iter()
        .find(|d| d.0 > 120 && d.1.target_replicas == 2)
        .expect("back to 2");
    assert!(back.0 < 700, "{}: {:?}", back.0, back.1);

    // `hold=3`, the default: held three start-ups (900 s) after the need fell, at the highest
    // need the demand alone asked for (8 for 60 req/s at 8 per replica), then released to the
    // need.
    let held = burst_then_calm("proactive; capacity=10; startup=300; peak=0; hold=3", 1500);
    let default = burst_then_calm("proactive; capacity=10; startup=300; peak=0", 1500);
    assert_eq!(
        held.iter().map(|d| d.1.target_replicas).collect::<Vec<_>>(),
        default
            .iter()
            .map(|d| d.1.target_replicas)
            .collect::<Vec<_>>()
    );
    let at = |t: u64| held.iter().find(|d| d.0 == t).unwrap().1.clone();
    for t in [500, 800, 1000] {
        let d = at(t);
        assert!(d.target_replicas >= 8, "{t}: {d:?}");
    }
    let d = at(1000);
    assert_eq!(d.target_replicas, 8, "{d:?}");
    assert!(
        d.explanation
            .contains("the capacity of a burst that has passed is held at")
            && d.explanation.contains("(3 start-up times of 300 s, hold)"),
        "{}",
        d.explanation
    );
    let down = held
        .iter()
        .find(|d| d.0 > 120 && d.1.target_replicas == 2)
        .expect("released after the hold");
    assert!(
        (122 + 900..=122 + 900 + 20).contains(&down.0),
        "{}: {:?}",
        down.0,
        down.1
    );
    assert_eq!(down.1.reason, Reason::ScaleInCalm);
    assert!(
        down.1
            .explanation
            .contains("3 start-up times of 300 s, hold"),
        "{}",
        down.1.explanation
    );

    // A slow decline is not a passed burst: 10 replicas whose need falls to 6 (more than half
    // the fleet) scale in after the calm period with or without a hold.
    let (t0, d0) = first_down("proactive; capacity=10; startup=300; peak=0; hold=0", 48.0);
    let (t3, d3) = first_down("proactive; capacity=10; startup=300; peak=0; hold=3", 48.0);
    assert_eq!((t0, d0.target_replicas), (t3, d3.target_replicas), "{d3:?}");
}

/// After a burst: 3 ready replicas serving 30 req/s with a standing backlog of 1200 from 82 s,
/// a fourth ready at 500 s, arrivals `rps(t)` from then; every decision from 82 s to 700 s.
fn settle_run(metadata: &str, rps: fn(u64) -> f64) -> Vec<(u64, Decision)> {
    let mut r = Run::new(metadata, 2);
    for t in (0..=60).step_by(2) {
        r.at(t, &fleet(2, 10.0, 20.0));
    }
    for t in (62..=80).step_by(2) {
        r.at(t, &saturated(t, 60));
    }
    let mut decisions = Vec::new();
    for t in (82..=700).step_by(2) {
        let ready = if t < 500 { 3 } else { 4 };
        let mut s = fleet(ready, if t < 500 { 30.0 } else { rps(t) }, 40.0);
        s.fleet.queue_depth = 1200.0;
        decisions.push((t, r.at(t, &s)));
    }
    decisions
}

fn decision_at(d: &[(u64, Decision)], t: u64) -> Decision {
    d.iter().find(|x| x.0 == t).unwrap().1.clone()
}

#[test]
fn a_steady_settle_asks_for_one_more_replica_not_for_the_backlog_again() {
    // As above: 4 ready cover the demand (30 req/s) at 500 s and the backlog's replicas are
    // withdrawn; at 510 s the demand reads 35 req/s, one replica more than the ready 4.
    let run = |metadata: &str| settle_run(metadata, |t| if t < 510 { 30.0 } else { 35.0 });
    let at = decision_at;
    let on = run("proactive; capacity=10; startup=300; peak=0; settle=on");
    let steady = run("proactive; capacity=10; startup=300; peak=0; settle=steady");
    // Both withdraw to the ready 4 at 500 s.
    assert_eq!(at(&on, 500).target_replicas, 4);
    assert_eq!(at(&steady, 500).target_replicas, 4);
    // `settle=on` sizes for the backlog again as soon as the need passes the ready replicas;
    // `settle=steady` asks for the one replica the demand needs.
    let jumped = at(&on, 510);
    assert!(jumped.target_replicas >= 7, "{jumped:?}");
    let one_more = at(&steady, 510);
    assert_eq!(one_more.target_replicas, 5, "{one_more:?}");
    assert!(
        one_more.explanation.contains(
            "backlog not sized for: the demand's need of 5 is one replica above the 4 ready, within a rate window of settling (settle=steady"
        ),
        "{}",
        one_more.explanation
    );
    // The setting reads back as `settle` on, steadied; `settle=on` after it turns the steadying
    // off again.
    let c = parse_policy("proactive; settle=steady").unwrap().unwrap();
    assert_eq!(c.settle, Settle::Steady);
    let c = parse_policy("proactive; settle=steady; settle=on")
        .unwrap()
        .unwrap();
    assert_eq!(c.settle, Settle::On);
}

#[test]
fn a_banded_settle_withdraws_starting_replicas_only_after_a_rate_window() {
    // As above, and at 520 s the demand reads 30 req/s again. `settle=steady` withdraws at
    // once (to the ready 4 at 500 s, one more at 510 s, back to 4 at 520 s); `settle=band`
    // keeps replicas still starting until the need has stayed at the ready 4 for a rate
    // window (60 s after the last higher need, at 519 s), then withdraws them.
    let run = |metadata: &str| {
        settle_run(
            metadata,
            |t| {
                if (510..520).contains(&t) { 35.0 } else { 30.0 }
            },
        )
    };
    let at = decision_at;
    let steady = run("proactive; capacity=10; startup=300; peak=0; settle=steady");
    let band = run("proactive; capacity=10; startup=300; peak=0; settle=band");
    let targets = |d: &[(u64, Decision)], ts: &[u64]| {
        ts.iter()
            .map(|t| at(d, *t).target_replicas)
            .collect::<Vec<_>>()
    };
    assert_eq!(targets(&steady, &[500, 510, 520]), [4, 5, 4]);
    let kept = at(&band, 540);
    assert!(kept.target_replicas >= 5, "{kept:?}");
    assert!(
        at(&band, 510).explanation.contains("(settle=band;"),
        "{:?}",
        at(&band, 510)
    );
    let (t, d) = band
        .iter()
        .find(|(t, d)| *t > 500 && d.target_replicas == 4)
        .expect("withdrawn after the window");
    assert!((578..=600).contains(t), "{t}: {d:?}");
    // Between 500 s and then the target only falls: no step up and down again.
    let span: Vec<u32> = band
        .iter()
        .filter(|(x, _)| (500..=*t).contains(x))
        .map(|(_, d)| d.target_replicas)
        .collect();
    assert!(span.windows(2).all(|w| w[1] <= w[0]), "{span:?}");
    let c = parse_policy("proactive; settle=band").unwrap().unwrap();
    assert_eq!(c.settle, Settle::Band);
}

/// Bursts of 40 req/s for 6 minutes every 20 minutes over 5 req/s, at 10 req/s per replica
/// within the SLO, with replicas that answer 300 s after they are asked for: the decisions
/// every 2 s over `minutes`.
fn late_bursts(metadata: &str, minutes: u64) -> Vec<(u64, Decision)> {
    bursts_until(metadata, minutes, minutes)
}

/// As [`late_bursts`], with no burst from minute `last` on: 5 req/s for the rest of the run.
fn bursts_until(metadata: &str, minutes: u64, last: u64) -> Vec<(u64, Decision)> {
    bursts_of(
        metadata,
        minutes,
        |t| if t < last * 60 { 40.0 } else { 5.0 },
    )
}

/// As [`late_bursts`], each burst at `height(t)` req/s.
fn bursts_of(metadata: &str, minutes: u64, height: impl Fn(u64) -> f64) -> Vec<(u64, Decision)> {
    offered_load(metadata, minutes, |t| {
        if t % 1200 >= 840 { height(t) } else { 5.0 }
    })
}

/// As [`late_bursts`], `offered(t)` req/s at `t` seconds.
fn offered_load(
    metadata: &str,
    minutes: u64,
    offered: impl Fn(u64) -> f64,
) -> Vec<(u64, Decision)> {
    let mut r = Run::new(metadata, 1);
    let mut targets: Vec<u32> = Vec::new();
    let mut out = Vec::new();
    for t in (0..=minutes * 60).step_by(2) {
        let offered = offered(t);
        let asked = targets.last().copied().unwrap_or(1);
        // What was asked for 300 s ago is ready, unless withdrawn since.
        let ready = targets
            .len()
            .checked_sub(150)
            .map_or(1, |i| targets[i])
            .min(asked)
            .max(1);
        let served = offered.min(10.0 * f64::from(ready));
        let mut s = fleet(ready as usize, served, 10.0);
        if served < offered {
            s.fleet.ttft_seconds.p95 = Some(5.0);
            s.fleet.queue_depth = 20.0 * (offered - served);
        }
        let d = r.at(t, &s);
        targets.push(d.target_replicas);
        out.push((t, d));
    }
    out
}

/// Asserts that two runs ask for the same targets until `after` first explains a decision with
/// `marker`, and returns that decision's index.
fn same_until(before: &[(u64, Decision)], after: &[(u64, Decision)], marker: &str) -> usize {
    let first = after
        .iter()
        .position(|(_, d)| d.explanation.contains(marker))
        .unwrap_or_else(|| panic!("no decision says {marker:?}"));
    for ((t, a), (_, b)) in before.iter().zip(after).take(first) {
        assert_eq!(a.target_replicas, b.target_replicas, "at {t} s");
    }
    first
}

/// The targets summed over the decisions from minute `from` on (replica-decisions).
fn replica_time_from(run: &[(u64, Decision)], from: u64) -> u64 {
    run.iter()
        .filter(|(t, _)| *t >= from * 60)
        .map(|(_, d)| u64::from(d.target_replicas))
        .sum()
}

#[test]
fn under_hindsight_floor_a_static_fleet_that_beats_ours_becomes_a_floor() {
    // Without the hold, whose three start-ups (900 s) would keep the fleet through this
    // model's 14-minute lulls by themselves.
    let metadata = "proactive; capacity=10; startup=300; peak=0; periodic=off; hold=0";
    let advice = late_bursts(&format!("{metadata}; hindsight=advice"), 180);
    let floor = late_bursts(metadata, 180);
    // Before any comparison has found a static fleet beating ours, the two are the same.
    let first = floor
        .iter()
        .position(|(_, d)| d.explanation.contains("hindsight floor"))
        .expect("a floor from hindsight within three hours");
    assert!(
        floor[first].0 >= 30 * 60,
        "no comparison before half an hour"
    );
    for ((t, a), (_, f)) in advice.iter().zip(&floor).take(first) {
        assert_eq!(a.target_replicas, f.target_replicas, "at {t} s");
    }
    // Under advice the lulls go back to one replica; under the floor they keep the fleet the
    // hindsight named, and the explanation gives its numbers.
    let at = |run: &[(u64, Decision)], t: u64| decision_at(run, t);
    let lull = 170 * 60;
    assert_eq!(at(&advice, lull).target_replicas, 1);
    let held = at(&floor, lull);
    assert!(held.target_replicas >= 2, "{}", held.explanation);
    assert!(
        held.explanation.contains("a static fleet of")
            && held
                .explanation
                .contains(&format!("-> {} replicas", held.target_replicas)),
        "{}",
        held.explanation
    );
    // The floor is bounded by what ours spent: it never reaches the maximum.
    assert!(floor.iter().all(|(_, d)| d.target_replicas < 20));
}

#[test]
fn under_floorlapse_a_hindsight_floor_whose_demand_is_gone_is_set_aside() {
    // The bursts stop at minute 100; 5 req/s is within what one replica carries at 10 req/s.
    let metadata =
        "proactive; capacity=10; startup=300; peak=0; periodic=off; hold=0; lapseif=fewer";
    let held = bursts_until(&format!("{metadata}; floorlapse=0"), 200, 100);
    let lapsing = bursts_until(&format!("{metadata}; floorlapse=1800"), 200, 100);
    let first = same_until(&held, &lapsing, "floorlapse=1800");
    // Set aside only once half an hour has passed since the last burst's last minute.
    assert!(lapsing[first].0 >= (100 + 30) * 60, "{:?}", lapsing[first]);
    let at = |run: &[(u64, Decision)], t: u64| decision_at(run, t);
    let late = 190 * 60;
    let kept = at(&held, late);
    assert!(kept.target_replicas >= 2, "{}", kept.explanation);
    assert!(kept.explanation.contains("hindsight floor: over"));
    let gone = at(&lapsing, late);
    assert_eq!(gone.target_replicas, 1, "{}", gone.explanation);
    assert!(
        gone.explanation.contains(&format!(
            "; hindsight floor of {} replicas set aside: the demand over the last 1800 s peaked at",
            kept.target_replicas
        )),
        "{}",
        gone.explanation
    );
    // While the bursts recur, the demand needs the floor within every half hour: it is held.
    let recurring = bursts_until(&format!("{metadata}; floorlapse=1800"), 200, 200);
    assert!(
        never_says(&recurring, "floorlapse"),
        "a recurring burst's floor lapsed"
    );
}

#[test]
fn the_hindsight_reads_what_the_engines_counted_and_judges_ours_by_it_under_oursby_counted() {
    // Forty minutes on 2 replicas finishing 10 req/s, 3 of them aborted (clients that gave up):
    // the fluid model serves the whole demand; the engines count 70 % of it served.
    let mut s = with_aborted(fleet(2, 10.0, 8.0), 3.0);
    let read = |metadata: &str| {
        let mut r = Run::new(metadata, 2);
        let last = r.steady(40 * 60, &s);
        (
            r.proactive.hindsight().cloned().expect("a comparison"),
            last,
        )
    };
    let (fluid, unfloored) = read("proactive");
    assert!((fluid.ours_fluid_percent - 100.0).abs() < 1e-6, "{fluid:?}");
    assert_eq!(fluid.ours_served_percent, fluid.ours_fluid_percent);
    let counted = fluid.ours_counted_percent.expect("a count");
    assert!((counted - 70.0).abs() < 1e-3, "{counted}");
    // Read by the fluid model no static fleet beats ours; by the count, 2 replicas held all
    // along serve the whole demand for fewer replica-hours than ours held, and become a floor.
    assert!(
        !unfloored.explanation.contains("hindsight floor"),
        "{}",
        unfloored.explanation
    );
    let (judged, last) = read("proactive; oursby=counted");
    assert_decides(
        &last,
        2,
        "hindsight floor: over 40 min a static fleet of 2 replicas would have served 100 % of the demand for 1.33 replica-hours, ours 70 % for 1.85 (fluid model, ours by the lower of it and the engines' count, oursby=counted;",
    );
    assert!(
        (judged.ours_served_percent - 70.0).abs() < 1e-3,
        "{judged:?}"
    );
    assert!(
        judged.describe().contains(
            "ours served 70 % of the demand (100 % by the fluid model, judged by the engines' count"
        ),
        "{}",
        judged.describe()
    );
    // First tokens over the TTFT SLO count too: 60 in the minute's window, 45 of them within
    // 1 s and none between 1 and 2.5 s, so 15 over the SLO of 2 s, 0.25 per second, beside the
    // 3 aborted.
    s.fleet.finished_window_seconds = Some(60.0);
    s.fleet.ttft_buckets = vec![
        Bucket {
            le: 1.0,
            count: 45.0,
        },
        Bucket {
            le: 2.5,
            count: 45.0,
        },
        Bucket {
            le: f64::INFINITY,
            count: 60.0,
        },
    ];
    assert_eq!(counted_misses(&s.fleet, Some(2.0), Some(0.07)), Some(3.25));
    assert_eq!(counted_misses(&s.fleet, None, None), Some(3.0));
    // Requests over the ITL SLO per output token count too, the larger of them and the late
    // first tokens, since a burst makes the same requests late both ways: of the 60 finished,
    // 54 within 70 ms a token, so 6 over, 0.1 per second, fewer than the 15 late first tokens;
    // then 30 over, 0.5 per second, more.
    let per_token = |within: f64| {
        vec![
            Bucket {
                le: 0.07,
                count: within,
            },
            Bucket {
                le: f64::INFINITY,
                count: 60.0,
            },
        ]
    };
    s.fleet.request_tpot_buckets = per_token(54.0);
    assert_eq!(counted_misses(&s.fleet, Some(2.0), Some(0.07)), Some(3.25));
    assert_eq!(counted_misses(&s.fleet, None, Some(0.07)), Some(3.1));
    s.fleet.request_tpot_buckets = per_token(30.0);
    assert_eq!(counted_misses(&s.fleet, Some(2.0), Some(0.07)), Some(3.5));
    // Engines that expose no finished reason and no latency histogram give no count.
    assert_eq!(
        counted_misses(&fleet(2, 10.0, 8.0).fleet, Some(2.0), Some(0.07)),
        None
    );
    let mut r = Run::new("proactive", 2);
    r.steady(40 * 60, &fleet(2, 10.0, 8.0));
    assert_eq!(r.proactive.hindsight().unwrap().ours_counted_percent, None);
}

#[test]
fn under_missprice_a_hindsight_floor_is_held_until_its_rent_passes_the_misses_it_saves() {
    // Bursts until minute 100, then 5 req/s, one replica's load; the floor is never let go
    // by time (`floorlapse=0`), only by its price.
    let metadata =
        "proactive; capacity=10; startup=300; peak=0; periodic=off; hold=0; floorlapse=0";
    let held = bursts_until(metadata, 200, 100);
    // At 3 GPU-seconds a miss the budget outlasts the 14 minutes between bursts, not the
    // hundred quiet minutes after them.
    let cheap = bursts_until(&format!("{metadata}; missprice=3"), 200, 100);
    let dear = bursts_until(&format!("{metadata}; missprice=1000"), 200, 100);
    let at = |run: &[(u64, Decision)], t: u64| decision_at(run, t);
    let late = 190 * 60;
    let kept = at(&held, late);
    assert!(kept.target_replicas >= 2, "{}", kept.explanation);
    // A dear miss holds the floor as without a price, and says how much of its budget is spent.
    let dear_late = at(&dear, late);
    assert_eq!(dear_late.target_replicas, kept.target_replicas);
    assert!(
        dear_late
            .explanation
            .contains("replicas held beyond the need for")
            && dear_late.explanation.contains("(missprice=1000)"),
        "{}",
        dear_late.explanation
    );
    // A cheap one lets it go once the rent passes what its fleet's extra service is worth,
    // after the bursts stopped and before the run ends.
    let gone = at(&cheap, late);
    assert_eq!(gone.target_replicas, 1, "{}", gone.explanation);
    assert!(
        gone.explanation.contains("replicas set aside: it held")
            && gone.explanation.contains("(missprice=3)"),
        "{}",
        gone.explanation
    );
    let first = cheap
        .iter()
        .position(|(_, d)| d.explanation.contains("set aside: it held"))
        .expect("the floor priced out");
    assert!(cheap[first].0 >= 100 * 60, "{:?}", cheap[first]);
    // Until then the two prices decide alike.
    for ((t, c), (_, d)) in cheap.iter().zip(&dear).take(first) {
        assert_eq!(c.target_replicas, d.target_replicas, "at {t} s");
    }
    // While the bursts recur, each one needs the floor and its rent starts again: the same
    // price never sets it aside.
    let recurring = bursts_until(&format!("{metadata}; missprice=3"), 200, 200);
    assert!(
        never_says(&recurring, "set aside: it held"),
        "a recurring burst's floor priced out"
    );
    assert!(
        recurring
            .iter()
            .any(|(_, d)| d.explanation.contains("held beyond the need for")),
        "the rent was never counted"
    );
}

#[test]
fn an_inherited_hindsight_floor_keeps_the_requests_missprice_prices() {
    let metadata = "proactive; capacity=10; startup=300; peak=0; periodic=off; hold=0; floorlapse=0; missprice=3";
    // A floor of 3 replicas whose fleet would have served 400 requests beyond ours, kept for
    // the next pod.
    let mut old = Run::new(metadata, 3);
    old.proactive.static_floor = Some(StaticFloor {
        served_beyond: 400.0,
        ..named_floor(3, 30.0)
    });
    old.at(0, &fleet(3, 5.0, 2.0));
    let record = old.proactive.persisted();
    assert_eq!(
        record.hindsight_floor.unwrap().served_beyond_requests,
        Some(400.0)
    );
    // The next pod holds it against that budget, 3 GPU-seconds times 400 requests: two
    // replicas beyond the need of one, 1,200 replica-seconds in about ten minutes.
    let run = |record: &Persisted| {
        let mut next = Run::new(metadata, 3);
        next.proactive.inherit(record);
        (0..=1_200)
            .step_by(2)
            .map(|t| (t, next.at(t, &fleet(3, 5.0, 2.0))))
            .collect::<Vec<_>>()
    };
    let inherited = run(&record);
    let (t, first) = inherited
        .iter()
        .find(|(_, d)| d.explanation.contains("set aside: it held"))
        .expect("the inherited floor priced out");
    assert!((540..=660).contains(t), "at {t} s: {}", first.explanation);
    assert!(
        first.explanation.contains(
            "times the 400 requests its fleet would have served beyond ours (missprice=3)"
        ),
        "{}",
        first.explanation
    );
    // Set aside, the fleet scales in to the need behind the calm period.
    assert_eq!(inherited.last().unwrap().1.target_replicas, 1);
    // A record written before the count was kept is held as without the setting.
    let older = Persisted {
        hindsight_floor: record.hindsight_floor.map(|f| PersistedFloor {
            served_beyond_requests: None,
            ..f
        }),
        ..record.clone()
    };
    let held = run(&older);
    assert!(
        never_says(&held, "set aside"),
        "an uncounted floor priced out"
    );
    assert_eq!(held.last().unwrap().1.target_replicas, 3);
}

#[test]
fn under_lapseif_peak_a_floor_lapses_only_once_its_peak_is_gone() {
    // `lapsegap=0`: the lapse by `lapseif` alone (under `lapsegap`, bursts at more than half
    // the named peak keep the floor whatever `lapseif` says).
    let metadata = "proactive; capacity=10; startup=300; peak=0; periodic=off; hold=0; \
                    floorlapse=1800; lapsegap=0";
    // Bursts of 60 req/s name the floor; from minute 100 they come back at 35 req/s, within
    // what one replica fewer than the floor carries and above half the 60 that named it, and
    // from minute 160 they stop.
    let height = |t: u64| match t / 60 {
        0..100 => 60.0,
        100..160 => 35.0,
        _ => 5.0,
    };
    let fewer = bursts_of(&format!("{metadata}; lapseif=fewer"), 240, height);
    let peak = bursts_of(&format!("{metadata}; lapseif=peak"), 240, height);
    let floor = decision_at(&peak, 128 * 60);
    assert!(
        floor.explanation.contains("hindsight floor: over"),
        "{}",
        floor.explanation
    );
    let k = floor.target_replicas;
    let lapsed = |run: &[(u64, Decision)]| {
        run.iter()
            .find(|(_, d)| {
                d.explanation
                    .contains("set aside: the demand over the last")
            })
            .map(|(t, d)| (*t, d.explanation.clone()))
    };
    // One replica fewer carries the lower bursts: `fewer` lets the floor go while they recur.
    let (t, why) = lapsed(&fewer).expect("the floor lapses under lapseif=fewer");
    assert!((130 * 60..160 * 60).contains(&t), "{t}: {why}");
    assert!(
        why.contains(&format!("within what {} replicas carry", k - 1)),
        "{why}"
    );
    // They reach more than half the named peak: `peak` holds the floor until half an hour
    // after the last of them.
    let (t, why) = lapsed(&peak).expect("the floor lapses under lapseif=peak");
    assert!(t >= 160 * 60 + 1800, "{t}: {why}");
    assert!(
        why.contains("below half the") && why.contains("lapseif=peak"),
        "{why}"
    );
    assert!(decision_at(&peak, 150 * 60).target_replicas >= k);
    assert_eq!(decision_at(&peak, 235 * 60).target_replicas, 1);
    assert!(
        parse_policy("proactive; lapseif=peak")
            .unwrap()
            .unwrap()
            .lapse_below_peak
    );
    assert!(parse_policy("proactive; lapseif=half").is_err());
    // The default since the sixty-second round.
    let default = parse_policy("proactive").unwrap().unwrap();
    assert_eq!(default.floor_lapse_seconds, 2400.0);
    assert!(default.lapse_below_peak);
}

#[test]
fn under_troughs_pattern_the_hindsight_floor_is_held_for_the_bursts_not_between_them() {
    // One start-up ahead (`ahead=1`): in this model's 20-minute period a trough two start-ups
    // long never comes. The ceiling and the hold are off in both, to see the floor alone. The
    // pattern is in phase with the load, so `troughnow=below` (the default) still finds the
    // troughs.
    let floor = late_bursts(
        "proactive; capacity=10; startup=300; ceiling=off; hold=0; troughs=floor",
        240,
    );
    let troughs = late_bursts(
        "proactive; capacity=10; startup=300; ceiling=off; hold=0; troughs=pattern; ahead=1",
        240,
    );
    // The two are the same until the floor is first set aside.
    let first = same_until(&floor, &troughs, "set aside");
    let said = &troughs[first].1.explanation;
    assert!(
        said.contains("below its mean of") && said.contains("(troughs=pattern)"),
        "{said}"
    );
    // The last hour: bursts every 20 minutes from minute 14 of each period. Between them the
    // floor costs replicas that the pattern does without; at each burst's start the fleet the
    // pattern asked for a start-up ahead is ready (at least the floor's size).
    let at = |run: &[(u64, Decision)], t: u64| decision_at(run, t).target_replicas;
    let floor_size = at(&floor, 230 * 60);
    assert!(floor_size >= 2, "{floor_size}");
    let mid_trough = 226 * 60;
    assert!(
        at(&troughs, mid_trough) < floor_size,
        "{}",
        decision_at(&troughs, mid_trough).explanation
    );
    for burst in [194, 214, 234] {
        assert!(
            at(&troughs, burst * 60) >= floor_size,
            "minute {burst}: {}",
            decision_at(&troughs, burst * 60).explanation
        );
    }
    assert!(replica_time_from(&troughs, 180) < replica_time_from(&floor, 180));
}

#[test]
fn under_troughs_pattern_the_peak_floor_is_set_aside_in_the_troughs_too() {
    // The peak floor alone (the hindsight only advises; no ceiling, no hold), at the capacity
    // estimate, held for an hour.
    let metadata = "proactive; capacity=10; startup=300; hindsight=advice; ceiling=off; hold=0; \
                    peak=3600; peakat=full";
    let floor = late_bursts(&format!("{metadata}; troughs=floor"), 240);
    let troughs = late_bursts(&format!("{metadata}; troughs=pattern; ahead=1"), 240);
    let first = same_until(&floor, &troughs, "peak floor of");
    let said = &troughs[first].1.explanation;
    assert!(
        said.contains("set aside: the repeating pattern expects")
            && said.contains("(troughs=pattern)"),
        "{said}"
    );
    let at = |run: &[(u64, Decision)], t: u64| decision_at(run, t).target_replicas;
    let floor_size = at(&floor, 226 * 60);
    assert!(floor_size >= 2, "{floor_size}");
    assert!(
        at(&troughs, 226 * 60) < floor_size,
        "{}",
        decision_at(&troughs, 226 * 60).explanation
    );
    for burst in [194, 214, 234] {
        assert!(
            at(&troughs, burst * 60) >= floor_size,
            "minute {burst}: {}",
            decision_at(&troughs, burst * 60).explanation
        );
    }
    assert!(replica_time_from(&troughs, 180) < replica_time_from(&floor, 180));
}

#[test]
fn under_ceiling_seen_a_fleet_at_its_limit_is_never_capped() {
    // In this model the floor's fleet breaches the SLO on every burst and the demand reads
    // only what it serves: the hindsight names a fleet too small for the bursts, and a cap at
    // it would confirm itself. The ceiling holds only within the SLO and what the fleet serves:
    // the fleet still grows beyond the first fleet named.
    let ceiling = late_bursts(
        "proactive; capacity=10; startup=300; periodic=off; ceiling=seen",
        240,
    );
    let (first, named) = ceiling
        .iter()
        .find_map(|(t, d)| {
            let rest = d.explanation.split("a static fleet of ").nth(1)?;
            let n: u32 = rest.split(' ').next()?.parse().ok()?;
            Some((*t, n))
        })
        .expect("a floor from hindsight within four hours");
    // Within a burst a cap holds only at a fleet that serves the burst's 40 req/s.
    for (t, d) in &ceiling {
        let capped_at = d
            .explanation
            .split("need capped at the hindsight's fleet of ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next()?.parse::<u32>().ok());
        if let Some(k) = capped_at.filter(|_| t % 1200 >= 840) {
            assert!(k * 10 >= 40, "at {t} s: {}", d.explanation);
        }
    }
    for burst in (first / 1200 + 1)..12 {
        let most = ceiling
            .iter()
            .filter(|(t, _)| t / 1200 == burst && t % 1200 >= 840)
            .map(|(_, d)| d.target_replicas)
            .max()
            .unwrap();
        assert!(most > named, "burst {burst}: {most} <= {named}");
    }
}

/// A hindsight floor of `replicas` named at the start, from a two-hour history whose demand
/// peaked at `peak_demand` and which that fleet served whole.
fn named_floor(replicas: u32, peak_demand: f64) -> StaticFloor {
    StaticFloor {
        fleet: StaticFleet {
            replicas,
            served_percent: 100.0,
            replica_hours: 2.0 * f64::from(replicas),
        },
        ours_served_percent: 90.0,
        ours_replica_hours: 2.5 * f64::from(replicas),
        minutes: 120,
        peak_demand,
        capacity: 10.0,
        served_beyond: f64::NAN,
        seen: Duration::ZERO,
        earlier: Duration::ZERO,
    }
}

#[test]
fn under_ceiling_seen_the_hindsight_fleet_is_enough_within_the_demand_it_was_judged_on() {
    // A hindsight floor of 4 replicas, named from a history whose demand peaked at 45 req/s;
    // 4 ready replicas serve 40 req/s within the SLO. At 10 req/s per replica and 80 % the
    // demand alone asks for 5.
    let run = |metadata: &str, rps: f64| {
        let mut r = Run::new(metadata, 4);
        r.proactive.static_floor = Some(named_floor(4, 45.0));
        r.steady(120, &fleet(4, rps, 2.0 * rps))
    };
    let metadata = "proactive; capacity=10; startup=300; periodic=off";
    let free = run(&format!("{metadata}; ceiling=off"), 40.0);
    assert_eq!(free.target_replicas, 5, "{}", free.explanation);
    let capped = run(&format!("{metadata}; ceiling=seen"), 40.0);
    assert_eq!(capped.target_replicas, 4, "{}", capped.explanation);
    assert!(
        capped.explanation.contains(
            "need capped at the hindsight's fleet of 4 replicas: the demand now, 40 req/s, is within what they serve at the capacity estimate (40 req/s) and within the 45 req/s"
        ),
        "{}",
        capped.explanation
    );
    // Beyond what the fleet serves at the capacity estimate, or beyond the demand it was
    // judged on, the forecast decides again.
    let beyond = run(&format!("{metadata}; ceiling=seen"), 50.0);
    assert!(beyond.target_replicas > 4, "{}", beyond.explanation);
}

#[test]
fn under_ceiling_breach_and_history_the_hindsight_fleet_caps_through_a_breach() {
    // The floor of 4 replicas above, judged on a history that peaked at 45 req/s; now the 4
    // ready replicas serve 40 req/s with P95 TTFT over its SLO. `seen` lifts the cap while the
    // breach lasts; `breach` and `history` hold it, and say which setting did.
    let run = |metadata: &str, rps: f64| {
        let mut r = Run::new(metadata, 4);
        r.proactive.static_floor = Some(named_floor(4, 45.0));
        let mut s = fleet(4, rps, 2.0 * rps);
        s.fleet.ttft_seconds.p95 = Some(5.0);
        r.steady(120, &s)
    };
    let metadata = "proactive; capacity=10; startup=300; periodic=off";
    let seen = run(&format!("{metadata}; ceiling=seen"), 40.0);
    assert!(seen.target_replicas > 4, "{}", seen.explanation);
    assert!(
        !seen.explanation.contains("need capped"),
        "{}",
        seen.explanation
    );
    for setting in ["breach", "history"] {
        let capped = run(&format!("{metadata}; ceiling={setting}"), 40.0);
        assert!(
            capped
                .explanation
                .contains("need capped at the hindsight's fleet of 4 replicas"),
            "{setting}: {}",
            capped.explanation
        );
        assert!(
            capped.explanation.contains(&format!("(ceiling={setting};")),
            "{setting}: {}",
            capped.explanation
        );
    }
    // `at99` caps through the breach at a fleet found serving 99 % of the demand, and not at
    // the largest fleet that merely beat ours (88 % here).
    let at99 = run(&format!("{metadata}; ceiling=at99"), 40.0);
    assert!(
        at99.explanation.contains("(ceiling=at99;"),
        "{}",
        at99.explanation
    );
    let mut r = Run::new(&format!("{metadata}; ceiling=at99"), 4);
    r.proactive.static_floor = Some(StaticFloor {
        fleet: StaticFleet {
            served_percent: 88.0,
            ..named_floor(4, 45.0).fleet
        },
        ..named_floor(4, 45.0)
    });
    let mut s = fleet(4, 40.0, 80.0);
    s.fleet.ttft_seconds.p95 = Some(5.0);
    let weak = r.steady(120, &s);
    assert!(weak.target_replicas > 4, "{}", weak.explanation);
    assert!(
        !weak.explanation.contains("need capped"),
        "{}",
        weak.explanation
    );
    // Beyond the history's 45 req/s no setting caps.
    for setting in ["breach", "history", "at99"] {
        let beyond = run(&format!("{metadata}; ceiling={setting}"), 50.0);
        assert!(
            !beyond.explanation.contains("need capped"),
            "{setting}: {}",
            beyond.explanation
        );
    }
}

#[test]
fn under_floorsize_latest_a_smaller_fleet_named_later_lowers_the_floor() {
    // A floor of 6 replicas named earlier; the demand is 20 req/s, which 2 replicas serve at
    // 10 req/s each (3 at 80 %). Short of replicas at first and holding 6 after, ours is
    // beaten by a static fleet of 2 once the comparison has half an hour of history.
    let run = |metadata: &str| {
        let mut r = Run::new(metadata, 6);
        r.proactive.static_floor = Some(named_floor(6, 60.0));
        let mut target = 6usize;
        let mut out = Vec::new();
        for t in (0..=60 * 60).step_by(2) {
            // The first ten minutes one replica is ready and serves half the demand: ours
            // loses some, so a static fleet can beat it.
            let ready = if t < 600 { 1 } else { target };
            let served = 20.0_f64.min(10.0 * ready as f64);
            let mut s = fleet(ready, served, 2.0 * served);
            if served < 20.0 {
                s.fleet.ttft_seconds.p95 = Some(5.0);
                // The unserved half queues: the demand reads 20 req/s, not what is served.
                s.fleet.queue_depth = 10.0 * t as f64;
            }
            let d = r.at(t, &s);
            target = d.target_replicas as usize;
            out.push((t, d));
        }
        out
    };
    // The floor is not let go in this hour (`floorlapse=0`): the test is which fleet it holds.
    let metadata = "proactive; capacity=10; startup=300; ceiling=off; floorlapse=0";
    let largest = run(metadata);
    let latest = run(&format!("{metadata}; floorsize=latest"));
    let end = |r: &[(u64, Decision)]| r.last().unwrap().1.clone();
    assert_eq!(
        end(&largest).target_replicas,
        6,
        "{}",
        end(&largest).explanation
    );
    assert_eq!(
        end(&latest).target_replicas,
        3,
        "{}",
        end(&latest).explanation
    );
    assert!(
        end(&latest)
            .explanation
            .contains("a static fleet of 2 replicas would have served 100 %"),
        "{}",
        end(&latest).explanation
    );
    // Before the first comparison the two are the same.
    for ((t, a), (_, b)) in largest
        .iter()
        .zip(&latest)
        .take_while(|(x, _)| x.0 < 30 * 60)
    {
        assert_eq!(a.target_replicas, b.target_replicas, "at {t} s");
    }
}

#[test]
fn under_trendcap_pattern_a_repeating_bursts_onset_is_not_extrapolated_beyond_its_level() {
    // 10 req/s per replica at the SLO (8 at 80 %); 6 req/s with 8-minute bursts of 40 req/s
    // every 45 minutes from minute 20; the third burst (minute 110) is the one looked at.
    let run = |metadata: &str| {
        let mut r = Run::new(metadata, 1);
        let mut ready = 1usize;
        let mut third = Vec::new();
        for t in (0..=118 * 60).step_by(2) {
            let (mut s, offered) = repeating_bursts(t, ready);
            let served = s.fleet.requests_per_second.unwrap_or(0.0);
            s.fleet.queue_depth = 10.0 * (offered - served);
            // The onset's in-flight growth: the running requests climb with the demand.
            s.fleet.running = 2.0 * served;
            let d = r.at(t, &s);
            ready = d.target_replicas as usize;
            if t >= 110 * 60 {
                third.push(d);
            }
        }
        third
    };
    let free = run("proactive; capacity=10; startup=300; hindsight=advice; trendcap=off");
    // The default since the fifty-ninth round.
    let capped = run("proactive; capacity=10; startup=300; hindsight=advice");
    let most = |ds: &[Decision]| ds.iter().map(|d| d.target_replicas).max().unwrap();
    // The onset reads 41 req/s (the in-flight growth counts in the demand): the capped
    // forecast stays there, 6 replicas at 8 req/s each, where the trend alone climbs on.
    assert_eq!(most(&capped), 6, "{:?}", capped.last());
    assert!(
        most(&free) > most(&capped),
        "{} vs {}",
        most(&free),
        most(&capped)
    );
    let said = capped
        .iter()
        .find(|d| d.explanation.contains("trendcap=pattern"))
        .expect("the cap is explained where it acted");
    assert!(
        said.explanation.contains(
            "the higher of the demand now and the repeating pattern's level one period ago"
        ),
        "{}",
        said.explanation
    );
}

/// The fleets the hindsight floors of a run name, in order, with when each was first named.
fn floors(run: &[(u64, Decision)]) -> Vec<(u64, u32)> {
    let mut out: Vec<(u64, u32)> = Vec::new();
    for (t, d) in run {
        let Some(k) = d
            .explanation
            .split_once("hindsight floor: over ")
            .and_then(|(_, rest)| rest.split_once("a static fleet of "))
            .and_then(|(_, rest)| rest.split_once(' '))
            .and_then(|(k, _)| k.parse().ok())
        else {
            continue;
        };
        if out.last().is_none_or(|l| l.1 != k) {
            out.push((*t, k));
        }
    }
    out
}

#[test]
fn under_named_cheapest_the_floor_is_the_smallest_fleet_that_beats_ours() {
    // A fleet planned at 40 % and held for four start-ups spends enough for more than one
    // static fleet to beat it: the first comparison (at 30 minutes) finds that four replicas
    // serve 99 % and beat ours, and so do three.
    let metadata = "proactive; capacity=10; startup=300; hold=4; utilization=0.4";
    let at99 = floors(&late_bursts(&format!("{metadata}; named=at99"), 180));
    let cheapest = floors(&late_bursts(&format!("{metadata}; named=cheapest"), 180));
    assert_eq!(at99.first(), Some(&(1802, 4)), "{at99:?}");
    assert_eq!(cheapest.first(), Some(&(1802, 3)), "{cheapest:?}");
    // Every fleet named is at most what the at-99 rule named by then.
    for (t, k) in &cheapest {
        let named_99 = at99.iter().filter(|f| f.0 <= *t).map(|f| f.1).max();
        assert!(
            named_99.is_some_and(|k99| *k <= k99),
            "{t} s: {k}; {at99:?}"
        );
    }
}

#[test]
fn under_holdtroughs_pattern_a_held_bursts_capacity_yields_to_the_patterns_trough() {
    // One start-up ahead, the ceiling off, so the floor and the hold alone size the troughs.
    let keep = late_bursts(
        "proactive; capacity=10; startup=300; ceiling=off; hold=3; ahead=1; holdtroughs=keep",
        240,
    );
    let yields = late_bursts(
        "proactive; capacity=10; startup=300; ceiling=off; hold=3; ahead=1; holdtroughs=pattern",
        240,
    );
    same_until(&keep, &yields, "(holdtroughs=pattern)");
    let at = |run: &[(u64, Decision)], t: u64| decision_at(run, t).target_replicas;
    // The last hour, bursts from minute 14 of each 20: five minutes after a burst the held
    // fleet is released in the trough, and the floor is back (one start-up and two minutes
    // ahead) before the next burst, which meets the fleet it met with the hold kept.
    for trough in [185, 205, 225] {
        assert!(
            at(&yields, trough * 60) < at(&keep, trough * 60),
            "minute {trough}: {}",
            decision_at(&yields, trough * 60).explanation
        );
    }
    for burst in [194, 214, 234] {
        assert_eq!(
            at(&yields, burst * 60),
            at(&keep, burst * 60),
            "minute {burst}"
        );
    }
    assert!(replica_time_from(&yields, 180) < replica_time_from(&keep, 180));
}

#[test]
fn under_early_a_pattern_that_repeats_strongly_is_found_from_one_and_a_half_periods() {
    // 8-minute bursts of 9 req/s every 45 minutes from minute 20 over 2 req/s: one replica
    // serves them (10 req/s), so the demand history holds the arrivals themselves.
    let bursts = |t: u64| match (t / 60).checked_sub(20) {
        Some(m) if m % 45 < 8 => 9.0,
        _ => 2.0,
    };
    let two = offered_load("proactive; capacity=10; startup=300; early=0", 150, bursts);
    let early = offered_load("proactive; capacity=10; startup=300", 150, bursts);
    let marker = "found from 1.5 periods of history (early=1.5)";
    let first = same_until(&two, &early, marker);
    let found = |run: &[(u64, Decision)]| {
        run.iter()
            .find(|(_, d)| d.explanation.contains("repeats every 45 min"))
            .map(|(t, _)| *t)
            .expect("the pattern is found")
    };
    // Found early after the second burst (at 65 minutes), a quarter of an hour before two
    // periods of history find it.
    assert_eq!(found(&early), early[first].0);
    assert!(early[first].0 >= 65 * 60, "{}", early[first].0);
    assert!(
        found(&early) + 15 * 60 <= found(&two),
        "{} {}",
        found(&early),
        found(&two)
    );
    // Once two periods have passed the pattern is the two-period search's.
    let late = decision_at(&early, 140 * 60);
    assert!(
        late.explanation
            .contains("repeats every 45 min (correlation"),
        "{late:?}"
    );
    assert!(!late.explanation.contains(marker), "{late:?}");
}

/// Five replicas busy for ten minutes, then a trough; from minute 14.5 to 16 the in-flight
/// requests grow by one a second (a load returning, not yet in the rate window), then stop.
fn trough_then_returning(metadata: &str) -> Vec<(u64, Decision)> {
    let mut r = Run::new(metadata, 5);
    let mut out = Vec::new();
    let mut in_flight = 10.0;
    for t in (0..=1200).step_by(2) {
        let s = if t < 600 {
            fleet(5, 40.0, 80.0)
        } else {
            if (870..960).contains(&t) {
                in_flight += 2.0;
            }
            fleet(5, 5.0, in_flight)
        };
        out.push((t, r.at(t, &s)));
    }
    out
}

#[test]
fn under_scalein_steady_a_due_scale_in_waits_while_in_flight_requests_grow() {
    let metadata = "proactive; capacity=10; startup=300; hold=0; release=0";
    let any = trough_then_returning(&format!("{metadata}; scalein=any"));
    let steady = trough_then_returning(&format!("{metadata}; scalein=steady"));
    let first_down = |run: &[(u64, Decision)]| {
        run.iter()
            .find(|(_, d)| d.target_replicas < 5)
            .map(|(t, d)| (*t, d.target_replicas))
    };
    let (t_any, _) = first_down(&any).expect("a scale-in under scalein=any");
    let (t_steady, _) = first_down(&steady).expect("a scale-in under scalein=steady");
    assert!(
        (870..960).contains(&t_any),
        "due while the in-flight requests grow: {t_any}"
    );
    assert!(t_steady >= 960, "{t_steady}");
    let waited = same_until(&any, &steady, "(scalein=steady)");
    assert_eq!(
        steady[waited].0, t_any,
        "it waits exactly when the scale-in was due"
    );
    assert!(
        steady[waited]
            .1
            .explanation
            .contains("in-flight requests growing"),
        "{}",
        steady[waited].1.explanation
    );
}

#[test]
fn what_the_policy_learned_names_its_sources() {
    let fresh = Run::new("proactive", 1);
    let l = fresh.proactive.learned();
    assert_eq!((l.capacity_per_replica, l.capacity_source), (None, "none"));
    assert!(!l.capacity_tested);
    assert_eq!((l.startup_seconds, l.startup_source), (300.0, "default"));
    let set = Run::new("proactive; capacity=10; startup=240", 1);
    let l = set.proactive.learned();
    assert_eq!(
        (l.capacity_per_replica, l.capacity_source),
        (Some(10.0), "prior")
    );
    assert!(l.capacity_tested, "a prior is measured");
    assert_eq!((l.startup_seconds, l.startup_source), (240.0, "set"));
    // Two replicas serving 12 req/s each within the SLO for ten minutes: the estimate moves
    // from the prior to what was served, and says it was learned.
    let mut run = Run::new("proactive; capacity=10; startup=240", 2);
    run.steady(600, &fleet(2, 24.0, 4.0));
    let l = run.proactive.learned();
    assert_eq!(
        (l.capacity_per_replica, l.capacity_source),
        (Some(12.0), "learned")
    );
    // Without a prior, light load's estimate is untested until a breach or a queue meets it.
    let mut light = Run::new("proactive; startup=240", 2);
    light.steady(600, &fleet(2, 4.0, 1.0));
    assert!(!light.proactive.learned().capacity_tested);
    for t in (602..=720).step_by(2) {
        light.at(t, &queued(2, 16.0, 40.0));
    }
    assert!(light.proactive.learned().capacity_tested);
}

#[test]
fn a_new_pod_starts_from_what_an_earlier_one_persisted() {
    // An earlier pod served 12 req/s per replica within the SLO, then saw a queue that broke the
    // TTFT SLO (which corrects its estimate) and learned a start-up time from its asks.
    let mut earlier = Run::new("proactive", 2);
    earlier.steady(600, &fleet(2, 24.0, 4.0));
    let mut ask = fleet(2, 24.0, 4.0);
    ask.fleet.queue_depth = 40.0;
    ask.fleet.ttft_seconds.p95 = Some(3.0);
    let mut asked_at = None;
    for t in (602..=1_400).step_by(2) {
        let ready = if asked_at.is_some_and(|a| t >= a + 240) {
            3
        } else {
            2
        };
        let d = earlier.at(
            t,
            &FleetSignals {
                pods_healthy: ready,
                pods_total: ready,
                ..ask.clone()
            },
        );
        if asked_at.is_none() && d.target_replicas > 2 {
            asked_at = Some(t);
        }
    }
    let persisted = earlier.proactive.persisted();
    assert_eq!(persisted.capacity_per_replica, earlier.proactive.capacity());
    assert!(persisted.capacity_verified.is_some(), "{persisted:?}");
    let startup = persisted
        .startup_seconds
        .expect("a start-up time was learned");
    // Its history: the decisions, two seconds apart, with a stable fleet serving load (not
    // the rate window after the third replica arrived).
    let observed = persisted.observed_seconds;
    assert!(observed > 1_000.0 && observed < 1_400.0, "{observed}");
    // A fresh pod has no estimate; one that inherits starts from the earlier pod's, and says
    // where it came from.
    let mut fresh = Run::new("proactive", 2);
    assert_eq!(fresh.proactive.learned().capacity_source, "none");
    fresh.proactive.inherit(&persisted);
    let l = fresh.proactive.learned();
    assert_eq!(l.capacity_per_replica, persisted.capacity_per_replica);
    assert_eq!(
        (l.capacity_source, l.startup_source),
        ("inherited", "inherited")
    );
    assert_eq!(l.startup_seconds, startup);
    assert_eq!(
        l.observed_seconds, observed,
        "the history comes with the learning"
    );
    let d = fresh.at(0, &fleet(2, 24.0, 4.0));
    assert!(
        d.explanation
            .contains("per replica (inherited from another scaler pod)"),
        "{}",
        d.explanation
    );
    // A start-up time set in the metadata is not replaced, and junk is ignored.
    let mut set = Run::new("proactive; startup=120", 2);
    set.proactive.inherit(&persisted);
    assert_eq!(set.proactive.learned().startup_seconds, 120.0);
    let mut junk = Run::new("proactive", 2);
    junk.proactive.inherit(&Persisted {
        capacity_per_replica: Some(f64::NAN),
        capacity_verified: None,
        startup_seconds: Some(-1.0),
        observed_seconds: f64::NAN,
        hindsight_floor: None,
        light_share: None,
        demand_history: vec![],
    });
    let l = junk.proactive.learned();
    assert_eq!((l.capacity_source, l.startup_source), ("none", "default"));
    assert_eq!(l.observed_seconds, 0.0);
}

#[test]
fn under_inherit_verified_a_record_starts_no_higher_than_what_was_served() {
    // The other pod's probe left its estimate at 1.5 times the most it knew served.
    let record = Persisted {
        capacity_per_replica: Some(1.5),
        capacity_verified: Some(1.0),
        startup_seconds: None,
        observed_seconds: 3_600.0,
        hindsight_floor: None,
        light_share: None,
        demand_history: vec![],
    };
    let start = |metadata: &str, p: &Persisted| {
        let mut r = Run::new(metadata, 2);
        r.proactive.inherit(p);
        (
            r.proactive.capacity(),
            r.proactive.learned().capacity_source,
        )
    };
    assert_eq!(start("proactive", &record), (Some(1.5), "inherited"));
    assert_eq!(
        start("proactive; inherit=verified", &record),
        (Some(1.0), "inherited")
    );
    // An estimate below what was served (a breach lowered it) stays where it was; a record
    // without the most served starts at its estimate.
    let lowered = Persisted {
        capacity_verified: Some(2.0),
        ..record.clone()
    };
    assert_eq!(start("proactive; inherit=verified", &lowered).0, Some(1.5));
    let older = Persisted {
        capacity_verified: None,
        ..record.clone()
    };
    assert_eq!(start("proactive; inherit=verified", &older).0, Some(1.5));
}

#[test]
fn the_observed_history_counts_only_a_stable_fleet_serving_load() {
    // Ten minutes of an idle fleet teach nothing about capacity, and add no history.
    let mut idle = Run::new("proactive", 2);
    idle.steady(600, &fleet(2, 0.0, 0.0));
    assert_eq!(idle.proactive.learned().observed_seconds, 0.0);
    // Ten minutes serving load: the history is the time since the fleet read stable.
    let mut busy = Run::new("proactive", 2);
    busy.steady(600, &fleet(2, 24.0, 4.0));
    let observed = busy.proactive.learned().observed_seconds;
    assert!(observed > 500.0 && observed <= 600.0, "{observed}");
    // Ten minutes of missed cycles add nothing: the next decision's rate window is not full.
    busy.at(1_200, &fleet(2, 24.0, 4.0));
    assert_eq!(busy.proactive.learned().observed_seconds, observed);
}

#[test]
fn a_pod_that_inherits_the_learning_holds_the_hindsight_floor_for_the_rest_of_its_day() {
    // A pod holds a floor of 5 replicas a comparison found an hour in; at 2 h it is replaced.
    let metadata = "proactive; capacity=10; startup=300; periodic=off";
    let light = fleet(1, 5.0, 2.0);
    let mut old = Run::new(metadata, 1);
    old.proactive.static_floor = Some(StaticFloor {
        seen: Duration::from_secs(3_600),
        ..named_floor(5, 45.0)
    });
    let held = old.at(7_200, &light);
    assert_eq!(held.target_replicas, 5, "{}", held.explanation);
    let record = old.proactive.persisted();
    let kept = record.hindsight_floor.expect("the floor is kept");
    assert_eq!((kept.replicas, kept.age_seconds), (5, 3_600.0));
    assert_eq!(kept.peak_demand, 45.0);
    // It reads back as JSON; a record written before the floor was kept reads without one.
    let json = serde_json::to_string(&record).unwrap();
    assert_eq!(serde_json::from_str::<Persisted>(&json).unwrap(), record);
    let older: Persisted = serde_json::from_str(
        r#"{"capacity_per_replica":10.0,"capacity_verified":null,"startup_seconds":null}"#,
    )
    .unwrap();
    assert_eq!(older.hindsight_floor, None);

    // The new pod's clock starts at zero; the record was read ten minutes after it was taken.
    let start = |metadata: &str, p: &Persisted| {
        let mut r = Run::new(metadata, 1);
        r.proactive.inherit(p);
        r.at(0, &light)
    };
    let d = start(metadata, &record.clone().aged(600.0));
    assert_eq!(d.target_replicas, 5, "{}", d.explanation);
    assert!(
        d.explanation
            .contains("last found 4200 s ago by an earlier pod, whose floor this is"),
        "{}",
        d.explanation
    );
    // Without the floor the same pod sizes the light load alone.
    let bare = Persisted {
        hindsight_floor: None,
        light_share: None,
        demand_history: vec![],
        ..record.clone()
    };
    assert_eq!(start(metadata, &bare).target_replicas, 1);
    // A day after it was found the floor is gone, and so it is under `hindsight=advice`.
    let day_old = record
        .clone()
        .aged(hindsight::WINDOW.as_secs_f64() - 3_600.0);
    assert_eq!(start(metadata, &day_old).target_replicas, 1);
    let advice = start(&format!("{metadata}; hindsight=advice"), &record);
    assert_eq!(advice.target_replicas, 1, "{}", advice.explanation);
    // A taken-up floor still expires at the end of its day on the new pod's clock.
    let mut new = Run::new(metadata, 1);
    new.proactive.inherit(&record.clone().aged(600.0));
    assert_eq!(new.at(0, &light).target_replicas, 5);
    let left = hindsight::WINDOW.as_secs() - 4_200;
    assert!(new.proactive.persisted().hindsight_floor.is_some());
    let late = new.at(left + 2, &light);
    assert!(
        !late.explanation.contains("hindsight floor"),
        "{}",
        late.explanation
    );
    assert_eq!(new.proactive.persisted().hindsight_floor, None);
    // Junk in a record is not held.
    for junk in [
        PersistedFloor {
            replicas: 0,
            ..kept
        },
        PersistedFloor {
            age_seconds: f64::NAN,
            ..kept
        },
        PersistedFloor {
            peak_demand: f64::INFINITY,
            ..kept
        },
    ] {
        let p = Persisted {
            hindsight_floor: Some(junk),
            ..record.clone()
        };
        assert_eq!(start(metadata, &p).target_replicas, 1, "{junk:?}");
    }
}

#[test]
fn under_floorat_estimate_a_floor_named_at_a_low_estimate_shrinks_as_the_estimate_rises() {
    // A floor of 6 replicas named at 10 req/s per replica: 60 req/s. The estimate now is 25
    // (a prior), and 2 ready replicas serve a light 10 req/s.
    let run = |metadata: &str| {
        let mut r = Run::new(metadata, 2);
        r.proactive.static_floor = Some(named_floor(6, 60.0));
        r.at(0, &fleet(2, 10.0, 4.0))
    };
    let metadata = "proactive; capacity=25; startup=300; periodic=off; ceiling=off";
    let named = run(metadata);
    assert_eq!(named.target_replicas, 6, "{}", named.explanation);
    // 60 req/s at 25 per replica: 3 replicas carry what the 6 carried.
    assert_decides(
        &run(&format!("{metadata}; floorat=estimate")),
        3,
        "named at 10 req/s per replica, what it carried needs fewer at 25 now (floorat=estimate) -> 3 replicas",
    );
    // An estimate below the one it was named at never grows the floor.
    let low = "proactive; capacity=5; startup=300; periodic=off; ceiling=off; floorat=estimate";
    let held = run(low);
    assert_eq!(held.target_replicas, 6, "{}", held.explanation);
    // Kept for the next pod with the estimate it was named at, and resized there too.
    let mut r = Run::new(&format!("{metadata}; floorat=estimate"), 2);
    r.proactive.static_floor = Some(named_floor(6, 60.0));
    r.at(0, &fleet(2, 10.0, 4.0));
    let p = r.proactive.persisted();
    assert_eq!(p.hindsight_floor.unwrap().capacity_per_replica, Some(10.0));
    let mut next = Run::new(&format!("{metadata}; floorat=estimate"), 2);
    next.proactive.inherit(&p);
    assert_eq!(next.at(0, &fleet(2, 10.0, 4.0)).target_replicas, 3);
    // A record without that estimate holds the named fleet.
    let older = Persisted {
        hindsight_floor: p.hindsight_floor.map(|f| PersistedFloor {
            capacity_per_replica: None,
            ..f
        }),
        ..p
    };
    let mut next = Run::new(&format!("{metadata}; floorat=estimate"), 2);
    next.proactive.inherit(&older);
    assert_eq!(next.at(0, &fleet(2, 10.0, 4.0)).target_replicas, 6);
}

#[test]
fn a_pod_that_inherits_the_learning_judges_a_first_token_tail_by_light_loads_share() {
    // Light load kept 62 % of first tokens within the TTFT SLO (long prompts' own prefill).
    let mut old = Run::new("proactive", 2);
    old.proactive.light_share = Some((0.62, Duration::from_secs(600)));
    let record = old.proactive.persisted();
    assert_eq!(record.light_share, Some(0.62));
    let json = serde_json::to_string(&record).unwrap();
    assert_eq!(serde_json::from_str::<Persisted>(&json).unwrap(), record);
    // A new pod, restarted under load, judges a tail by that bar at once.
    let mut new = Run::new("proactive", 2);
    new.proactive.inherit(&record);
    assert_eq!(new.proactive.light_bar(), Some(0.62 - TAIL_MARGIN));
    // Not under `tail=p95`, and not a share outside 0..1.
    let mut p95 = Run::new("proactive; tail=p95", 2);
    p95.proactive.inherit(&record);
    assert_eq!(p95.proactive.light_share, None);
    for junk in [1.5, -0.1, f64::NAN] {
        let mut r = Run::new("proactive", 2);
        r.proactive.inherit(&Persisted {
            light_share: Some(junk),
            demand_history: vec![],
            ..record.clone()
        });
        assert_eq!(r.proactive.light_share, None, "{junk}");
    }
}

#[test]
fn a_pod_that_inherits_the_demand_history_holds_the_peak_floor_of_a_burst_before_it_started() {
    // An old pod sees 40 req/s for five minutes, then 5 req/s for five more; at 10 minutes it
    // is replaced. Its peak floor (half an hour) holds 4 replicas for the burst.
    let metadata = "proactive; capacity=10; startup=300; periodic=off; hindsight=advice";
    let light = fleet(1, 5.0, 2.0);
    let mut old = Run::new(metadata, 4);
    for t in (0..300).step_by(2) {
        old.at(t, &fleet(4, 40.0, 20.0));
    }
    for t in (300..=600).step_by(2) {
        old.at(t, &light);
    }
    let record = old.proactive.persisted();
    // Whole minutes only (0-9; the tenth is still filling), oldest first, each with the
    // seconds since it began, the burst's at 40.
    let ages: Vec<u32> = record
        .demand_history
        .iter()
        .map(KeptMinute::seconds_ago)
        .collect();
    assert_eq!(ages, (1..=10).rev().map(|m| 60 * m).collect::<Vec<u32>>());
    assert_eq!(record.demand_history[0].2, 40.0);
    let json = serde_json::to_string(&record).unwrap();
    assert!(
        json.contains(r#""demand_history":[[600,40.0,40.0,4.0,"#),
        "{json}"
    );
    assert_eq!(serde_json::from_str::<Persisted>(&json).unwrap(), record);

    let start = |p: &Persisted| {
        let mut r = Run::new(metadata, 1);
        r.proactive.inherit(p);
        r.at(0, &light)
    };
    // The new pod's clock starts at zero, with the burst ten minutes behind it: held.
    let d = start(&record);
    assert_eq!(d.target_replicas, 4, "{}", d.explanation);
    assert!(d.explanation.contains("floor: peak"), "{}", d.explanation);
    // Without the history it sizes the light load alone; read 25 minutes later, the burst has
    // left the window.
    let bare = Persisted {
        demand_history: vec![],
        ..record.clone()
    };
    assert_eq!(start(&bare).target_replicas, 1);
    let late = record.clone().aged(25.0 * 60.0);
    assert_eq!(late.demand_history[0].seconds_ago(), 2_100);
    assert_eq!(start(&late).target_replicas, 1);
    // A record aged past a day keeps nothing of it.
    assert!(record.clone().aged(86_400.0).demand_history.is_empty());
    // A pod with a history of its own keeps it (a running pod adopting a peer's record).
    let mut running = Run::new(metadata, 1);
    running.steady(120, &light);
    running.proactive.inherit(&record);
    assert_eq!(running.at(122, &light).target_replicas, 1);
    // Junk entries are left out (not a number, a minute not complete, one begun over a day
    // ago); out of order ones too.
    let junk = Persisted {
        demand_history: vec![
            KeptMinute(300, f32::NAN, 40.0, 4.0, 4.0),
            KeptMinute(30, 40.0, 40.0, 4.0, 4.0),
            KeptMinute(180, 5.0, 5.0, 1.0, 1.0),
            KeptMinute(240, 40.0, 40.0, 4.0, 4.0),
            KeptMinute(200_000, 40.0, 40.0, 4.0, 4.0),
        ],
        ..record.clone()
    };
    assert_eq!(start(&junk).target_replicas, 1);
}

#[test]
fn an_inherited_minute_lands_in_the_minute_it_began_in_on_the_new_pods_clock() {
    // The old pod's record is taken 2 s before a minute ends (2,698 s); the new pod's clock
    // starts there. Its minutes begin 2 s later than the old pod's, so each kept minute is
    // the new pod's minute it began in: 2 s older than the record says, never a minute
    // younger (a minute late, a repeating pattern would no longer line up with itself).
    let metadata = "proactive; capacity=10; startup=300; periodic=off; hindsight=advice";
    let mut old = Run::new(metadata, 1);
    for t in (0..=2_698).step_by(2) {
        let rps = if (t / 60) % 3 == 0 { 6.0 } else { 2.0 };
        old.at(t, &fleet(1, rps, 1.0));
    }
    let record = old.proactive.persisted();
    assert_eq!(record.demand_history.len(), 44);
    assert_eq!(record.demand_history.last().unwrap().seconds_ago(), 118);
    let mut new = Run::new(metadata, 1);
    new.proactive.inherit(&record);
    let again = new.proactive.persisted();
    assert_eq!(again.demand_history.len(), record.demand_history.len());
    for (was, is) in record.demand_history.iter().zip(&again.demand_history) {
        assert_eq!(is.seconds_ago(), was.seconds_ago() + 2, "{was:?} -> {is:?}");
        assert_eq!((is.1, is.2), (was.1, was.2));
    }
}

#[test]
fn a_pod_that_inherits_a_repeating_pattern_sets_its_floors_aside_in_the_troughs() {
    // Ten minutes at 58 req/s every 45 minutes over 6 req/s: a pod that ran for 95 minutes
    // knows the pattern and, in a trough, lets it size the fleet instead of the peak floor. A
    // pod that inherits its history at minute 90 does the same at minute 95 (the trough's test
    // reads the same history as the pattern's forecast).
    let metadata = "proactive; capacity=12.77; startup=166";
    let rps = |t: u64| {
        if t % 2_700 >= 1_200 && t % 2_700 < 1_800 {
            58.0
        } else {
            6.0
        }
    };
    let set_aside = |d: &Decision| d.explanation.contains("set aside: the repeating pattern");
    let mut whole = Run::new(metadata, 5);
    let mut old = Run::new(metadata, 5);
    for t in (0..=5_398).step_by(2) {
        whole.at(t, &fleet(5, rps(t), 5.0));
        old.at(t, &fleet(5, rps(t), 5.0));
    }
    let mut new = Run::new(metadata, 5);
    new.proactive.inherit(&old.proactive.persisted());
    for t in (5_400..5_700).step_by(2) {
        whole.at(t, &fleet(5, rps(t), 5.0));
        new.at(t - 5_400, &fleet(5, rps(t), 5.0));
    }
    let (a, b) = (
        whole.at(5_700, &fleet(5, rps(5_700), 5.0)),
        new.at(300, &fleet(5, rps(5_700), 5.0)),
    );
    assert!(set_aside(&a), "{}", a.explanation);
    assert!(set_aside(&b), "{}", b.explanation);
}

#[test]
fn under_troughnow_below_a_burst_where_the_pattern_expects_a_trough_keeps_the_floors() {
    // Ten minutes at 58 req/s every 45 minutes over 6 req/s. A pod inherits the history of one
    // that ran for 90 minutes, with its hindsight floor of 5 replicas, but this day's bursts
    // (of 20 req/s) come 1,350 s (half a period) earlier: from its start, where the pattern
    // expects a trough.
    let metadata = "proactive; capacity=12.77; startup=166";
    let burst = |t: u64| t % 2_700 >= 1_200 && t % 2_700 < 1_800;
    let mut old = Run::new(metadata, 5);
    for t in (0..=5_398).step_by(2) {
        old.at(t, &fleet(5, if burst(t) { 58.0 } else { 6.0 }, 5.0));
    }
    let mut record = old.proactive.persisted();
    record.hindsight_floor = Some(PersistedFloor {
        replicas: 5,
        served_percent: 100.0,
        replica_hours: 7.5,
        ours_served_percent: 90.0,
        ours_replica_hours: 8.0,
        minutes: 90,
        peak_demand: 58.0,
        age_seconds: 600.0,
        capacity_per_replica: None,
        served_beyond_requests: None,
    });
    let run = |metadata: &str| {
        let mut new = Run::new(metadata, 1);
        new.proactive.inherit(&record);
        let mut out = vec![];
        for t in (0..=590).step_by(2) {
            let rps = if burst(5_400 + 1_350 + t) { 20.0 } else { 6.0 };
            out.push((t, new.at(t, &fleet(1, rps, 1.0))));
        }
        out
    };
    let any = run(&format!("{metadata}; troughnow=any"));
    let below = run(&format!("{metadata}; troughnow=below"));
    // Late in the burst, where the pattern expects a trough: the default has set the hindsight
    // floor aside and sized the burst alone; under `below` the demand refutes the trough, says
    // so, and the floor holds.
    let (a, b) = (decision_at(&any, 440), decision_at(&below, 440));
    assert!(
        a.explanation
            .contains("hindsight floor of 5 replicas set aside"),
        "{}",
        a.explanation
    );
    assert!(a.target_replicas < 5, "{}", a.explanation);
    assert!(
        b.explanation.contains(
            "but the demand now, 20 req/s, is not: no trough, the floors hold (troughnow=below)"
        ) && b.target_replicas == 5,
        "{}",
        b.explanation
    );
}

/// Two replicas at 6 req/s each for two minutes, then saturated for two minutes (a queue of
/// 60, every P95 over its SLO, 13 req/s completed per replica), then back to 6 req/s each
/// until `until`: the decisions and the run, every two seconds.
fn saturated_then_calm(metadata: &str, until: u64) -> (Vec<(u64, Decision)>, Run) {
    let mut r = Run::new(metadata, 2);
    let mut out = Vec::new();
    for t in (0..=120).step_by(2) {
        out.push((t, r.at(t, &fleet(2, 12.0, 4.0))));
    }
    for t in (122..=240).step_by(2) {
        out.push((t, r.at(t, &queued(2, 26.0, 60.0))));
    }
    for t in (242..=until).step_by(2) {
        out.push((t, r.at(t, &fleet(2, 12.0, 4.0))));
    }
    (out, r)
}

#[test]
fn under_peakat_limit_the_peak_floor_holds_the_peak_at_what_a_saturated_fleet_completed() {
    // With `saturated=0.5` the estimate is 6.5 req/s per replica (half of the 13 the
    // saturated fleet completed); the limit is the 13.
    let floor_at = |peakat: &str| {
        let metadata = format!(
            "proactive; capacity=6; startup=300; peak=1800; saturated=0.5; release=0; hindsight=advice; peakat={peakat}"
        );
        let (run, r) = saturated_then_calm(&metadata, 400);
        assert_eq!(r.proactive.capacity.limit(), Some(13.0), "{peakat}");
        let d = run.last().unwrap().1.clone();
        let peak = number_after(&d.explanation, "floor: peak ");
        let floor = number_after(&d.explanation, ") -> ") as u32;
        (peak, floor, d.explanation)
    };
    let (peak, full, _) = floor_at("full");
    let (same_peak, limit, words) = floor_at("limit");
    assert_eq!(peak, same_peak);
    assert!(peak > 13.0, "the saturated minutes' demand: {peak}");
    assert_eq!(full, (peak / 6.5).ceil() as u32);
    assert_eq!(limit, (peak / 13.0).ceil() as u32);
    assert!(limit < full, "{limit} vs {full}");
    assert!(
        words.contains(
            "at 13 req/s per replica, the most a saturated fleet completed (peakat=limit)"
        ),
        "{words}"
    );
    // Without a saturated fleet there is no limit, and `limit` reads as `full`.
    let calm = |peakat: &str| {
        let mut r = Run::new(
            &format!(
                "proactive; capacity=6; startup=300; peak=1800; release=0; hindsight=advice; peakat={peakat}"
            ),
            2,
        );
        (0..=400)
            .step_by(2)
            .map(|t| {
                r.at(t, &fleet(2, if t < 200 { 20.0 } else { 6.0 }, 4.0))
                    .target_replicas
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(calm("limit"), calm("full"));
    // And it says so, rather than naming a saturated fleet it never saw.
    let mut r = Run::new(
        "proactive; capacity=6; startup=300; peak=1800; release=0; hindsight=advice; peakat=limit",
        2,
    );
    r.steady(100, &fleet(2, 20.0, 4.0));
    let d = (102..=200)
        .step_by(2)
        .map(|t| r.at(t, &fleet(2, 6.0, 4.0)))
        .last()
        .unwrap();
    assert!(
        d.explanation.contains(
            "at the full capacity estimate, no saturated fleet having completed more (peakat=limit)"
        ),
        "{}",
        d.explanation
    );
}

#[test]
fn under_hindsightat_limit_the_fluid_model_reads_what_a_saturated_fleet_completed() {
    let model_at = |hindsightat: &str| {
        let metadata =
            format!("proactive; capacity=6; startup=300; saturated=0.5; hindsightat={hindsightat}");
        let (_, r) = saturated_then_calm(&metadata, 2400);
        let cmp = r
            .proactive
            .comparison
            .clone()
            .expect("a comparison after half an hour");
        (
            cmp.capacity_per_replica,
            r.proactive.capacity.value().unwrap(),
        )
    };
    let (estimate_model, estimate) = model_at("estimate");
    assert_eq!(estimate_model, estimate);
    let (limit_model, estimate) = model_at("limit");
    assert!(estimate < 13.0, "{estimate}");
    assert_eq!(limit_model, 13.0);
    // Under `need`, the estimate at the target utilisation (80 % by default).
    let (need_model, estimate) = model_at("need");
    assert!(
        (need_model - 0.8 * estimate).abs() < 1e-9,
        "{need_model} {estimate}"
    );
}

/// Four replicas, steady in-flight (no growth): the fleet counted 45 req/s over its 60 s
/// window, but two replicas became ready 10 s ago and drain a backlog at 16 req/s each, so the
/// pods' rates sum to 45 + 2 x 16 x (60 - 10) / 60 = 71.67 req/s.
fn draining_fleet() -> FleetSignals {
    let mut s = fleet(4, 45.0 + 2.0 * 16.0 * 50.0 / 60.0, 40.0);
    s.fleet.requests_finished_in_window = 45.0 * 60.0;
    s.fleet.finished_window_seconds = Some(60.0);
    s
}

/// The explanation after two minutes of [`draining_fleet`] under `metadata`.
fn decided_while_draining(metadata: &str) -> String {
    Run::new(metadata, 4)
        .steady(120, &draining_fleet())
        .explanation
}

#[test]
fn under_arrivals_count_a_replica_draining_a_backlog_is_not_read_as_arrivals() {
    let demand = |metadata: &str| number_after(&decided_while_draining(metadata), "demand ");
    assert_eq!(demand("proactive; capacity=20; arrivals=count"), 45.0);
    assert_eq!(demand("proactive; capacity=20"), 71.67);
    // Without a span (an engine without finished counters), the rate is what there is.
    let mut r = Run::new("proactive; capacity=20; arrivals=count", 4);
    let mut s = draining_fleet();
    s.fleet.finished_window_seconds = None;
    let d = r.steady(120, &s);
    assert!(
        d.explanation.contains("demand 71.67 req/s"),
        "{}",
        d.explanation
    );
}

#[test]
fn under_arrivals_history_the_need_reads_the_rate_and_the_history_the_count() {
    let decided = decided_while_draining;
    // The need now is the rate's, as by default; the peak floor holds the counted demand.
    let history = decided("proactive; capacity=20; arrivals=history");
    assert_eq!(number_after(&history, "demand "), 71.67);
    assert_eq!(number_after(&history, "floor: peak "), 45.0);
    assert!(
        history.contains("; the demand history records 45 req/s, the fleet's finished count over the window in place of the pods' rates (arrivals=history)"),
        "{history}"
    );
    let rate = decided("proactive; capacity=20");
    assert_eq!(number_after(&rate, "demand "), 71.67);
    assert_eq!(number_after(&rate, "floor: peak "), 71.67);
    let count = decided("proactive; capacity=20; arrivals=count");
    assert_eq!(number_after(&count, "demand "), 45.0);
    assert_eq!(number_after(&count, "floor: peak "), 45.0);
}

/// Four hours under `settings` (after a floor that lapses after half an hour): bursts of 60 req/s
/// every 20 minutes in the first hour name the floor; then one at minute 114 and one at minute
/// 194, each more than half an hour after the one before.
fn far_apart_bursts(settings: &str) -> Vec<(u64, Decision)> {
    let metadata =
        "proactive; capacity=10; startup=300; peak=0; periodic=off; hold=0; floorlapse=1800";
    bursts_of(&format!("{metadata}; {settings}"), 240, |t| match t / 60 {
        0..60 | 100..120 | 180..200 => 60.0,
        _ => 5.0,
    })
}

#[test]
fn under_lapsegap_a_floor_whose_bursts_recur_far_apart_is_kept_between_them() {
    let plain = far_apart_bursts("lapsegap=0");
    let gap = far_apart_bursts("lapsegap=1.5");
    let k = decision_at(&plain, 80 * 60).target_replicas;
    assert!(k > 1, "{}", decision_at(&plain, 80 * 60).explanation);
    // The first hour's bursts came 14 minutes apart: both let the floor go half an hour after
    // the last of them, before the burst at minute 114.
    for run in [&plain, &gap] {
        let d = decision_at(run, 105 * 60);
        assert_eq!(d.target_replicas, 1, "{}", d.explanation);
        assert!(d.explanation.contains("set aside"), "{}", d.explanation);
    }
    // That burst came 54 minutes after the one before: under `lapsegap=1.5` the floor is kept
    // for 81 minutes after it, through the burst at minute 194; without, it lapses again.
    for m in [170, 192] {
        let (p, g) = (decision_at(&plain, m * 60), decision_at(&gap, m * 60));
        assert_eq!(p.target_replicas, 1, "{m}: {}", p.explanation);
        assert!(g.target_replicas >= k, "{m}: {}", g.explanation);
        assert!(
            g.explanation.contains(&format!(
                "hindsight floor of {k} replicas kept: the demand last reached half the peak"
            )) && g
                .explanation
                .contains("came up to 3240 s apart (lapsegap=1.5)"),
            "{m}: {}",
            g.explanation
        );
    }
    // The default since the sixty-third round.
    assert_eq!(
        parse_policy("proactive").unwrap().unwrap().lapse_gap_factor,
        1.5
    );
}

#[test]
fn under_lapsegapmax_a_stretch_longer_than_the_bound_is_not_waited_for() {
    // The burst at minute 114 came 54 minutes after the one before.
    let plain = far_apart_bursts("lapsegap=0");
    let k = decision_at(&plain, 80 * 60).target_replicas;
    assert!(k > 1, "{}", decision_at(&plain, 80 * 60).explanation);
    // Bounded at 40 minutes, the 54 are not counted, and the floor lapses as without `lapsegap`.
    let short = far_apart_bursts("lapsegap=1.5; lapsegapmax=2400");
    // Bounded at an hour, they are, and it is kept as under `lapsegap=1.5` alone.
    let long = far_apart_bursts("lapsegap=1.5; lapsegapmax=3600");
    for m in [170, 192] {
        let (p, s, l) = (
            decision_at(&plain, m * 60),
            decision_at(&short, m * 60),
            decision_at(&long, m * 60),
        );
        assert_eq!(
            s.target_replicas, p.target_replicas,
            "{m}: {}",
            s.explanation
        );
        assert!(
            s.explanation.contains(
                "its bursts came 3240 s apart, longer than the 2400 s stretch lapsegap counts (lapsegapmax=2400)"
            ),
            "{m}: {}",
            s.explanation
        );
        assert!(l.target_replicas >= k, "{m}: {}", l.explanation);
        assert!(
            l.explanation
                .contains("came up to 3240 s apart (lapsegap=1.5, stretches up to 3600 s counted)"),
            "{m}: {}",
            l.explanation
        );
    }
    // Any stretch counts by default.
    assert_eq!(
        parse_policy("proactive")
            .unwrap()
            .unwrap()
            .lapse_gap_max_seconds,
        0.0
    );
}

/// Targets at 2 s decisions: 120 s at 14 req/s on two replicas (a need of two at 8 req/s per
/// replica), then `bump` req/s for `bump_for` seconds, then 14 again for a minute.
fn bumped(metadata: &str, bump: f64, bump_for: u64) -> Vec<(u64, u32, String)> {
    let mut r = Run::new(metadata, 2);
    let mut out = Vec::new();
    for t in (0..=120 + bump_for + 60).step_by(2) {
        let rps = if t > 120 && t <= 120 + bump_for {
            bump
        } else {
            14.0
        };
        let d = r.at(t, &fleet(2, rps, 20.0));
        out.push((t, d.target_replicas, d.explanation));
    }
    out
}

#[test]
fn under_confirm_a_step_of_one_replica_waits_for_the_need_to_stay_above_the_target() {
    let base = "proactive; capacity=10; startup=300; trend=0";
    let highest = |run: &[(u64, u32, String)]| run.iter().map(|d| d.1).max().unwrap();
    // A need one replica above the target for 30 s: asked for at once without `confirm`,
    // not at all with `confirm=60`, which says why.
    assert_eq!(highest(&bumped(base, 18.0, 30)), 3);
    let waited = bumped(&format!("{base}; confirm=60"), 18.0, 30);
    assert_eq!(highest(&waited), 2, "{waited:?}");
    assert!(
        waited.iter().any(|d| d
            .2
            .contains("need 3 above the target 2 for 10 s of the 60 s a step of one replica waits (confirm=60)")),
        "{waited:?}"
    );
    // Held for longer than that, the step is taken once the need has stayed above for 60 s.
    let held = bumped(&format!("{base}; confirm=60"), 18.0, 120);
    let stepped = held.iter().find(|d| d.1 == 3).expect("the step is taken");
    assert!(
        (180..=190).contains(&stepped.0),
        "the step waits 60 s after the need first read 3: {stepped:?}"
    );
    // A step of more than one replica, a burst's, goes at once: in-flight requests that grow
    // by 40 a second on two replicas (`one_step_up_to_the_need`'s burst).
    let mut r = Run::new(&format!("{base}; confirm=60"), 2);
    for t in (0..=60).step_by(2) {
        r.at(t, &fleet(2, 10.0, 20.0));
    }
    let answered = (62..=122)
        .step_by(2)
        .map(|t| (t, r.at(t, &saturated(t, 60)).target_replicas))
        .find(|&(_, target)| target > 2)
        .expect("the burst is answered");
    assert!(
        answered.1 >= 4 && answered.0 <= 70,
        "answered within seconds: {answered:?}"
    );
    // The wait is for the target the need is above: a target raised meanwhile (here as the
    // guide's backstop would) starts it again, so a need above the new target waits its own S.
    let mut r = Run::new(&format!("{base}; confirm=60"), 2);
    for t in (0..=120).step_by(2) {
        r.at(t, &fleet(2, 14.0, 20.0));
    }
    for t in (122..=170).step_by(2) {
        assert_eq!(r.at(t, &fleet(2, 18.0, 20.0)).target_replicas, 2);
    }
    r.state.level = Some(3);
    let mut last = None;
    for t in (172..=184).step_by(2) {
        let mut s = fleet(3, 26.0, 20.0);
        s.pods_total = 3;
        last = Some(r.at(t, &s));
    }
    let last = last.unwrap();
    assert_eq!(last.target_replicas, 3, "{}", last.explanation);
    assert!(
        last.explanation
            .contains("need 4 above the target 3 for 12 s of the 60 s"),
        "{}",
        last.explanation
    );
    assert_eq!(
        parse_policy("proactive").unwrap().unwrap().confirm_seconds,
        0.0
    );
}

#[test]
fn under_breachload_a_breach_on_a_lightly_loaded_fleet_is_explained_and_keeps_the_estimate() {
    // Four replicas serve 2 req/s, half a request each against an estimate of 10, with P95
    // TTFT at 5 s and no queue for two minutes: a sustained breach at a twentieth of the
    // estimate.
    let s = queued(4, 2.0, 0.0);
    let run = |metadata: &str| {
        let mut r = Run::new(metadata, 4);
        let last = r.steady(120, &s);
        (r.proactive.capacity().expect("an estimate"), last)
    };
    let (lowered, last) = run("proactive; capacity=10");
    assert!(lowered < 5.0, "{lowered}");
    assert!(
        !last.explanation.contains("breachload"),
        "{}",
        last.explanation
    );
    let (kept, last) = run("proactive; capacity=10; breachload=0.5");
    assert_eq!(kept, 10.0);
    assert!(
        last.explanation.contains(
            "a sustained breach at 0.5 req/s per replica, below 50 % of the estimate, does not lower it (breachload)"
        ),
        "{}",
        last.explanation
    );
}

#[test]
fn under_levels_a_staircase_whose_changes_repeat_is_no_pattern_and_bursts_still_are() {
    // Steps up of 2, 3 and 4 req/s every 25 minutes from 1 req/s, which one replica serves:
    // the changes repeat every 25 minutes, the levels one period earlier are a step lower.
    let staircase = |t: u64| [1.0, 3.0, 6.0, 10.0][((t / 60) / 25).min(3) as usize];
    let pattern = |run: &[(u64, Decision)]| {
        run.iter()
            .find(|(_, d)| d.explanation.contains("repeats every"))
            .map(|(_, d)| d.explanation.clone())
    };
    let without = offered_load("proactive; capacity=12; startup=300", 110, staircase);
    let found = pattern(&without).expect("the changes read as a pattern without the test");
    assert!(found.contains("repeats every 25 min"), "{found}");
    assert!(found.contains(", levels -"), "{found}");
    let with = offered_load(
        "proactive; capacity=12; startup=300; levels=0.5",
        110,
        staircase,
    );
    assert_eq!(pattern(&with), None);
    // Bursts every 45 minutes come back at the same height: found as without the test, and
    // the decision names the bar.
    let bursts = |t: u64| match (t / 60).checked_sub(20) {
        Some(m) if m % 45 < 8 => 9.0,
        _ => 2.0,
    };
    let with = offered_load(
        "proactive; capacity=10; startup=300; levels=0.5",
        150,
        bursts,
    );
    let found = pattern(&with).expect("the bursts' pattern");
    assert!(found.contains("repeats every 45 min"), "{found}");
    assert!(found.contains(">= 0.5 (levels)"), "{found}");
}

#[test]
fn a_staying_settle_asks_for_nothing_while_the_need_is_one_above_ready_ones_that_just_covered_it() {
    // As above: 4 ready cover the demand (30 req/s) at 500 s; from 510 s it reads 35 req/s,
    // one replica more than the ready 4, and stays there.
    let run = |metadata: &str| settle_run(metadata, |t| if t < 510 { 30.0 } else { 35.0 });
    let at = decision_at;
    let on = run("proactive; capacity=10; startup=300; peak=0; settle=on");
    let stay = run("proactive; capacity=10; startup=300; peak=0; settle=stay");
    assert_eq!(at(&stay, 500).target_replicas, 4);
    // `settle=on` asks at once; `settle=stay` stays at the ready 4 and says why.
    assert!(at(&on, 510).target_replicas >= 5);
    let stayed = at(&stay, 510);
    assert_eq!(stayed.target_replicas, 4, "{stayed:?}");
    assert!(
        stayed.explanation.contains(
            "backlog not sized for: the demand's need of 5 is one replica above the 4 ready, which covered it within a rate window: staying at them (settle=stay"
        ),
        "{}",
        stayed.explanation
    );
    // A need that stays one above for the rate window asks, as under `settle=on`.
    let asked = stay
        .iter()
        .find(|(t, d)| *t > 510 && d.target_replicas > 4)
        .expect("the need of 5 asks once the rate window has passed");
    assert!(
        asked.0 > 560 && asked.0 <= 600,
        "{}: {:?}",
        asked.0,
        asked.1
    );
    assert_eq!(
        parse_policy("proactive; settle=stay")
            .unwrap()
            .unwrap()
            .settle,
        Settle::Stay
    );
}
