//! Policy properties over random configurations and random signal sequences: the target
//! never leaves [min, max]; no scale-in unless calm held for the whole calm period (and never
//! in a restart's first calm period); no scale-out unless a breach held for the stabilization
//! window; never more than the configured steps per period (a lone step widened to clear the
//! HPA tolerance aside); no guardrail stacking while asked-for replicas start; every scale-up
//! clears the HPA tolerance band; advisory mode returns the ready replicas; never a scale-in
//! while a known target gives no data (a partial view is not calm); never a scale-in while
//! any SLO (e2e, TTFT, ITL) is breached; the explanation's numbers are the inputs' numbers.
//! The loads include TTFT and ITL (the SLOs the shipped defaults scale on) and bad inputs
//! (NaN, infinite and negative values in every signal).

mod policy_support;

use std::time::Duration;

use policy_support::{Load, secs};
use proptest::prelude::*;
use vllm_keda_core::policy::{
    Decision, Mode, Policy, PolicyConfig, PolicyState, Reason, hpa_would_act,
    smallest_acted_scale_up,
};

fn config() -> impl Strategy<Value = PolicyConfig> {
    (
        (1u32..4, 0u32..12, 1.0f64..50.0, 1.0f64..10.0, 0.0f64..0.3),
        (1u32..4, 2u64..90, 0u64..60, 1u32..3, 2u64..200, 0u64..400),
        (
            0u64..300,
            prop::bool::weighted(0.15),
            prop::bool::weighted(0.15),
            prop::option::weighted(0.85, 0.2f64..5.0),
            prop::option::weighted(0.85, 0.01f64..0.2),
        ),
    )
        .prop_map(
            |(
                (min, span, n, slo, tol),
                (up, upp, ups, down, downp, downs),
                (grace, advisory, slo_off, ttft, itl),
            )| {
                PolicyConfig {
                    min_replicas: min,
                    max_replicas: min + span,
                    queue_depth_per_replica: n,
                    // Sometimes `latencySloSeconds: off`: the same loads, no e2e rule.
                    e2e_latency_slo_seconds: (!slo_off).then_some(slo),
                    // TTFT and ITL, each sometimes off.
                    ttft_slo_seconds: ttft,
                    itl_slo_seconds: itl,
                    hpa_tolerance: tol,
                    scale_up_pods: up,
                    scale_up_period: secs(upp),
                    scale_up_stabilization: secs(ups),
                    scale_down_pods: down,
                    scale_down_period: secs(downp),
                    scale_down_stabilization: secs(downs),
                    startup_grace: secs(grace),
                    mode: if advisory {
                        Mode::Advisory
                    } else {
                        Mode::Active
                    },
                    ..PolicyConfig::default()
                }
            },
        )
}

/// A stretch of time with one kind of load.
#[derive(Debug, Clone)]
struct Segment {
    regime: u8,
    duration_s: u64,
    ready: usize,
    follow_target: bool,
    x: f64,
    /// Known targets that do not answer during the segment.
    unknown: usize,
}

fn segments() -> impl Strategy<Value = Vec<Segment>> {
    prop::collection::vec(
        (
            0u8..REGIMES,
            0u64..400,
            0usize..14,
            prop::bool::weighted(0.6),
            0.0f64..1.0,
            prop_oneof![4 => Just(0usize), 1 => 1usize..3],
        )
            .prop_map(
                |(regime, duration_s, ready, follow_target, x, unknown)| Segment {
                    regime,
                    duration_s,
                    ready,
                    follow_target,
                    x,
                    unknown,
                },
            ),
        1..12,
    )
}

/// How many kinds of load [`load`] makes (the strategy draws `0..REGIMES`).
const REGIMES: u8 = 16;

/// The values a broken exporter or a division by zero can produce.
const BAD: [f64; 5] = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -1.0, -0.0];

fn bad(x: f64) -> f64 {
    BAD[((x * BAD.len() as f64) as usize).min(BAD.len() - 1)]
}

fn load(c: &PolicyConfig, seg: &Segment, ready: usize, k: u64) -> Load {
    let n = c.queue_depth_per_replica;
    // With an SLO off the loads still carry its latency (which must then not matter).
    let slo = c.e2e_latency_slo_seconds.unwrap_or(5.0);
    let ttft = c.ttft_slo_seconds.unwrap_or(2.0);
    let itl = c.itl_slo_seconds.unwrap_or(0.07);
    let r = ready as f64;
    let calm = Load::idle(ready)
        .running(4.0)
        .finished(20.0)
        .p95(slo * 0.3)
        .ttft(ttft * 0.3)
        .itl(itl * 0.3)
        .kv(0.4);
    match seg.regime {
        0 => Load::idle(ready),
        1 => calm,
        2 => calm.queue((n * r * 0.5).floor()).p95(slo * 0.7).kv(0.6),
        3 => calm
            .queue((n * r * (1.2 + 3.0 * seg.x)).ceil())
            .p95(slo * 1.2),
        4 => calm.p95(slo * (1.05 + seg.x)),
        5 => calm.kv(0.955 + 0.04 * seg.x),
        6 if k % 2 == 0 => calm,
        6 => calm.p95(slo * 2.0).queue(n * r * 2.0),
        7 => calm.preempt(c.preemptions_per_second_per_replica * (r + 1.0) * 2.0),
        8 => Load::idle(0),
        9 => calm.gpu_mem(0.96),
        // A short queue with everything else calm: not calm, not a breach.
        10 => calm.queue((1.0 + n * r * 0.5 * seg.x).floor()),
        11 => calm.ttft(ttft * (1.05 + seg.x)),
        12 => calm.itl(itl * (1.05 + seg.x)),
        // TTFT or ITL between half its SLO and the SLO: not calm, not a breach.
        13 if k % 2 == 0 => calm.ttft(ttft * (0.5 + 0.45 * seg.x)),
        13 => calm.itl(itl * (0.5 + 0.45 * seg.x)),
        // Every signal bad at once: nothing to act on.
        14 => {
            let v = bad(seg.x);
            Load {
                ready,
                unknown: 0,
                queue: v,
                running: v,
                finished: v,
                e2e_p95: Some(v),
                ttft_p95: Some(v),
                itl_p95: Some(v),
                kv_max: Some(v),
                preemptions_per_second: Some(v),
                gpu_memory_max: Some(v),
            }
        }
        // Bad values beside a real TTFT breach: the breach still counts.
        _ => {
            let v = bad(seg.x);
            let mut l = calm.ttft(ttft * 1.5);
            l.e2e_p95 = Some(v);
            l.itl_p95 = Some(bad(1.0 - seg.x));
            l.kv_max = Some(v);
            l.queue = v;
            l.preemptions_per_second = Some(v);
            l
        }
    }
}

struct Step {
    t: Duration,
    load: Load,
    decision: Decision,
}

fn simulate(c: &PolicyConfig, segs: &[Segment], dt_s: u64) -> Vec<Step> {
    let policy = Policy::new(c.clone());
    let mut state = PolicyState::default();
    let mut steps: Vec<Step> = Vec::new();
    let mut t = 1000u64;
    let mut k = 0u64;
    for seg in segs {
        let end = t + seg.duration_s;
        while t < end {
            let ready = match steps.last() {
                Some(s) if seg.follow_target && seg.regime != 8 => {
                    s.decision.target_replicas as usize
                }
                _ => seg.ready,
            };
            let l = load(c, seg, ready, k).unknown(seg.unknown);
            let d = policy.decide(secs(t), &l.signals(secs(t)), &mut state);
            steps.push(Step {
                t: secs(t),
                load: l,
                decision: d,
            });
            t += dt_s;
            k += 1;
        }
    }
    steps
}

/// A value as the policy reads it: non-finite or negative is absent.
fn clean(x: Option<f64>) -> Option<f64> {
    x.filter(|v| v.is_finite() && *v >= 0.0)
}

/// A count as the policy reads it: non-finite or negative is zero.
fn count(x: f64) -> f64 {
    if x.is_finite() && x > 0.0 { x } else { 0.0 }
}

/// The latency SLOs that are on, with their P95s as the policy reads them.
fn slos(c: &PolicyConfig, l: &Load) -> Vec<(&'static str, Option<f64>, f64)> {
    [
        ("e2e", l.e2e_p95, c.e2e_latency_slo_seconds),
        ("TTFT", l.ttft_p95, c.ttft_slo_seconds),
        ("ITL", l.itl_p95, c.itl_slo_seconds),
    ]
    .into_iter()
    .filter_map(|(name, p95, slo)| Some((name, clean(p95), slo?)))
    .collect()
}

fn calm(c: &PolicyConfig, l: &Load) -> bool {
    let ok = |x: Option<f64>, below: f64| clean(x).is_none_or(|v| v < below);
    l.ready > 0
        && l.unknown == 0
        && count(l.queue) == 0.0
        && slos(c, l).iter().all(|&(_, p95, slo)| ok(p95, slo / 2.0))
        && ok(l.kv_max, c.kv_cache_warning)
        && ok(l.gpu_memory_max, c.gpu_memory_calm_below)
}

/// The SLO breaches in this sample (`P95 > SLO`), as the explanation words them.
fn slo_breaches(c: &PolicyConfig, l: &Load) -> Vec<String> {
    slos(c, l)
        .into_iter()
        .filter_map(|(name, p95, slo)| {
            let p95 = p95.filter(|&p| p > slo)?;
            Some(format!("P95 {name} {} s > SLO {} s", num(p95), num(slo)))
        })
        .collect()
}

fn breach(c: &PolicyConfig, l: &Load) -> bool {
    let r = l.ready as f64;
    let over = |x: Option<f64>, above: f64| clean(x).is_some_and(|v| v > above);
    l.ready > 0
        && (count(l.queue) / r > c.queue_depth_per_replica
            || !slo_breaches(c, l).is_empty()
            || over(l.kv_max, c.kv_cache_critical)
            || over(
                l.preemptions_per_second.map(|p| p / r),
                c.preemptions_per_second_per_replica,
            ))
}

/// A number as explanations print it: at most two decimals, trailing zeros trimmed.
fn num(x: f64) -> String {
    let s = format!("{x:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" { "0".into() } else { s.into() }
}

/// The trigger sentences this sample must put in the explanation, with the input numbers
/// (KV is left out: it fires only after 30 s above critical).
fn expected_fragments(c: &PolicyConfig, l: &Load) -> Vec<String> {
    if l.ready == 0 {
        return Vec::new();
    }
    let r = l.ready as f64;
    let mut out = Vec::new();
    let (q, n) = (count(l.queue), c.queue_depth_per_replica);
    if q / r > n {
        out.push(format!(
            "queue {} over {} ready replicas = {} per replica > {} per replica",
            num(q),
            l.ready,
            num(q / r),
            num(n)
        ));
    }
    out.extend(slo_breaches(c, l));
    if let Some(p) = clean(l.preemptions_per_second) {
        if p / r > c.preemptions_per_second_per_replica {
            out.push(format!(
                "preemptions {}/s over {} ready replicas = {}/s per replica > {}/s",
                num(p),
                l.ready,
                num(p / r),
                num(c.preemptions_per_second_per_replica)
            ));
        }
    }
    out
}

fn check(c: &PolicyConfig, steps: &[Step]) -> Result<(), String> {
    // Until the first decision with data the level is not set (a restart's no-data answers
    // hold the known replicas): invariants on changes start there.
    let Some(first) = steps
        .iter()
        .position(|s| s.decision.reason != Reason::NoData)
    else {
        return Ok(());
    };
    let first_t = steps[first].t;
    let mut prev = steps[first].decision.desired_replicas;
    let mut ups: Vec<(Duration, u32, bool)> = Vec::new(); // (when, pods, widened)
    let mut downs: Vec<(Duration, u32)> = Vec::new();
    for (i, s) in steps.iter().enumerate() {
        let d = &s.decision;
        let at = format!("t={:?} {:?}: {}", s.t, d.reason, d.explanation);
        if d.desired_replicas < c.min_replicas || d.desired_replicas > c.max_replicas {
            return Err(format!(
                "desired {} outside [min, max]; {at}",
                d.desired_replicas
            ));
        }
        match c.mode {
            Mode::Active if d.target_replicas != d.desired_replicas => {
                return Err(format!("active target != desired; {at}"));
            }
            Mode::Advisory if s.load.ready > 0 && d.target_replicas as usize != s.load.ready => {
                return Err(format!("advisory target != ready; {at}"));
            }
            _ => {}
        }
        if d.explanation.is_empty()
            || d.explanation.contains("NaN")
            || d.explanation.contains("inf")
        {
            return Err(format!("bad explanation; {at}"));
        }
        if d.ready_replicas as usize != s.load.ready {
            return Err(format!(
                "ready {} != the input's {}; {at}",
                d.ready_replicas, s.load.ready
            ));
        }
        // The explanation carries the inputs' numbers, not stale or recomputed ones.
        if let Some(missing) = expected_fragments(c, &s.load)
            .into_iter()
            .find(|f| !d.explanation.contains(f.as_str()))
        {
            return Err(format!("explanation lacks {missing:?}; {at}"));
        }
        let hpa_current = (s.load.ready as u32).max(prev);
        if i > first && d.desired_replicas < prev {
            let down = prev - d.desired_replicas;
            if let Some(b) = slo_breaches(c, &s.load).first() {
                return Err(format!("scale-in while {b}; {at}"));
            }
            if !matches!(d.reason, Reason::ScaleInCalm | Reason::HoldTolerance) {
                return Err(format!("scale-in with reason {:?}; {at}", d.reason));
            }
            let from = s.t.saturating_sub(c.scale_down_stabilization);
            if s.t < first_t + c.scale_down_stabilization {
                return Err(format!("scale-in within the first calm period; {at}"));
            }
            if let Some(bad) = steps[..=i]
                .iter()
                .rev()
                .take_while(|p| p.t >= from)
                .find(|p| !calm(c, &p.load))
            {
                return Err(format!(
                    "scale-in at {:?} with a non-calm sample at {:?}; {at}",
                    s.t, bad.t
                ));
            }
            downs.retain(|&(w, _)| w + c.scale_down_period > s.t);
            downs.push((s.t, down));
            let sum: u32 = downs.iter().map(|&(_, n)| n).sum();
            if sum > c.scale_down_pods {
                return Err(format!("-{sum} within one scale-down period; {at}"));
            }
        }
        if i > first && d.desired_replicas > prev && d.desired_replicas <= hpa_current {
            // The level rose to at most what already runs: no pod added.
            if !d.reason.is_scale_out() && d.reason != Reason::AtMax {
                return Err(format!("level raised with reason {:?}; {at}", d.reason));
            }
        }
        if i > first && d.desired_replicas > hpa_current {
            // A scale-up the HPA sees: pods added to what runs or was asked for.
            let up = d.desired_replicas - hpa_current;
            if !d.reason.is_scale_out() {
                return Err(format!("scale-up with reason {:?}; {at}", d.reason));
            }
            if !hpa_would_act(hpa_current, d.desired_replicas, c.hpa_tolerance) {
                return Err(format!(
                    "scale-up the HPA ignores (current {hpa_current}); {at}"
                ));
            }
            // The breach began at or before t - stabilization and held since.
            if !breach(c, &s.load) {
                return Err(format!("scale-up without a breach; {at}"));
            }
            let start = steps[..=i]
                .iter()
                .rev()
                .take_while(|p| breach(c, &p.load))
                .last()
                .map_or(s.t, |p| p.t);
            if start + c.scale_up_stabilization > s.t {
                return Err(format!(
                    "scale-up after a breach of only {:?}; {at}",
                    s.t - start
                ));
            }
            // No guardrail stacking while asked-for replicas start.
            let starting = prev > s.load.ready as u32
                && ups
                    .last()
                    .is_some_and(|&(w, _, _)| s.t - w < c.startup_grace);
            let widened_to = smallest_acted_scale_up(
                hpa_current,
                hpa_current + 1,
                c.max_replicas,
                c.hpa_tolerance,
            );
            if starting {
                let demand = (s.load.queue / c.queue_depth_per_replica).ceil() as u32;
                let allowed = demand.min(c.max_replicas).max(widened_to.unwrap_or(0));
                if d.reason != Reason::QueueDepth || d.desired_replicas > allowed {
                    return Err(format!(
                        "stacked {} -> {} while starting; {at}",
                        prev, d.desired_replicas
                    ));
                }
            }
            ups.retain(|&(w, _, _)| w + c.scale_up_period > s.t);
            let widened = up > c.scale_up_pods && Some(d.desired_replicas) == widened_to;
            ups.push((s.t, up, widened));
            let sum: u32 = ups.iter().map(|&(_, n, _)| n).sum();
            let lone_widened = ups.len() == 1 && widened;
            if sum > c.scale_up_pods && !lone_widened {
                return Err(format!("+{sum} within one scale-up period; {at}"));
            }
        }
        prev = d.desired_replicas;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn policy_invariants_hold(c in config(), segs in segments(), dt_s in 1u64..7) {
        let steps = simulate(&c, &segs, dt_s);
        prop_assume!(!steps.is_empty());
        if let Err(e) = check(&c, &steps) {
            prop_assert!(false, "{}", e);
        }
    }
}

/// The failing cases proptest once recorded (its seeds no longer replay them since the
/// strategies changed), kept as explicit cases: a restart whose first samples have no ready
/// replica, then load; a start-up grace with no replica ready; a level raised then no data.
#[test]
fn recorded_regressions_still_hold() {
    let recorded = |max: u32, grace: u64| PolicyConfig {
        min_replicas: 1,
        max_replicas: max,
        queue_depth_per_replica: 1.0,
        e2e_latency_slo_seconds: Some(1.0),
        ttft_slo_seconds: None,
        itl_slo_seconds: None,
        scale_up_pods: 1,
        scale_up_period: secs(2),
        scale_up_stabilization: Duration::ZERO,
        scale_down_pods: 1,
        scale_down_period: secs(2),
        scale_down_stabilization: Duration::ZERO,
        startup_grace: secs(grace),
        hpa_tolerance: 0.0,
        ..PolicyConfig::default()
    };
    let seg = |regime: u8, duration_s: u64, ready: usize, follow_target: bool| Segment {
        regime,
        duration_s,
        ready,
        follow_target,
        x: 0.0,
        unknown: 0,
    };
    let cases = [
        (
            recorded(2, 0),
            vec![seg(8, 1, 0, false), seg(2, 1, 2, false)],
        ),
        (
            recorded(3, 6),
            vec![seg(0, 6, 0, true), seg(4, 6, 1, false)],
        ),
        (
            recorded(2, 0),
            vec![seg(2, 1, 2, false), seg(10, 1, 0, true)],
        ),
    ];
    for (c, segs) in cases {
        let steps = simulate(&c, &segs, 1);
        assert!(!steps.is_empty());
        if let Err(e) = check(&c, &steps) {
            panic!("{e}\n{c:?}\n{segs:?}");
        }
    }
}

/// The property checker itself must catch a policy that scales in too early.
#[test]
fn checker_rejects_an_early_scale_in() {
    let c = PolicyConfig::default();
    let mut steps = Vec::new();
    for (i, target) in [3u32, 3, 2].into_iter().enumerate() {
        steps.push(Step {
            t: secs(i as u64 * 2),
            load: Load::idle(3),
            decision: Decision {
                at: secs(i as u64 * 2),
                target_replicas: target,
                desired_replicas: target,
                ready_replicas: 3,
                active: false,
                mode: Mode::Active,
                reason: Reason::ScaleInCalm,
                explanation: "x".into(),
            },
        });
    }
    let err = check(&c, &steps).unwrap_err();
    assert!(err.contains("first calm period"), "{err}");
}

/// The random runs reach every interesting branch (otherwise the properties above are vacuous).
#[test]
fn random_runs_cover_every_branch() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    use std::collections::BTreeMap;

    let mut runner = TestRunner::deterministic();
    let strategy = (config(), segments(), 1u64..7);
    let mut seen: BTreeMap<Reason, usize> = BTreeMap::new();
    let mut widened = 0;
    let mut bad_inputs = [0usize; BAD.len()];
    let mut slo_off = [0usize; 3];
    for _ in 0..300 {
        let (c, segs, dt) = strategy.new_tree(&mut runner).unwrap().current();
        slo_off[0] += usize::from(c.e2e_latency_slo_seconds.is_none());
        slo_off[1] += usize::from(c.ttft_slo_seconds.is_none());
        slo_off[2] += usize::from(c.itl_slo_seconds.is_none());
        for s in simulate(&c, &segs, dt) {
            *seen.entry(s.decision.reason).or_default() += 1;
            widened += usize::from(s.decision.explanation.contains("widened"));
            for (i, b) in BAD.iter().enumerate() {
                let same = |v: f64| v.to_bits() == b.to_bits();
                bad_inputs[i] += usize::from(same(s.load.queue) || s.load.kv_max.is_some_and(same));
            }
        }
    }
    let missing: Vec<Reason> = Reason::ALL
        .into_iter()
        .filter(|r| !seen.contains_key(r))
        .collect();
    assert!(
        missing.is_empty(),
        "never reached: {missing:?}; seen {seen:?}"
    );
    assert!(widened > 0, "no scale-up was widened for the HPA tolerance");
    assert!(
        bad_inputs.iter().all(|&n| n > 0),
        "bad values not all generated (NaN, inf, -inf, -1, -0): {bad_inputs:?}"
    );
    assert!(
        slo_off.iter().all(|&n| n > 0),
        "an SLO never off: {slo_off:?}"
    );
}
