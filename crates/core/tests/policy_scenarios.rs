//! Policy scenarios on explicit instants: ramp, spike, flap, idle, restart, a pod failing,
//! the guardrails, the HPA tolerance band and advisory mode.

mod policy_support;

use std::time::Duration;

use policy_support::{Load, changes, run, secs};
use vllm_keda_core::policy::{Decision, Mode, Policy, PolicyConfig, PolicyState, Reason};

/// The source guide's example: P95 end-to-end SLO 5 s, TTFT and ITL SLOs off (the scenarios
/// below are written against it; the shipped defaults differ, see `docs/policy.md`).
fn guide_config() -> PolicyConfig {
    PolicyConfig {
        e2e_latency_slo_seconds: Some(5.0),
        ttft_slo_seconds: None,
        itl_slo_seconds: None,
        ..PolicyConfig::default()
    }
}

/// The decision's replicas and reason, with its explanation shown when they differ.
fn expect(d: &Decision, replicas: u32, reason: Reason) {
    assert_eq!(
        (d.desired_replicas, d.reason),
        (replicas, reason),
        "{}",
        d.explanation
    );
}

fn policy() -> Policy {
    Policy::new(guide_config())
}

fn policy_with(f: impl FnOnce(&mut PolicyConfig)) -> Policy {
    let mut c = guide_config();
    f(&mut c);
    Policy::new(c)
}

#[test]
fn queue_breach_waits_for_stabilization_then_scales_to_demand() {
    let p = policy();
    let mut st = PolicyState::default();
    let ds = run(&p, &mut st, 0, 60, 2, |t| {
        let q = if t >= 10 { 100.0 } else { 0.0 };
        Load::idle(2).queue(q).running(10.0)
    });
    for (t, d) in &ds {
        match *t {
            0..10 => assert_eq!(
                d.reason,
                Reason::HoldCalmPending,
                "t={t}: {}",
                d.explanation
            ),
            10..40 => {
                assert_eq!(d.reason, Reason::HoldStabilizing, "t={t}");
                assert_eq!(d.target_replicas, 2, "t={t}");
            }
            40 => {
                assert_eq!(d.reason, Reason::QueueDepth);
                assert_eq!(d.target_replicas, 4);
                assert_eq!(
                    d.explanation,
                    "queue 100 over 2 ready replicas = 50 per replica > 25 per replica (demand 4 replicas); target 2 -> 4 (at most +2 per 60 s)"
                );
            }
            _ => assert_eq!(d.reason, Reason::HoldStartingUp, "t={t}: {}", d.explanation),
        }
        assert!(d.active);
    }
    let (_, d) = &ds[11];
    assert_eq!(
        d.explanation,
        "queue 100 over 2 ready replicas = 50 per replica > 25 per replica (demand 4 replicas); breach for 12 s of 30 s; holding at 2"
    );
}

#[test]
fn explanation_carries_every_breach() {
    let p = policy_with(|c| {
        c.scale_up_stabilization = Duration::ZERO;
        c.max_replicas = 10;
    });
    let mut st = PolicyState::default();
    let d = p.decide(
        secs(0),
        &Load::idle(5).queue(140.0).p95(7.2).signals(secs(0)),
        &mut st,
    );
    // The guardrail's step (5 + 2) asks for more than the queue's demand (6): it leads.
    assert_eq!(d.reason, Reason::E2eLatencySlo);
    assert_eq!(d.target_replicas, 7);
    assert_eq!(
        d.explanation,
        "queue 140 over 5 ready replicas = 28 per replica > 25 per replica (demand 6 replicas); P95 e2e 7.2 s > SLO 5 s; target 5 -> 7 (at most +2 per 60 s)"
    );
}

#[test]
fn ramp_rises_by_at_most_two_per_minute_and_stops_at_max() {
    // Pods become ready 120 s after they are asked for; the queue grows 1 request/s.
    let p = policy();
    let mut st = PolicyState::default();
    let mut asked: Vec<(u64, u32)> = vec![(0, 1)];
    let mut ds = Vec::new();
    for t in (0..900).step_by(2) {
        let ready = asked
            .iter()
            .rev()
            .find(|(at, _)| at + 120 <= t || *at == 0)
            .map(|&(_, n)| n)
            .unwrap_or(1);
        let load = Load::idle(ready as usize).queue(t as f64).running(8.0);
        let d = p.decide(secs(t), &load.signals(secs(t)), &mut st);
        if d.target_replicas != asked.last().unwrap().1 {
            asked.push((t, d.target_replicas));
        }
        ds.push((t, d));
    }
    let ch = changes(&ds, 1);
    // 26 waiting on 1 ready replica first exceeds 25 at t=26; 30 s later demand ceil(56/25).
    assert_eq!(ch[0], (56, 3, Reason::QueueDepth), "{ch:?}");
    for w in ch.windows(2) {
        assert!(w[1].0 - w[0].0 >= 60, "two scale-ups within 60 s: {ch:?}");
        assert!(w[1].1 <= w[0].1 + 2, "more than +2: {ch:?}");
    }
    assert_eq!(ch.last().unwrap().1, 5, "{ch:?}");
    let (_, last) = ds.last().unwrap();
    assert_eq!(last.reason, Reason::AtMax, "{}", last.explanation);
}

#[test]
fn spike_shorter_than_stabilization_does_nothing() {
    let p = policy();
    let mut st = PolicyState::with_previous_target(3);
    let ds = run(&p, &mut st, 0, 400, 2, |t| {
        if (100..120).contains(&t) {
            Load::idle(3).queue(500.0).p95(9.0)
        } else {
            Load::idle(3).running(2.0).finished(30.0).p95(1.0)
        }
    });
    assert!(changes(&ds, 3).is_empty(), "{:?}", changes(&ds, 3));
    // The spike restarted the calm clock: calm again from 120, not yet 300 s at 398.
    let (_, d) = ds.last().unwrap();
    assert_eq!(d.reason, Reason::HoldCalmPending, "{}", d.explanation);
    assert!(
        d.explanation.starts_with("calm for 278 s of 300 s"),
        "{}",
        d.explanation
    );
}

#[test]
fn flapping_breach_never_scales_either_way() {
    let p = policy();
    let mut st = PolicyState::with_previous_target(3);
    let ds = run(&p, &mut st, 0, 1800, 2, |t| {
        if (t / 2) % 10 == 0 {
            Load::idle(3).p95(6.0).finished(10.0)
        } else {
            Load::idle(3).p95(1.0).finished(10.0)
        }
    });
    assert!(changes(&ds, 3).is_empty(), "{:?}", changes(&ds, 3));
    assert!(ds.iter().all(|(_, d)| d.reason != Reason::ScaleInCalm));
}

#[test]
fn idle_scales_in_one_pod_per_two_minutes_after_five_calm_minutes() {
    let p = policy();
    let mut st = PolicyState::with_previous_target(5);
    let mut ready = 5usize;
    let mut ds = Vec::new();
    for t in (0..1200).step_by(2) {
        let d = p.decide(secs(t), &Load::idle(ready).signals(secs(t)), &mut st);
        ready = d.target_replicas as usize;
        assert!(!d.active, "no traffic is inactive");
        ds.push((t, d));
    }
    let ch = changes(&ds, 5);
    assert_eq!(
        ch,
        vec![
            (300, 4, Reason::ScaleInCalm),
            (420, 3, Reason::ScaleInCalm),
            (540, 2, Reason::ScaleInCalm),
            (660, 1, Reason::ScaleInCalm),
        ]
    );
    let (_, d) = &ds[150];
    assert_eq!(
        d.explanation,
        "calm for 300 s (queue 0, P95 e2e undefined); target 5 -> 4 (at most -1 per 120 s)"
    );
    let (_, last) = ds.last().unwrap();
    assert_eq!(last.reason, Reason::AtMin);
    assert_eq!(
        last.explanation,
        "calm for 1198 s (queue 0, P95 e2e undefined); at min 1"
    );
    let (_, between) = &ds[200];
    assert_eq!(
        between.reason,
        Reason::HoldRateLimited,
        "{}",
        between.explanation
    );
}

#[test]
fn restart_starts_from_ready_replicas_and_waits_a_full_calm_period() {
    let p = policy();
    // The scaler restarts at t=5000 into a calm fleet of 4.
    let mut st = PolicyState::default();
    let ds = run(&p, &mut st, 5000, 5400, 2, |_| {
        Load::idle(4).running(1.0).finished(5.0).p95(0.8).kv(0.3)
    });
    assert_eq!(ds[0].1.target_replicas, 4, "a restart must not jump to min");
    assert_eq!(ds[0].1.reason, Reason::HoldCalmPending);
    assert_eq!(changes(&ds, 4), vec![(5300, 3, Reason::ScaleInCalm)]);
}

#[test]
fn failing_pod_is_not_scaled_in_and_guardrails_wait_for_its_replacement() {
    let p = policy_with(|c| c.max_replicas = 8);
    let mut st = PolicyState::with_previous_target(4);
    // Steady at 4; one pod fails at t=100 and the others slow down past the SLO.
    let ds = run(&p, &mut st, 0, 900, 2, |t| {
        if t < 100 {
            Load::idle(4)
                .queue(40.0)
                .running(32.0)
                .finished(200.0)
                .p95(3.0)
        } else {
            Load::idle(3)
                .queue(40.0)
                .running(24.0)
                .finished(150.0)
                .p95(6.5)
        }
    });
    for (t, d) in &ds {
        assert!(
            d.target_replicas >= 4,
            "t={t}: scaled in while a pod failed"
        );
        if (130..700).contains(t) {
            assert_eq!(d.reason, Reason::HoldStartingUp, "t={t}: {}", d.explanation);
            assert_eq!(d.target_replicas, 4);
        }
    }
    let (_, d) = ds.iter().find(|(t, _)| *t == 130).unwrap();
    assert_eq!(
        d.explanation,
        "P95 e2e 6.5 s > SLO 5 s; 1 of 4 asked replicas not ready yet (30 s of 600 s grace), counted as capacity on the way; holding at 4"
    );
    // The replacement never came: after the grace the guardrail steps.
    assert_eq!(changes(&ds, 4), vec![(700, 6, Reason::E2eLatencySlo)]);
}

#[test]
fn unknown_pods_are_not_calm_but_the_answering_ones_still_scale_out() {
    let p = policy();
    let mut st = PolicyState::with_previous_target(3);
    // Two of three pods stop answering; the answering one is idle: never a scale-in.
    let ds = run(&p, &mut st, 0, 1200, 2, |_| Load::idle(1).unknown(2));
    assert!(changes(&ds, 3).is_empty(), "{:?}", changes(&ds, 3));
    let (_, last) = ds.last().unwrap();
    assert_eq!(last.reason, Reason::Hold);
    assert_eq!(
        last.explanation,
        "within bounds, not calm (2 of 3 known targets not observed (a target that does not answer counts as loaded: no scale-in on a partial view)); holding at 3"
    );
    // The answering pod's queue still scales out (demand from what answers).
    let ds = run(&p, &mut st, 1200, 1300, 2, |_| {
        Load::idle(1).unknown(2).queue(150.0)
    });
    assert_eq!(changes(&ds, 3), vec![(1230, 5, Reason::QueueDepth)]);
}

#[test]
fn guardrails_do_not_stack_while_replicas_start() {
    let p = policy_with(|c| c.max_replicas = 20);
    let mut st = PolicyState::with_previous_target(2);
    // Latency stays over the SLO and new pods never become ready.
    let ds = run(&p, &mut st, 0, 1400, 2, |_| {
        Load::idle(2).p95(8.0).finished(50.0)
    });
    assert_eq!(
        changes(&ds, 2),
        vec![
            (30, 4, Reason::E2eLatencySlo),
            (630, 6, Reason::E2eLatencySlo),
            (1230, 8, Reason::E2eLatencySlo)
        ]
    );
}

#[test]
fn queue_demand_still_applies_while_replicas_start() {
    let p = policy_with(|c| c.max_replicas = 20);
    let mut st = PolicyState::with_previous_target(2);
    let ds = run(&p, &mut st, 0, 200, 2, |t| {
        Load::idle(2).queue(52.0 + 2.0 * t as f64)
    });
    let ch = changes(&ds, 2);
    assert_eq!(ch[0], (30, 4, Reason::QueueDepth));
    assert_eq!(ch[1], (90, 6, Reason::QueueDepth), "{ch:?}");
}

#[test]
fn kv_cache_critical_must_hold_thirty_seconds() {
    let p = policy_with(|c| c.scale_up_stabilization = Duration::ZERO);
    let mut st = PolicyState::with_previous_target(2);
    let ds = run(&p, &mut st, 0, 40, 2, |_| {
        Load::idle(2).kv(0.97).running(40.0)
    });
    assert_eq!(ds[6].1.reason, Reason::HoldStabilizing);
    assert_eq!(
        ds[6].1.explanation,
        "KV cache max 97 % > critical 95 % for 12 s of 30 s; holding at 2"
    );
    assert_eq!(changes(&ds, 2), vec![(30, 4, Reason::KvCacheCritical)]);
    assert_eq!(
        ds[15].1.explanation,
        "KV cache max 97 % > critical 95 % for 30 s; target 2 -> 4 (at most +2 per 60 s)"
    );
}

#[test]
fn short_queue_is_neither_breach_nor_calm() {
    let p = policy();
    let mut st = PolicyState::with_previous_target(3);
    let ds = run(&p, &mut st, 0, 900, 2, |_| {
        Load::idle(3).queue(10.0).p95(1.0)
    });
    assert!(changes(&ds, 3).is_empty());
    assert_eq!(
        ds[0].1.explanation,
        "within bounds, not calm (queue 10 > 0, 3.33 per ready replica); holding at 3"
    );
}

#[test]
fn kv_between_warning_and_critical_blocks_scale_in_only() {
    let p = policy();
    let mut st = PolicyState::with_previous_target(3);
    let ds = run(&p, &mut st, 0, 900, 2, |_| {
        Load::idle(3).kv(0.85).running(30.0)
    });
    assert!(changes(&ds, 3).is_empty());
    assert_eq!(ds[0].1.reason, Reason::Hold);
    assert_eq!(
        ds[0].1.explanation,
        "within bounds, not calm (KV cache max 85 % >= warning 80 %); holding at 3"
    );
}

#[test]
fn gpu_memory_blocks_scale_in_when_reported() {
    let p = policy();
    let mut st = PolicyState::with_previous_target(3);
    let ds = run(&p, &mut st, 0, 900, 2, |_| Load::idle(3).gpu_mem(0.96));
    assert!(changes(&ds, 3).is_empty());
    assert!(ds[0].1.explanation.contains("GPU memory max 96 % >= 95 %"));
}

#[test]
fn unknown_gpu_memory_blocks_scale_in_only_when_dcgm_is_configured() {
    let blind = policy_with(|c| c.gpu_memory_required = true);
    let mut st = PolicyState::with_previous_target(3);
    let ds = run(&blind, &mut st, 0, 900, 2, |_| Load::idle(3));
    assert!(changes(&ds, 3).is_empty());
    assert_eq!(
        ds[0].1.explanation,
        "within bounds, not calm (GPU memory unknown (DCGM configured but not answering)); holding at 3"
    );
    let mut st = PolicyState::with_previous_target(3);
    let ds = run(&policy(), &mut st, 0, 302, 2, |_| Load::idle(3));
    assert_eq!(changes(&ds, 3), vec![(300, 2, Reason::ScaleInCalm)]);
}

#[test]
fn guardrail_steps_from_the_running_replicas_when_more_run_than_asked() {
    // The HPA keeps 6 (its own minReplicaCount) while the level went down to 2.
    let p = policy_with(|c| {
        c.max_replicas = 10;
        c.scale_up_stabilization = Duration::ZERO;
    });
    let mut st = PolicyState::with_previous_target(2);
    let d = p.decide(secs(0), &Load::idle(6).p95(6.0).signals(secs(0)), &mut st);
    assert_eq!((d.reason, d.target_replicas), (Reason::E2eLatencySlo, 8));
    assert_eq!(
        d.explanation,
        "P95 e2e 6 s > SLO 5 s; target 2 -> 8 (6 ready, at most +2 per 60 s)"
    );
}

#[test]
fn preemption_rate_per_replica_scales_out() {
    let p = policy();
    let mut st = PolicyState::with_previous_target(2);
    let ds = run(&p, &mut st, 0, 32, 2, |_| {
        Load::idle(2).preempt(12.0).running(50.0)
    });
    let (_, d) = ds.last().unwrap();
    assert_eq!((d.reason, d.target_replicas), (Reason::PreemptionRate, 4));
    assert!(
        d.explanation
            .starts_with("preemptions 12/s over 2 ready replicas = 6/s per replica > 5/s"),
        "{}",
        d.explanation
    );
}

#[test]
fn ttft_and_itl_slos_apply_only_when_set() {
    let unset = policy_with(|c| c.scale_up_stabilization = Duration::ZERO);
    let d = unset.decide(
        secs(0),
        &Load::idle(2).ttft(9.0).itl(1.0).signals(secs(0)),
        &mut PolicyState::default(),
    );
    assert_eq!(d.reason, Reason::HoldCalmPending, "{}", d.explanation);
    let set = policy_with(|c| {
        c.scale_up_stabilization = Duration::ZERO;
        c.ttft_slo_seconds = Some(2.0);
        c.itl_slo_seconds = Some(0.1);
    });
    let d = set.decide(
        secs(0),
        &Load::idle(2).ttft(9.0).itl(0.12).signals(secs(0)),
        &mut PolicyState::default(),
    );
    assert_eq!(d.reason, Reason::TtftSlo);
    assert_eq!(
        d.explanation,
        "P95 TTFT 9 s > SLO 2 s; P95 ITL 0.12 s > SLO 0.1 s; target 2 -> 4 (at most +2 per 60 s)"
    );
}

#[test]
fn an_slo_that_is_off_never_scales_out_and_does_not_block_scale_in() {
    // The shipped defaults with `ttftSloSeconds: off`: a TTFT far over any SLO is ignored,
    // the e2e and ITL SLOs still judge calm.
    let p = Policy::new(PolicyConfig {
        ttft_slo_seconds: None,
        ..PolicyConfig::default()
    });
    let mut st = PolicyState::with_previous_target(3);
    let ds = run(&p, &mut st, 0, 600, 2, |_| {
        Load::idle(3)
            .running(2.0)
            .finished(30.0)
            .p95(10.0)
            .ttft(9.0)
            .itl(0.03)
    });
    assert!(ds.iter().all(|(_, d)| !d.reason.is_scale_out()));
    assert_eq!(
        changes(&ds, 3),
        vec![(300, 2, Reason::ScaleInCalm), (420, 1, Reason::ScaleInCalm)]
    );
    let (_, d) = &ds[150];
    assert_eq!(
        d.explanation,
        "calm for 300 s (queue 0, P95 e2e 10 s < SLO/2 30 s, P95 ITL 0.03 s < SLO/2 0.04 s); target 3 -> 2 (at most -1 per 120 s)"
    );
    // The same load with the TTFT SLO on: a breach, never calm.
    let on = Policy::new(PolicyConfig::default());
    let d = on.decide(
        secs(0),
        &Load::idle(3).p95(10.0).ttft(9.0).itl(0.03).signals(secs(0)),
        &mut PolicyState::default(),
    );
    assert_eq!(d.reason, Reason::HoldStabilizing, "{}", d.explanation);
    assert!(d.explanation.starts_with("P95 TTFT 9 s > SLO 2 s;"));
}

#[test]
fn all_three_slos_off_leave_the_queue_kv_and_preemption_rules() {
    let p = Policy::new(PolicyConfig {
        e2e_latency_slo_seconds: None,
        ttft_slo_seconds: None,
        itl_slo_seconds: None,
        scale_up_stabilization: Duration::ZERO,
        ..PolicyConfig::default()
    });
    // Latencies far over any SLO: calm, and the explanation names no SLO.
    let slow = |ready| {
        Load::idle(ready)
            .p95(900.0)
            .ttft(60.0)
            .itl(5.0)
            .finished(10.0)
    };
    let mut st = PolicyState::with_previous_target(2);
    let ds = run(&p, &mut st, 0, 302, 2, |_| slow(2));
    let (_, d) = ds.last().unwrap();
    assert_eq!((d.reason, d.target_replicas), (Reason::ScaleInCalm, 1));
    assert_eq!(
        d.explanation,
        "calm for 300 s (queue 0); target 2 -> 1 (at most -1 per 120 s)"
    );
    assert!(ds.iter().all(|(_, d)| !d.explanation.contains("SLO")));
    // The other rules still scale out.
    let d = p.decide(
        secs(0),
        &slow(2).queue(100.0).signals(secs(0)),
        &mut PolicyState::default(),
    );
    assert_eq!((d.reason, d.target_replicas), (Reason::QueueDepth, 4));
    let d = p.decide(
        secs(0),
        &slow(2).preempt(12.0).signals(secs(0)),
        &mut PolicyState::default(),
    );
    assert_eq!((d.reason, d.target_replicas), (Reason::PreemptionRate, 4));
    let mut st = PolicyState::default();
    let ds = run(&p, &mut st, 0, 32, 2, |_| slow(2).kv(0.97));
    let (_, d) = ds.last().unwrap();
    assert_eq!(
        (d.reason, d.target_replicas),
        (Reason::KvCacheCritical, 4),
        "{}",
        d.explanation
    );
}

#[test]
fn scale_up_inside_the_tolerance_band_is_widened() {
    let p = policy_with(|c| {
        c.max_replicas = 40;
        c.scale_up_stabilization = Duration::ZERO;
    });
    let mut st = PolicyState::with_previous_target(20);
    let d = p.decide(secs(0), &Load::idle(20).p95(6.0).signals(secs(0)), &mut st);
    assert_eq!((d.reason, d.target_replicas), (Reason::E2eLatencySlo, 23));
    assert!(
        d.explanation.ends_with(
            "target 20 -> 23 (at most +2 per 60 s); widened from 22 because |22/20 - 1| = 0.1 <= tolerance 0.1 (the HPA would ignore it)"
        ),
        "{}",
        d.explanation
    );
}

#[test]
fn scale_up_the_band_swallows_at_max_is_held_and_said() {
    let p = policy_with(|c| {
        c.max_replicas = 11;
        c.scale_up_stabilization = Duration::ZERO;
    });
    let mut st = PolicyState::with_previous_target(10);
    let d = p.decide(secs(0), &Load::idle(10).p95(6.0).signals(secs(0)), &mut st);
    assert_eq!((d.reason, d.target_replicas), (Reason::HoldTolerance, 10));
    assert!(
        d.explanation.contains("behavior.scaleUp.tolerance"),
        "{}",
        d.explanation
    );
}

#[test]
fn scale_in_inside_the_tolerance_band_is_reported_and_the_next_step_crosses_it() {
    let p = policy_with(|c| c.max_replicas = 20);
    let mut st = PolicyState::with_previous_target(10);
    // The HPA ignores 9 at 10 replicas, so 10 stay ready.
    let ds = run(&p, &mut st, 0, 500, 2, |_| Load::idle(10));
    let ch = changes(&ds, 10);
    assert_eq!(
        ch,
        vec![
            (300, 9, Reason::HoldTolerance),
            (420, 8, Reason::ScaleInCalm)
        ]
    );
    let (_, d) = &ds[150];
    assert_eq!(
        d.explanation,
        "calm for 300 s (queue 0, P95 e2e undefined); target 10 -> 9 (at most -1 per 120 s), but |9/10 - 1| = 0.1 <= tolerance 0.1: the HPA holds until a later step crosses the band; set the HPA's behavior.scaleDown.tolerance below 0.1 and hpaTolerance to match so every step acts"
    );
}

#[test]
fn advisory_returns_the_observed_replicas() {
    let p = policy_with(|c| c.mode = Mode::Advisory);
    let mut st = PolicyState::default();
    let ds = run(&p, &mut st, 0, 40, 2, |_| Load::idle(3).queue(200.0));
    let (_, d) = &ds[15];
    assert_eq!(d.target_replicas, 3);
    assert_eq!(d.desired_replicas, 5);
    assert_eq!(d.mode, Mode::Advisory);
    assert_eq!(d.reason, Reason::QueueDepth);
    assert!(
        d.explanation
            .starts_with("advisory, returning the 3 observed replicas; queue 200"),
        "{}",
        d.explanation
    );
}

#[test]
fn no_data_holds_the_level_and_restarts_the_calm_clock() {
    let p = policy();
    let mut st = PolicyState::with_previous_target(3);
    let ds = run(&p, &mut st, 0, 700, 2, |t| {
        if t == 290 {
            Load::idle(0)
        } else {
            Load::idle(3).running(1.0)
        }
    });
    let (_, gap) = &ds[145];
    assert_eq!(
        (gap.reason, gap.target_replicas, gap.active),
        (Reason::NoData, 3, false)
    );
    assert_eq!(
        gap.explanation,
        "no ready replica answered (0 known, 0 ready); holding at 3; calm and breach clocks restart"
    );
    assert_eq!(changes(&ds, 3), vec![(592, 2, Reason::ScaleInCalm)]);
}

#[test]
fn scrape_failure_keeps_the_last_activity() {
    let p = policy();
    let mut st = PolicyState::default();
    assert!(
        p.decide(
            secs(0),
            &Load::idle(2).running(1.0).signals(secs(0)),
            &mut st
        )
        .active
    );
    let mut failing = Load::idle(0).signals(secs(2));
    failing.pods_total = 2;
    let d = p.decide(secs(2), &failing, &mut st);
    assert_eq!(
        (d.reason, d.active, d.target_replicas),
        (Reason::NoData, true, 2)
    );
}

#[test]
fn activity_is_any_waiting_running_or_finished_request() {
    let p = policy();
    let cases = [
        (Load::idle(1), false),
        (Load::idle(1).queue(1.0), true),
        (Load::idle(1).running(1.0), true),
        (Load::idle(1).finished(0.5), true),
    ];
    for (load, active) in cases {
        let d = p.decide(secs(0), &load.signals(secs(0)), &mut PolicyState::default());
        assert_eq!(d.active, active, "{load:?}");
    }
}

#[test]
fn garbage_signals_never_panic_or_print_nan() {
    let p = policy_with(|c| c.scale_up_stabilization = Duration::ZERO);
    let mut st = PolicyState::default();
    // Non-finite and negative values are absent (or zero for counts): the level stays at the 2
    // ready replicas. 1e300 is a real, huge queue: one rate-limited step, 2 -> 2 + scaleUpPods.
    for (i, (x, expected)) in [
        (f64::NAN, 2),
        (f64::INFINITY, 2),
        (f64::NEG_INFINITY, 2),
        (-1.0, 2),
        (1e300, 4),
    ]
    .into_iter()
    .enumerate()
    {
        let load = Load {
            ready: 2,
            unknown: 0,
            queue: x,
            running: x,
            finished: x,
            e2e_p95: Some(x),
            ttft_p95: Some(x),
            itl_p95: Some(x),
            kv_max: Some(x),
            preemptions_per_second: Some(x),
            gpu_memory_max: Some(x),
        };
        let d = p.decide(secs(i as u64), &load.signals(secs(i as u64)), &mut st);
        assert_eq!(d.target_replicas, expected, "{x}: {d:?}");
        assert!(
            !d.explanation.contains("NaN") && !d.explanation.contains("inf"),
            "{d:?}"
        );
    }
}

#[test]
fn reason_codes_are_snake_case_and_match_serde() {
    for r in Reason::ALL {
        let json = serde_json::to_string(&r).unwrap();
        assert_eq!(json, format!("\"{}\"", r.as_str()));
        assert!(
            r.as_str()
                .chars()
                .all(|c| c.is_ascii_lowercase() || c == '_' || c.is_ascii_digit())
        );
    }
}

#[test]
fn modes_and_durations_serialize_as_documented() {
    for (mode, text) in [(Mode::Active, "active"), (Mode::Advisory, "advisory")] {
        assert_eq!(mode.as_str(), text);
        assert_eq!(serde_json::to_string(&mode).unwrap(), format!("\"{text}\""));
    }
    // Durations are seconds (the explain page and `/debug` show the config as JSON).
    let json = serde_json::to_value(PolicyConfig::default()).unwrap();
    assert_eq!(json["scale_up_period"], 60.0);
    assert_eq!(json["scale_down_stabilization"], 300.0);
    assert_eq!(json["kv_cache_critical_for"], 30.0);
    assert_eq!(json["mode"], "active");
}

#[test]
fn reasons_display_as_their_codes() {
    for r in Reason::ALL {
        assert_eq!(r.to_string(), r.as_str());
    }
}

/// What the state reports (the service's `/debug` page and restart hand-over read it) is
/// what the decisions did: the level, and when the breach and calm clocks started.
#[test]
fn the_state_reports_its_level_and_clocks() {
    let p = policy_with(|c| {
        c.scale_up_stabilization = secs(10);
        c.scale_down_stabilization = secs(20);
    });
    let mut st = PolicyState::default();
    assert_eq!(st.level(), None);
    let calm = Load::idle(3);
    let d = p.decide(secs(100), &calm.signals(secs(100)), &mut st);
    assert_eq!(st.level(), Some(d.desired_replicas));
    assert_eq!(st.level(), Some(3));
    assert_eq!(st.calm_since(), Some(secs(100)));
    assert_eq!(st.breach_since(), None);
    assert!(!st.calm_period_seen());
    p.decide(secs(119), &calm.signals(secs(119)), &mut st);
    assert!(!st.calm_period_seen());
    p.decide(secs(120), &calm.signals(secs(120)), &mut st);
    assert!(st.calm_period_seen(), "calm held for the full 20 s");
    assert_eq!(st.calm_since(), Some(secs(100)));

    // A breach starts its clock and ends the calm one.
    let hot = Load::idle(3).queue(1000.0);
    p.decide(secs(130), &hot.signals(secs(130)), &mut st);
    assert_eq!(st.breach_since(), Some(secs(130)));
    assert_eq!(st.calm_since(), None);
    p.decide(secs(135), &hot.signals(secs(135)), &mut st);
    assert_eq!(st.breach_since(), Some(secs(130)));
    let d = p.decide(secs(140), &hot.signals(secs(140)), &mut st);
    assert_eq!(d.reason, Reason::QueueDepth);
    assert_eq!(st.level(), Some(d.desired_replicas));
    assert_eq!(st.level(), Some(5));
}

/// The start-up grace of a lost pod starts when the pod is lost, not when the level was last
/// set: a long-running fleet that loses one of its replicas during a breach waits for it.
#[test]
fn a_replica_lost_after_a_long_steady_run_gets_a_fresh_start_up_grace() {
    let p = policy_with(|c| {
        c.scale_up_stabilization = Duration::ZERO;
        c.startup_grace = secs(600);
    });
    let mut st = PolicyState::default();
    // 700 s at 3 ready replicas, busy but in bounds (queue 10 of 25 per replica).
    for t in (0..700).step_by(10) {
        let d = p.decide(
            secs(t),
            &Load::idle(3).queue(10.0).signals(secs(t)),
            &mut st,
        );
        assert_eq!((d.desired_replicas, d.reason), (3, Reason::Hold), "t={t}");
    }
    // One replica is gone and latency breaches: the missing one is on its way (restarting).
    let d = p.decide(
        secs(700),
        &Load::idle(2).queue(10.0).p95(6.0).signals(secs(700)),
        &mut st,
    );
    assert_eq!(d.reason, Reason::HoldStartingUp, "{}", d.explanation);
    assert_eq!(d.desired_replicas, 3);
    assert!(
        d.explanation.contains("0 s of 600 s grace"),
        "{}",
        d.explanation
    );
}

/// The grace ends exactly `startupGraceSeconds` after the replicas were asked for: then a
/// guardrail may step again.
#[test]
fn the_start_up_grace_ends_at_exactly_its_length() {
    let p = policy_with(|c| {
        c.scale_up_stabilization = Duration::ZERO;
        c.startup_grace = secs(60);
    });
    let mut st = PolicyState::default();
    p.decide(
        secs(0),
        &Load::idle(3).queue(10.0).signals(secs(0)),
        &mut st,
    );
    let hot = Load::idle(2).queue(10.0).p95(6.0);
    for t in [10, 40, 69] {
        let d = p.decide(secs(t), &hot.signals(secs(t)), &mut st);
        assert_eq!(d.reason, Reason::HoldStartingUp, "t={t}: {}", d.explanation);
    }
    let d = p.decide(secs(70), &hot.signals(secs(70)), &mut st);
    assert_eq!(d.reason, Reason::E2eLatencySlo, "{}", d.explanation);
    assert_eq!(d.desired_replicas, 5);
}

/// Guardrails asking for the same step: the first in rule order (e2e, TTFT, ITL, KV,
/// preemptions) is the reason.
#[test]
fn tied_guardrails_report_the_first_in_rule_order() {
    let p = policy_with(|c| {
        c.scale_up_stabilization = Duration::ZERO;
        c.ttft_slo_seconds = Some(2.0);
        c.itl_slo_seconds = Some(0.07);
    });
    let cases = [
        (
            Load::idle(2).p95(6.0).ttft(3.0).itl(0.1),
            Reason::E2eLatencySlo,
        ),
        (Load::idle(2).ttft(3.0).itl(0.1), Reason::TtftSlo),
        (Load::idle(2).itl(0.1).preempt(100.0), Reason::ItlSlo),
    ];
    for (load, reason) in cases {
        let d = p.decide(secs(0), &load.signals(secs(0)), &mut PolicyState::default());
        assert_eq!(d.reason, reason, "{}", d.explanation);
        assert_eq!(d.desired_replicas, 4, "{}", d.explanation);
    }
}

/// Queue demand at or below the replicas already asked for: within the grace the missing
/// ones are on their way; after it, still no more are asked for (the demand is met by the
/// level), and the explanation says so with the numbers.
#[test]
fn demand_at_or_below_the_asked_replicas_holds_after_the_grace_too() {
    let p = policy_with(|c| {
        c.scale_up_stabilization = Duration::ZERO;
        c.startup_grace = secs(60);
        c.max_replicas = 10;
    });
    let mut st = PolicyState::with_previous_target(4);
    // 60 waiting over 2 ready = 30 per replica > 25: demand 3 <= the 4 asked for.
    let load = Load::idle(2).queue(60.0);
    let d = p.decide(secs(0), &load.signals(secs(0)), &mut st);
    assert_eq!(d.reason, Reason::HoldStartingUp, "{}", d.explanation);
    let d = p.decide(secs(60), &load.signals(secs(60)), &mut st);
    assert_eq!(d.reason, Reason::Hold, "{}", d.explanation);
    assert_eq!(d.desired_replicas, 4);
    assert!(
        d.explanation
            .ends_with("demand 3 <= 4 asked (2 not ready after the 60 s grace); holding at 4"),
        "{}",
        d.explanation
    );
}

/// A step inside the HPA's tolerance must be widened, but the wider step exceeds what is left
/// of this period's budget: it waits for a fresh period (no partial step the HPA ignores).
#[test]
fn a_widened_step_beyond_the_remaining_budget_waits_for_a_fresh_period() {
    let p = policy_with(|c| {
        c.scale_up_stabilization = Duration::ZERO;
        c.scale_up_pods = 4;
        c.hpa_tolerance = 0.5;
        c.max_replicas = 10;
    });
    let mut st = PolicyState::default();
    // 100 waiting over 2: demand 4, 4/2 = 2 clears the band: +2 of the 4 this period.
    let d = p.decide(
        secs(0),
        &Load::idle(2).queue(100.0).signals(secs(0)),
        &mut st,
    );
    assert_eq!((d.desired_replicas, d.reason), (4, Reason::QueueDepth));
    // 125 over 4: demand 5, but 5/4 is inside the band; the HPA acts from 7 (+3 > the 2 left).
    let d = p.decide(
        secs(10),
        &Load::idle(4).queue(125.0).signals(secs(10)),
        &mut st,
    );
    assert_eq!(d.reason, Reason::HoldRateLimited, "{}", d.explanation);
    assert_eq!(d.desired_replicas, 4);
    assert!(
        d.explanation.contains(
            "4 -> 5 is inside the HPA tolerance (|5/4 - 1| = 0.25 <= tolerance 0.5) and the +3 it needs waits for a fresh 60 s period (at most +4 per 60 s); holding at 4"
        ),
        "{}",
        d.explanation
    );
    // A fresh period: the whole widened step at once.
    let d = p.decide(
        secs(60),
        &Load::idle(4).queue(125.0).signals(secs(60)),
        &mut st,
    );
    expect(&d, 7, Reason::QueueDepth);
    assert!(
        d.explanation.contains("widened from 5"),
        "{}",
        d.explanation
    );
}

/// The widened step that fits exactly in what is left of the budget is taken at once.
#[test]
fn a_widened_step_that_fits_the_remaining_budget_exactly_is_taken() {
    let p = policy_with(|c| {
        c.scale_up_stabilization = Duration::ZERO;
        c.scale_up_pods = 4;
        c.hpa_tolerance = 0.3;
        c.max_replicas = 10;
    });
    let mut st = PolicyState::default();
    let d = p.decide(
        secs(0),
        &Load::idle(2).queue(100.0).signals(secs(0)),
        &mut st,
    );
    assert_eq!((d.desired_replicas, d.reason), (4, Reason::QueueDepth));
    // Demand 5: 5/4 = 1.25 is inside the band; 6 clears it and +2 is exactly what is left.
    let d = p.decide(
        secs(10),
        &Load::idle(4).queue(125.0).signals(secs(10)),
        &mut st,
    );
    expect(&d, 6, Reason::QueueDepth);
    assert!(
        d.explanation.contains("widened from 5"),
        "{}",
        d.explanation
    );
}

/// The queue rule fires above N per ready replica, not at N; N = 0 turns the rule off.
#[test]
fn the_queue_rule_fires_strictly_above_n_and_not_at_all_with_n_zero() {
    // At N, with the 30 s stabilization (a breach would answer HoldStabilizing): no breach.
    let at_n = Load::idle(2).queue(50.0);
    let d = policy().decide(secs(0), &at_n.signals(secs(0)), &mut PolicyState::default());
    expect(&d, 2, Reason::Hold);
    let p = policy_with(|c| c.scale_up_stabilization = Duration::ZERO);
    let above = Load::idle(2).queue(51.0);
    let d = p.decide(
        secs(0),
        &above.signals(secs(0)),
        &mut PolicyState::default(),
    );
    expect(&d, 3, Reason::QueueDepth);
    let off = policy_with(|c| {
        c.scale_up_stabilization = Duration::ZERO;
        c.queue_depth_per_replica = 0.0;
    });
    let d = off.decide(
        secs(0),
        &above.signals(secs(0)),
        &mut PolicyState::default(),
    );
    expect(&d, 2, Reason::Hold);
}

/// The rate limit counts the pods each step added: after +1, one more fits in the period.
#[test]
fn the_rate_limit_counts_the_pods_each_step_added() {
    let p = policy_with(|c| {
        c.scale_up_stabilization = Duration::ZERO;
        c.hpa_tolerance = 0.0;
        c.max_replicas = 10;
    });
    let mut st = PolicyState::default();
    // 60 over 2: demand 3 (+1).
    let d = p.decide(
        secs(0),
        &Load::idle(2).queue(60.0).signals(secs(0)),
        &mut st,
    );
    assert_eq!((d.desired_replicas, d.reason), (3, Reason::QueueDepth));
    // 90 over 3: demand 4 (+1 more: 2 of the 2 per period).
    let d = p.decide(
        secs(10),
        &Load::idle(3).queue(90.0).signals(secs(10)),
        &mut st,
    );
    expect(&d, 4, Reason::QueueDepth);
    // 120 over 4: demand 5, but the period's budget is spent.
    let d = p.decide(
        secs(20),
        &Load::idle(4).queue(120.0).signals(secs(20)),
        &mut st,
    );
    expect(&d, 4, Reason::HoldRateLimited);
}

/// Every threshold at exactly its value: a trigger needs more than it (P95 = SLO, KV =
/// critical, preemptions = threshold do not scale out), and calm needs less than it (P95 =
/// SLO/2, KV = warning, GPU memory = 95 % are not calm).
#[test]
fn thresholds_at_exactly_their_value() {
    let p = policy_with(|c| {
        c.scale_up_stabilization = Duration::ZERO;
        c.scale_down_stabilization = Duration::ZERO;
        c.ttft_slo_seconds = Some(2.0);
        c.itl_slo_seconds = Some(0.5);
        c.kv_cache_critical_for = Duration::ZERO;
    });
    let at = |load: Load| {
        let mut st = PolicyState::with_previous_target(3);
        p.decide(secs(0), &load.signals(secs(0)), &mut st)
    };
    let base = Load::idle(3).running(1.0);
    for (what, load) in [
        ("e2e = SLO", base.p95(5.0)),
        ("TTFT = SLO", base.ttft(2.0)),
        ("ITL = SLO", base.itl(0.5)),
        ("KV = critical", base.kv(0.95)),
        ("preemptions = threshold", base.preempt(15.0).kv(0.9)),
        ("e2e = SLO/2", base.p95(2.5)),
        ("TTFT = SLO/2", base.ttft(1.0)),
        ("ITL = SLO/2", base.itl(0.25)),
        ("KV = warning", base.kv(0.8)),
        ("GPU memory = 95 %", base.gpu_mem(0.95)),
    ] {
        let d = at(load);
        assert_eq!(
            (d.desired_replicas, d.reason),
            (3, Reason::Hold),
            "{what}: {}",
            d.explanation
        );
    }
    // Just past each: the trigger fires, or calm holds.
    for (what, load, reason) in [
        ("e2e > SLO", base.p95(5.01), Reason::E2eLatencySlo),
        ("TTFT > SLO", base.ttft(2.01), Reason::TtftSlo),
        ("ITL > SLO", base.itl(0.51), Reason::ItlSlo),
        ("KV > critical", base.kv(0.951), Reason::KvCacheCritical),
        (
            "preemptions > threshold",
            base.preempt(15.1),
            Reason::PreemptionRate,
        ),
        (
            "calm",
            base.p95(2.49).ttft(0.99).itl(0.24).kv(0.79).gpu_mem(0.94),
            Reason::ScaleInCalm,
        ),
    ] {
        let d = at(load);
        assert_eq!(d.reason, reason, "{what}: {}", d.explanation);
    }
}

/// The scale-in rate limit counts the pods each step removed: a step cut short by min uses
/// only what it removed (seen when min is then lowered on the same state).
#[test]
fn the_scale_in_rate_limit_counts_the_pods_each_step_removed() {
    let with_min = |min: u32| {
        policy_with(move |c| {
            c.min_replicas = min;
            c.scale_down_pods = 2;
            c.scale_down_stabilization = Duration::ZERO;
            c.hpa_tolerance = 0.0;
        })
    };
    let mut st = PolicyState::with_previous_target(3);
    let d = with_min(2).decide(secs(0), &Load::idle(3).signals(secs(0)), &mut st);
    expect(&d, 2, Reason::ScaleInCalm);
    let d = with_min(1).decide(secs(10), &Load::idle(2).signals(secs(10)), &mut st);
    expect(&d, 1, Reason::ScaleInCalm);
}

#[test]
fn full_cycle_ramp_plateau_then_idle_returns_to_min() {
    // Pods become ready 90 s after being asked for and leave at once; each ready pod serves 20
    // requests, the rest wait. Load ramps to 150 over 10 min, holds 10 min, then stops.
    let p = policy();
    let mut st = PolicyState::default();
    let mut asked: Vec<(u64, u32)> = vec![(0, 1)];
    let mut targets = Vec::new();
    let load_end = 1200;
    for t in (0..2400).step_by(2) {
        let demand = if t < 600 {
            t as f64 / 4.0
        } else if t < load_end {
            150.0
        } else {
            0.0
        };
        let latest = asked.last().unwrap().1;
        let started = asked
            .iter()
            .rev()
            .find(|(at, _)| at + 90 <= t || *at == 0)
            .map_or(1, |&(_, n)| n);
        let ready = started.min(latest).max(1) as f64;
        let queue = (demand - 20.0 * ready).max(0.0);
        let running = demand.min(20.0 * ready);
        let p95 = (running > 0.0).then(|| 1.0 + queue / ready * 0.3);
        let mut load = Load::idle(ready as usize).queue(queue).running(running);
        load.e2e_p95 = p95;
        load.finished = running;
        let d = p.decide(secs(t), &load.signals(secs(t)), &mut st);
        if d.target_replicas != latest {
            asked.push((t, d.target_replicas));
        }
        targets.push((t, d.target_replicas, d.reason));
    }
    let peak = targets.iter().map(|&(_, n, _)| n).max().unwrap();
    assert_eq!(peak, 5);
    let first_down = targets
        .windows(2)
        .find(|w| w[1].1 < w[0].1)
        .map(|w| w[1].0)
        .unwrap();
    assert!(first_down >= load_end + 300, "scaled in at {first_down}");
    // Up, then down: never up again after the first scale-in.
    let after: Vec<u32> = targets
        .iter()
        .filter(|x| x.0 >= first_down)
        .map(|x| x.1)
        .collect();
    assert!(after.windows(2).all(|w| w[1] <= w[0]), "{after:?}");
    assert_eq!(targets.last().unwrap().1, 1);
    assert_eq!(targets.last().unwrap().2, Reason::AtMin);
}
