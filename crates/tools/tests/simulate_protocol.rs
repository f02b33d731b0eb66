//! The evaluation protocol's guarantees on short scenarios: the fluid lower bound is below
//! every policy's GPU-hours, no static fleet beats the clairvoyant planner, `static:best` is
//! the smallest static fleet meeting the target, seeds redraw the arrival process, every
//! policy meets the same start-up draws, and timed-out clients are misses that leave the engine.

use std::time::Duration;

use vllm_keda_tools::simulate::fleet::{
    self, Autoscaler, FleetSettings, StartupDraws, StartupSpread, VirtualFleet,
};
use vllm_keda_tools::simulate::scenario::{self, Scenario, ScenarioSet};
use vllm_keda_tools::simulate::{PolicySpec, Simulation};
use vllm_keda_tools::trace::generate::{self, RateCurve};

/// A 12-minute flash crowd over conversation-sized requests: 2 req/s, 20 req/s from minute 4
/// for 3 minutes (about 4,700 requests). Short enough for a debug build, bursty enough that
/// policies differ.
fn crowd(seed: u64) -> Scenario {
    let sizes = scenario::bundled_sizes("azure-conv").unwrap();
    let curve = RateCurve::FlashCrowd {
        base: 2.0,
        crowd: 20.0,
        start_seconds: 240.0,
        length_seconds: 180.0,
        ramp_seconds: 20.0,
    };
    Scenario {
        name: format!("crowd-{seed}"),
        requests: generate::poisson(&curve, 720.0, &sizes, seed),
        load_steps: Vec::new(),
    }
}

fn simulation(seed: u64) -> Simulation {
    Simulation {
        fleet: FleetSettings {
            startup_delay: Duration::from_secs(120),
            startup_seed: seed,
            ..FleetSettings::default()
        },
        ours: Simulation::ours_config(&[], 1, 4).unwrap(),
        min_replicas: 1,
        max_replicas: 4,
        seed,
        ..Simulation::default()
    }
}

#[test]
fn the_lower_bound_is_below_every_policy_and_clairvoyant_is_not_beaten_by_a_static_fleet() {
    for seed in [1, 2] {
        let scenario = crowd(seed);
        let sim = simulation(seed);
        let bound = sim.lower_bound_hours(&scenario);
        assert!(bound > 0.0);
        let policies = [
            "ours",
            "prometheus-keda",
            "prometheus-keda-tuned",
            "kpa",
            "kpa:64:stable=180:delay=300",
            "apa",
            "static:best",
            "clairvoyant",
        ];
        let mut clairvoyant = None;
        // Every policy on the first seed; the references on the second.
        let policies = if seed == 1 {
            &policies[..]
        } else {
            &policies[6..]
        };
        for &name in policies {
            let policy = PolicySpec::parse(name).unwrap();
            let (_, report) = sim.run_policy(&scenario, &policy).unwrap();
            assert_eq!(report.scenario, scenario.name);
            assert_eq!(report.seed, seed);
            assert_eq!(report.gpu_hours_lower_bound, bound);
            assert!(
                report.gpu_hours > bound,
                "seed {seed} {name}: {} GPU-h below the bound {bound}",
                report.gpu_hours
            );
            if name == "clairvoyant" {
                clairvoyant = Some(report);
            }
        }
        let clairvoyant = clairvoyant.unwrap();
        for n in 1..=4 {
            let (_, fixed) = sim.run_policy(&scenario, &PolicySpec::Static(n)).unwrap();
            assert!(fixed.gpu_hours > bound, "static:{n}");
            assert_eq!(fixed.static_replicas, Some(n));
            let beats = fixed.slo_attainment > clairvoyant.slo_attainment
                && fixed.gpu_hours <= clairvoyant.gpu_hours;
            assert!(
                !beats,
                "seed {seed}: static:{n} ({}, {} GPU-h) beats clairvoyant ({}, {} GPU-h)",
                fixed.slo_attainment,
                fixed.gpu_hours,
                clairvoyant.slo_attainment,
                clairvoyant.gpu_hours
            );
        }
    }
}

#[test]
fn static_best_is_the_smallest_static_fleet_meeting_the_target() {
    let scenario = crowd(3);
    let sim = simulation(3);
    let (_, best) = sim.run_policy(&scenario, &PolicySpec::StaticBest).unwrap();
    assert_eq!(best.policy, "static:best");
    let n = best.static_replicas.expect("static:best reports its size");
    let attainment = |n| {
        sim.run_policy(&scenario, &PolicySpec::Static(n))
            .unwrap()
            .1
            .slo_attainment
    };
    if best.slo_attainment >= sim.slo_target {
        if n > 1 {
            assert!(
                attainment(n - 1) < sim.slo_target,
                "static:{} also meets it",
                n - 1
            );
        }
    } else {
        assert_eq!(
            n, sim.max_replicas,
            "no fleet meets it: the largest is best"
        );
    }
    assert_eq!(attainment(n), best.slo_attainment);
}

#[test]
fn seeds_redraw_the_arrival_process_of_generated_and_resampled_scenarios() {
    for spec in ["flash-crowd-conv", "poisson:azure-code"] {
        let load = |seed| scenario::load(spec, 1.0, 1.0, seed).unwrap();
        let (a, b, c) = (load(1), load(1), load(2));
        assert_eq!(a, b, "{spec}: the same seed, the same scenario");
        assert_ne!(a.requests, c.requests, "{spec}");
        // Not a jitter of the same instants: the arrival counts themselves differ.
        let first_hour = |s: &Scenario| {
            s.requests
                .iter()
                .filter(|r| r.arrival < Duration::from_secs(3600))
                .count()
        };
        assert_ne!(first_hour(&a), first_hour(&c), "{spec}");
    }
    // The sets are named, disjoint and selectable.
    let training = ScenarioSet::parse("training").unwrap().names();
    let held_out = ScenarioSet::parse("held-out").unwrap().names();
    let held_out_2 = ScenarioSet::parse("held-out-2").unwrap().names();
    assert!(training.len() >= 9 && held_out.len() >= 6 && held_out_2.len() >= 4);
    assert!(training.iter().all(|t| !held_out.contains(t)));
    assert!(training.iter().all(|t| !held_out_2.contains(t)));
    assert!(held_out.iter().all(|t| !held_out_2.contains(t)));
    assert!(ScenarioSet::parse("test").is_err());
}

#[test]
fn start_up_delays_are_drawn_per_replica_the_same_for_every_run() {
    let spread = StartupSpread::Uniform {
        low: 60.0,
        high: 600.0,
    };
    let draws = spread.draws(Duration::from_secs(300), 7, 3);
    assert!(
        draws
            .iter()
            .all(|d| (60.0..=600.0).contains(&d.as_secs_f64()))
    );
    assert_ne!(draws[0], draws[1]);
    assert_eq!(draws, spread.draws(Duration::from_secs(300), 7, 3));
    let settings = FleetSettings {
        startup_delay: Duration::from_secs(300),
        startup_spread: spread,
        startup_seed: 7,
        ..FleetSettings::default()
    };
    // Two requests a second until 700 s keep the run going past the longest draw.
    let sizes = scenario::bundled_sizes("azure-conv").unwrap();
    let requests = generate::poisson(&RateCurve::Constant(2.0), 700.0, &sizes, 1);
    let mut script = Script {
        plan: vec![(0, 4)],
        next: Duration::ZERO,
        started: Vec::new(),
    };
    fleet::run(&requests, &settings, 1, &mut script);
    // Replica 0 started ready; replicas 1..=3 were asked for at 0 and got draws 0..=2.
    let mut started: Vec<_> = script.started.iter().collect();
    started.sort_by_key(|r| r.0);
    assert_eq!(started.len(), 3, "{:?}", script.started);
    for (k, (_, created, ready)) in started.iter().enumerate() {
        let waited = ready.saturating_sub(*created);
        // Seen at the first whole second at or after the draw.
        assert!(
            waited >= draws[k] && waited < draws[k] + Duration::from_secs(1),
            "replica {k}: waited {waited:?}, drew {:?}",
            draws[k]
        );
    }
    // Lognormal draws centre on their median.
    let logn = StartupSpread::LogNormal {
        median: 300.0,
        sigma: 0.3,
    }
    .draws(Duration::from_secs(300), 1, 400);
    let below = logn.iter().filter(|d| d.as_secs_f64() < 300.0).count();
    assert!(
        (150..250).contains(&below),
        "{below} of 400 below the median"
    );
}

/// Asks for each target at its second and records each replica's start-up (id, created,
/// seen ready), polling every second.
struct Script {
    plan: Vec<(u64, u32)>,
    next: Duration,
    started: Vec<(u64, Duration, Duration)>,
}

impl Autoscaler for Script {
    fn next_wake(&self) -> Option<Duration> {
        (self.next < Duration::from_secs(900)).then_some(self.next)
    }

    fn wake(&mut self, now: Duration, fleet: &VirtualFleet) -> Option<u32> {
        self.next += Duration::from_secs(1);
        // Replica 0 started ready.
        for r in fleet.ready() {
            if r.id > 0 && !self.started.iter().any(|x| x.0 == r.id) {
                self.started.push((r.id, r.created, now));
            }
        }
        let secs = now.as_secs();
        self.plan.iter().find(|p| p.0 == secs).map(|p| p.1)
    }
}

#[test]
fn under_slot_draws_a_fleet_position_meets_the_same_start_ups_whatever_was_asked_elsewhere() {
    let spread = StartupSpread::Uniform {
        low: 60.0,
        high: 600.0,
    };
    let sizes = scenario::bundled_sizes("azure-conv").unwrap();
    let requests = generate::poisson(&RateCurve::Constant(2.0), 800.0, &sizes, 1);
    // The start-up each replica waited, by id.
    let waits = |draws: StartupDraws, plan: &[(u64, u32)]| {
        let settings = FleetSettings {
            startup_delay: Duration::from_secs(300),
            startup_spread: spread,
            startup_seed: 7,
            startup_draws: draws,
            ..FleetSettings::default()
        };
        let mut script = Script {
            plan: plan.to_vec(),
            next: Duration::ZERO,
            started: Vec::new(),
        };
        fleet::run(&requests, &settings, 1, &mut script);
        let mut out: Vec<(u64, Duration)> = script
            .started
            .iter()
            .map(|(id, created, ready)| (*id, ready.saturating_sub(*created)))
            .collect();
        out.sort();
        out
    };
    // A: positions 1 and 2 asked for at once. B: position 1 asked for and withdrawn while it
    // starts, then positions 1 and 2 asked for: B's third replica is position 2's first start,
    // as A's second is.
    let a = [(0, 3)];
    let b = [(0, 2), (5, 1), (10, 3)];
    for draws in [StartupDraws::Order, StartupDraws::Slot] {
        let (wa, wb) = (waits(draws, &a), waits(draws, &b));
        assert_eq!(wa.len(), 2, "{wa:?}");
        // The withdrawn replica (id 1) never became ready.
        let ids: Vec<u64> = wb.iter().map(|w| w.0).collect();
        assert_eq!(ids, [2, 3], "{wb:?}");
        let position_2 = (wa[1].1, wb[1].1);
        match draws {
            // Slot: position 2 waited the same in both; position 1's second start is a draw
            // of its own, not its first.
            StartupDraws::Slot => {
                assert_eq!(position_2.0, position_2.1);
                assert_ne!(wa[0].1, wb[0].1);
                let first = spread.draw_at(Duration::from_secs(300), 7, 2, 0);
                assert!(
                    position_2.0 >= first && position_2.0 < first + Duration::from_secs(1),
                    "{position_2:?} {first:?}"
                );
            }
            // Order: B's position 2 is the third ask and gets the third draw.
            StartupDraws::Order => {
                let d = spread.draws(Duration::from_secs(300), 7, 3);
                assert!(position_2.0 >= d[1] && position_2.0 < d[1] + Duration::from_secs(1));
                assert!(position_2.1 >= d[2] && position_2.1 < d[2] + Duration::from_secs(1));
            }
        }
    }
}

#[test]
fn timed_out_clients_are_misses_that_leave_the_engine_and_count_in_ttft() {
    // Three times one replica's capacity for 2 minutes on a static fleet of one.
    let sizes = scenario::bundled_sizes("azure-conv").unwrap();
    let requests = generate::poisson(&RateCurve::Constant(45.0), 120.0, &sizes, 5);
    let scenario = Scenario {
        name: "overload".into(),
        requests,
        load_steps: Vec::new(),
    };
    let mut sim = simulation(5);
    let (patient_run, patient) = sim.run_policy(&scenario, &PolicySpec::Static(1)).unwrap();
    assert_eq!(patient.timed_out, 0);
    sim.fleet.client_timeout = Some(Duration::from_secs(30));
    let (run, report) = sim.run_policy(&scenario, &PolicySpec::Static(1)).unwrap();
    assert!(
        report.timed_out > report.requests / 4,
        "{} of {}",
        report.timed_out,
        report.requests
    );
    for o in run.outcomes.iter().filter(|o| o.timed_out) {
        assert_eq!(o.finished, Some(o.arrival + Duration::from_secs(30)));
        assert!(!sim.slo.met(o));
    }
    // The TTFT percentile counts the requests that never got a first token (with their 30 s).
    assert!(report.ttft_p95_seconds.unwrap() >= 29.0, "{report:?}");
    // Aborted work leaves the engine: the run ends sooner than the patient one.
    assert!(
        run.end < patient_run.end,
        "{:?} {:?}",
        run.end,
        patient_run.end
    );
    assert!(report.completed + report.timed_out == report.requests);
}

/// The bash array `name=(...)` in `script`, its words in order.
fn script_list(script: &str, name: &str) -> Vec<String> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scripts")
        .join(script);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let start = text
        .find(&format!("\n{name}=("))
        .unwrap_or_else(|| panic!("{script} has no `{name}=(` list"));
    let body = &text[start + name.len() + 3..];
    let end = body.find(')').expect("the list closes");
    body[..end].split_whitespace().map(str::to_owned).collect()
}

#[test]
fn the_scripts_run_the_sets_the_simulator_defines() {
    // A scenario added to a set and left out of a script would leave the evaluation's tables
    // (scripts/evaluate) or a training round (scripts/training-round) without it, unnoticed.
    let names =
        |set: ScenarioSet| -> Vec<String> { set.names().into_iter().map(str::to_owned).collect() };
    assert_eq!(
        script_list("evaluate", "training"),
        names(ScenarioSet::Training)
    );
    assert_eq!(
        script_list("evaluate", "held_out"),
        names(ScenarioSet::HeldOut)
    );
    assert_eq!(
        script_list("evaluate", "held_out_2"),
        names(ScenarioSet::HeldOut2)
    );
    let round = script_list("training-round", "training");
    let round: Vec<String> = round
        .iter()
        .map(|w| {
            w.trim_start_matches("${SCENARIOS:-")
                .trim_end_matches('}')
                .to_owned()
        })
        .collect();
    assert_eq!(round, names(ScenarioSet::Training));
    // The warm rows: both held-out sets, then the three shipped traces.
    let mut warm = names(ScenarioSet::HeldOut);
    warm.extend(names(ScenarioSet::HeldOut2));
    warm.extend(
        [
            "shipped-azure-code-x2",
            "shipped-azure-conv-x10",
            "shipped-mooncake-x0.5",
        ]
        .map(str::to_owned),
    );
    assert_eq!(script_list("warm-runs", "scenarios"), warm);
}

/// Asks, at each instant of its list in turn, for the replica count paired with it.
struct Asks(Vec<(Duration, u32)>);

impl Autoscaler for Asks {
    fn next_wake(&self) -> Option<Duration> {
        self.0.first().map(|a| a.0)
    }

    fn wake(&mut self, _now: Duration, _fleet: &VirtualFleet) -> Option<u32> {
        Some(self.0.remove(0).1)
    }
}

#[test]
fn replicas_withdrawn_while_starting_are_billed_and_counted_apart() {
    let settings = FleetSettings {
        startup_delay: Duration::from_secs(300),
        ..FleetSettings::default()
    };
    let sizes = scenario::bundled_sizes("azure-conv").unwrap();
    let requests = generate::poisson(&RateCurve::Constant(2.0), 900.0, &sizes, 1);
    // Three replicas asked for at 10 s, two withdrawn at 110 s (they would serve from 310 s),
    // the third ready at 310 s and kept.
    let mut asks = Asks(vec![
        (Duration::from_secs(10), 4),
        (Duration::from_secs(110), 2),
    ]);
    let run = fleet::run(&requests, &settings, 1, &mut asks);
    assert!(
        (run.withdrawn_seconds - 2.0 * 100.0).abs() < 1e-6,
        "{}",
        run.withdrawn_seconds
    );
    let done = run.end.as_secs_f64();
    let billed = done + (done - 10.0) + 2.0 * 100.0;
    assert!(
        (run.replica_seconds - billed).abs() < 1e-6,
        "{} against {billed}",
        run.replica_seconds
    );
    // A replica that became ready and was removed later is not a withdrawn start-up.
    let mut later = Asks(vec![
        (Duration::from_secs(10), 2),
        (Duration::from_secs(400), 1),
    ]);
    assert_eq!(
        fleet::run(&requests, &settings, 1, &mut later).withdrawn_seconds,
        0.0
    );
}

/// `clairvoyant:from=burst` is the clairvoyant plan for a planner that learns the trace at the
/// crowd: it holds the opening fleet until the first minute whose work needs more, asks there,
/// and from then on asks as the plan at the same utilisation does. Not knowing the crowd
/// ahead, it serves less of it than that plan, and its row is judged against static fleets.
#[test]
fn the_clairvoyant_plan_from_the_burst_waits_for_it_and_then_follows_the_plan() {
    let scenario = crowd(1);
    let sim = Simulation {
        judge_statics: true,
        ..simulation(1)
    };
    let full = PolicySpec::parse("clairvoyant:from=0:utilisation=0.6").unwrap();
    let late = PolicySpec::parse("clairvoyant:from=burst:utilisation=0.6").unwrap();
    assert_eq!(late.name(), "clairvoyant:from=burst:utilisation=0.6");
    let (_, full) = sim.run_policy(&scenario, &full).unwrap();
    let (_, late) = sim.run_policy(&scenario, &late).unwrap();
    // The plan asks a start-up (120 s) ahead of the crowd at minute 4; the late one cannot.
    let first_up = |r: &vllm_keda_tools::simulate::report::PolicyReport| {
        r.events
            .iter()
            .find(|e| e.to > e.from)
            .map(|e| e.at_seconds)
            .unwrap()
    };
    assert!(first_up(&full) < 240.0, "{:?}", full.events);
    let late_up = first_up(&late);
    assert!((240.0..=300.0).contains(&late_up), "{:?}", late.events);
    // After the crowd the two plans are the same plan: the same fleet to the end.
    let last = |r: &vllm_keda_tools::simulate::report::PolicyReport| {
        r.events.last().map(|e| (e.at_seconds, e.to)).unwrap()
    };
    assert_eq!(last(&full), last(&late));
    assert!(
        late.slo_attainment < full.slo_attainment,
        "late {} full {}",
        late.slo_attainment,
        full.slo_attainment
    );
    assert!(!late.statics_not_judged);
    assert!(full.gpu_hours > late.gpu_hours);
}
