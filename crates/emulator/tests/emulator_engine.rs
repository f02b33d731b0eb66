//! Engine model in virtual time: exact step timing, chunked prefill, preemption, consistency of
//! the statistics with the traffic, and saturation behaviour against the model's prediction.

use std::time::Duration;

use vllm_emulator::{
    Engine, EngineConfig, Event, FinishReason, RequestRecord, RequestShape, RequestSpec, SplitMix64,
};

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

fn drain(engine: &mut Engine, until: Duration) -> Vec<Event> {
    let mut events = Vec::new();
    while let Some(t) = engine.next_event_time() {
        if t > until {
            break;
        }
        engine.advance_to(t, &mut events);
    }
    engine.advance_to(until, &mut events);
    events
}

fn finished(events: &[Event]) -> Vec<RequestRecord> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Finished(r) => Some(*r),
            _ => None,
        })
        .collect()
}

#[test]
fn one_request_follows_the_step_model_exactly() {
    let cfg = EngineConfig::default();
    let mut e = Engine::new(cfg.clone()).unwrap();
    let mut spec = RequestSpec::new(1000, 5);
    spec.stream_tokens = true;
    let id = e.add_request(secs(10.0), spec).unwrap();
    assert_eq!(e.num_running(), 1);
    let events = drain(&mut e, secs(20.0));
    let tokens: Vec<_> = events
        .iter()
        .filter(|e| matches!(e, Event::Token { .. }))
        .collect();
    assert_eq!(tokens.len(), 5);
    let rec = finished(&events)[0];
    assert_eq!(rec.id, id);
    assert_eq!(rec.finish_reason, FinishReason::Length);
    let prefill = cfg.step_seconds(1000, 0);
    let ttft = rec.ttft().unwrap().as_secs_f64();
    assert!((ttft - prefill).abs() < 1e-6, "ttft {ttft} vs {prefill}");
    // Decode steps attend 1000, 1001, 1002, 1003 tokens of context.
    let decode: f64 = (1000..1004).map(|c| cfg.step_seconds(1, c)).sum();
    let e2e = rec.e2e().as_secs_f64();
    assert!((e2e - prefill - decode).abs() < 1e-6, "e2e {e2e}");
    assert_eq!(rec.queue_time(), Duration::ZERO);
    // Idle again: nothing scheduled, KV freed, and jumping far ahead is free.
    assert_eq!(e.next_event_time(), None);
    assert_eq!(e.kv_cache_usage(), 0.0);
    e.add_request(secs(3600.0), RequestSpec::new(10, 1))
        .unwrap();
    let rec = finished(&drain(&mut e, secs(3601.0)))[0];
    assert_eq!(rec.arrival, secs(3600.0));
}

#[test]
fn long_prompts_are_chunked_by_the_token_budget() {
    let cfg = EngineConfig::default();
    let mut e = Engine::new(cfg.clone()).unwrap();
    e.add_request(Duration::ZERO, RequestSpec::new(20_000, 1))
        .unwrap();
    let rec = finished(&drain(&mut e, secs(10.0)))[0];
    // 8192 + 8192 + 3616 tokens in three steps.
    let want = cfg.step_seconds(8192, 0) * 2.0 + cfg.step_seconds(3616, 0);
    let got = rec.ttft().unwrap().as_secs_f64();
    assert!((got - want).abs() < 1e-6, "{got} vs {want}");
    assert_eq!(e.stats().steps_total, 3);
}

#[test]
fn requests_are_validated() {
    let cfg = EngineConfig {
        max_model_len: 4096,
        ..EngineConfig::default()
    };
    let mut e = Engine::new(cfg).unwrap();
    let err = e
        .add_request(Duration::ZERO, RequestSpec::new(4000, 200))
        .unwrap_err();
    assert!(
        err.to_string().contains("maximum context length is 4096"),
        "{err}"
    );
    assert!(
        e.add_request(Duration::ZERO, RequestSpec::new(0, 1))
            .is_err()
    );
    assert_eq!(e.num_waiting() + e.num_running(), 0);
}

#[test]
fn max_num_seqs_bounds_the_batch_and_the_rest_waits_fifo() {
    let cfg = EngineConfig {
        max_num_seqs: 4,
        ..EngineConfig::default()
    };
    let mut e = Engine::new(cfg).unwrap();
    for _ in 0..10 {
        e.add_request(Duration::ZERO, RequestSpec::new(100, 50))
            .unwrap();
    }
    let mut events = Vec::new();
    let first = e.next_event_time().unwrap();
    e.advance_to(first, &mut events);
    assert_eq!(e.num_running(), 4);
    assert_eq!(e.num_waiting(), 6);
    let recs = finished(&drain(&mut e, secs(60.0)));
    assert_eq!(recs.len(), 10);
    // FIFO: scheduled in arrival (id) order.
    let mut by_sched: Vec<_> = recs.iter().map(|r| (r.scheduled.unwrap(), r.id)).collect();
    by_sched.sort();
    let ids: Vec<_> = by_sched.iter().map(|x| x.1).collect();
    assert_eq!(ids, (0..10).collect::<Vec<_>>());
}

#[test]
fn aborts_finish_with_reason_abort_and_free_the_cache() {
    let mut e = Engine::new(EngineConfig {
        max_num_seqs: 1,
        ..EngineConfig::default()
    })
    .unwrap();
    let a = e
        .add_request(Duration::ZERO, RequestSpec::new(100, 1000))
        .unwrap();
    let b = e
        .add_request(Duration::ZERO, RequestSpec::new(100, 10))
        .unwrap();
    let mut events = drain(&mut e, secs(0.5));
    assert!(e.abort(secs(0.5), b), "waiting request");
    assert!(e.abort(secs(0.5), a), "running request");
    assert!(!e.abort(secs(0.5), a), "already gone");
    events.extend(drain(&mut e, secs(2.0)));
    let recs = finished(&events);
    assert_eq!(recs.len(), 2);
    assert!(recs.iter().all(|r| r.finish_reason == FinishReason::Abort));
    assert_eq!(e.kv_cache_usage(), 0.0);
    assert_eq!(e.num_running() + e.num_waiting(), 0);
    assert_eq!(e.stats().finished(FinishReason::Abort), 2);
    assert_eq!(e.stats().e2e_request_latency.count(), 2);
    // The running one produced tokens, the waiting one never did.
    assert_eq!(e.stats().time_to_first_token.count(), 1);
}

/// Result of an open-loop run with Poisson arrivals.
struct Run {
    records: Vec<RequestRecord>,
    arrivals: usize,
    /// Waiting queue length sampled every second.
    waiting: Vec<usize>,
    engine: Engine,
}

fn open_loop(cfg: &EngineConfig, rate: f64, shape: RequestShape, seconds: f64, seed: u64) -> Run {
    let mut e = Engine::new(cfg.clone()).unwrap();
    let mut rng = SplitMix64::new(seed);
    let mut events = Vec::new();
    let mut waiting = Vec::new();
    let mut t = rng.next_exp(rate);
    let mut next_sample = 1.0;
    let mut arrivals = 0;
    while t < seconds {
        while next_sample <= t {
            events.extend(drain(&mut e, secs(next_sample)));
            waiting.push(e.num_waiting());
            next_sample += 1.0;
        }
        e.add_request(
            secs(t),
            RequestSpec::new(shape.prompt_tokens, shape.output_tokens),
        )
        .unwrap();
        arrivals += 1;
        t += rng.next_exp(rate);
    }
    events.extend(drain(&mut e, secs(seconds)));
    waiting.push(e.num_waiting());
    Run {
        records: finished(&events),
        arrivals,
        waiting,
        engine: e,
    }
}

fn completions_per_second(run: &Run, from: f64, to: f64) -> f64 {
    let n = run
        .records
        .iter()
        .filter(|r| (from..to).contains(&r.finished.as_secs_f64()))
        .count();
    n as f64 / (to - from)
}

fn ttft_mean(records: &[RequestRecord], from: f64, to: f64) -> f64 {
    let v: Vec<f64> = records
        .iter()
        .filter(|r| (from..to).contains(&r.arrival.as_secs_f64()))
        .filter_map(|r| r.ttft())
        .map(|d| d.as_secs_f64())
        .collect();
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

const SHAPE: RequestShape = RequestShape {
    prompt_tokens: 512,
    output_tokens: 128,
};

#[test]
fn statistics_are_consistent_with_the_traffic() {
    let cfg = EngineConfig {
        num_gpu_blocks: 3000,
        max_model_len: 8192,
        ..EngineConfig::default()
    };
    let run = open_loop(&cfg, 30.0, SHAPE, 120.0, 7);
    let st = run.engine.stats();
    let done = run.records.len() as u64;
    assert!(done > 1000);
    assert_eq!(st.finished_total(), done);
    assert_eq!(st.e2e_request_latency.count(), done);
    assert_eq!(st.request_queue_time.count(), done);
    let in_engine = (run.engine.num_running() + run.engine.num_waiting()) as u64;
    assert_eq!(done + in_engine, run.arrivals as u64);
    let generated: u64 = run.records.iter().map(|r| u64::from(r.output_tokens)).sum();
    let with_token = run
        .records
        .iter()
        .filter(|r| r.first_token.is_some())
        .count() as u64;
    // TTFT counts every request that produced a token, finished or still running.
    assert!(st.time_to_first_token.count() >= with_token);
    assert!(st.generation_tokens_total >= generated);
    assert_eq!(
        st.inter_token_latency.count(),
        st.generation_tokens_total - st.time_to_first_token.count()
    );
    assert_eq!(
        st.iteration_tokens.sum() as u64,
        st.prompt_tokens_total + st.generation_tokens_total
    );
    assert_eq!(st.iteration_tokens.count(), st.steps_total);
    // Buckets are cumulative and end at the count.
    let cum: Vec<u64> = st.time_to_first_token.cumulative().collect();
    assert!(cum.windows(2).all(|w| w[0] <= w[1]));
    assert_eq!(*cum.last().unwrap(), st.time_to_first_token.count());
}

#[test]
fn below_capacity_the_queue_stays_empty_and_latency_flat() {
    let cfg = EngineConfig::default();
    let capacity = cfg.predicted_saturation(SHAPE).requests_per_second;
    let low = open_loop(&cfg, capacity * 0.3, SHAPE, 300.0, 1);
    let mid = open_loop(&cfg, capacity * 0.6, SHAPE, 300.0, 2);
    for run in [&low, &mid] {
        let max_waiting = *run.waiting.iter().max().unwrap();
        assert!(max_waiting <= 3, "waiting peaked at {max_waiting}");
        assert_eq!(run.engine.stats().num_preemptions_total, 0);
    }
    let (t_low, t_mid) = (
        ttft_mean(&low.records, 0.0, 300.0),
        ttft_mean(&mid.records, 0.0, 300.0),
    );
    assert!(t_mid < 0.25, "ttft at 60% load: {t_mid}");
    assert!(t_mid < t_low * 3.0, "ttft {t_low} -> {t_mid}");
    // Early and late requests see the same latency: nothing accumulates.
    let (early, late) = (
        ttft_mean(&mid.records, 20.0, 150.0),
        ttft_mean(&mid.records, 150.0, 290.0),
    );
    assert!((late - early).abs() < early.max(0.02), "{early} vs {late}");
}

#[test]
fn above_capacity_the_queue_and_ttft_grow() {
    let cfg = EngineConfig::default();
    let capacity = cfg.predicted_saturation(SHAPE).requests_per_second;
    let run = open_loop(&cfg, capacity * 1.3, SHAPE, 300.0, 3);
    let w = &run.waiting;
    assert!(w[100] > 50, "queue at 100 s: {}", w[100]);
    assert!(
        w[290] > w[100] * 2,
        "queue 100 s: {}, 290 s: {}",
        w[100],
        w[290]
    );
    let (early, late) = (
        ttft_mean(&run.records, 50.0, 100.0),
        ttft_mean(&run.records, 200.0, 250.0),
    );
    assert!(late > early * 1.5 && late > 5.0, "ttft {early} -> {late}");
    assert_eq!(run.engine.num_running(), cfg.max_num_seqs as usize);
}

#[test]
fn kv_cache_pressure_causes_preemptions() {
    // 1,000 blocks hold 16k tokens: about 10 requests of 1,000 + 1,000 tokens.
    let cfg = EngineConfig {
        num_gpu_blocks: 1000,
        max_model_len: 4096,
        ..EngineConfig::default()
    };
    let shape = RequestShape {
        prompt_tokens: 1000,
        output_tokens: 1000,
    };
    let light = open_loop(&cfg, 0.05, shape, 200.0, 4);
    assert_eq!(light.engine.stats().num_preemptions_total, 0);
    let heavy = open_loop(&cfg, 2.0, shape, 200.0, 5);
    let st = heavy.engine.stats();
    assert!(
        st.num_preemptions_total > 10,
        "{}",
        st.num_preemptions_total
    );
    assert!(heavy.records.iter().any(|r| r.preemptions > 0));
    // Preempted requests still finish with every token, and the cache accounting holds.
    assert!(heavy.records.iter().all(|r| r.output_tokens == 1000));
    assert!(heavy.engine.kv_cache_usage() <= 1.0);
}

#[test]
fn saturation_throughput_is_within_10_percent_of_the_prediction() {
    let cfg = EngineConfig::default();
    let predicted = cfg.predicted_saturation(SHAPE).requests_per_second;
    // Step the offered rate up; the emulated saturation throughput is the most the engine
    // completes per second in steady state (second half of each run) at any offered rate.
    let mut best: f64 = 0.0;
    let mut knee = None;
    for step in 0u32..9 {
        let rate = predicted * (0.7 + 0.1 * f64::from(step));
        let run = open_loop(&cfg, rate, SHAPE, 240.0, 100 + u64::from(step));
        let done = completions_per_second(&run, 120.0, 240.0);
        best = best.max(done);
        let backlog = *run.waiting.last().unwrap();
        if knee.is_none() && backlog > 100 {
            knee = Some(rate);
        }
    }
    let err = (best - predicted).abs() / predicted;
    eprintln!(
        "saturation: measured {best:.2} req/s, predicted {predicted:.2} req/s, knee {knee:?}"
    );
    assert!(
        err < 0.10,
        "measured {best:.2} req/s, predicted {predicted:.2} req/s"
    );
    // And the queue starts to build only around the predicted capacity.
    let knee = knee.expect("no offered rate saturated the engine");
    assert!(
        (knee / predicted - 1.0).abs() <= 0.15,
        "queue builds at {knee:.2} req/s, predicted {predicted:.2}"
    );
}

#[test]
fn preemption_sends_the_newest_request_back_to_the_front_of_the_queue() {
    // 6 blocks of 16 tokens; three requests of 16 + 60 tokens cannot all grow past 32 tokens.
    let cfg = EngineConfig {
        num_gpu_blocks: 6,
        max_model_len: 96,
        ..EngineConfig::default()
    };
    let mut e = Engine::new(cfg).unwrap();
    let ids: Vec<_> = (0..3)
        .map(|_| {
            e.add_request(Duration::ZERO, RequestSpec::new(16, 60))
                .unwrap()
        })
        .collect();
    // A fourth request arrives later and must queue behind the preempted one.
    let mut events = Vec::new();
    let mut first_preemption_seen = false;
    let mut late = None;
    while let Some(t) = e.next_event_time() {
        e.advance_to(t, &mut events);
        if !first_preemption_seen && e.stats().num_preemptions_total > 0 {
            first_preemption_seen = true;
            // The newest running request (the third) went back to the waiting queue.
            assert_eq!(e.num_running(), 2);
            assert_eq!(e.num_waiting(), 1);
            late = Some(e.add_request(t, RequestSpec::new(16, 1)).unwrap());
        }
    }
    let recs = finished(&events);
    assert_eq!(recs.len(), 4);
    let by_id = |id| *recs.iter().find(|r| r.id == id).unwrap();
    assert_eq!(
        by_id(ids[0]).preemptions,
        0,
        "the oldest request is never the victim"
    );
    assert!(by_id(ids[2]).preemptions >= 1);
    assert!(recs.iter().all(|r| r.output_tokens == r.max_tokens));
    // The late arrival queued behind the preempted request and still completed.
    assert_eq!(by_id(late.unwrap()).output_tokens, 1);
    assert_eq!(e.kv_cache_usage(), 0.0);
}

#[test]
fn kv_bound_saturation_is_within_10_percent_of_the_prediction() {
    // Long requests: the KV cache, not max_num_seqs, bounds the batch, and preemptions (whose
    // recompute the closed form ignores) make the engine a few percent slower than predicted.
    let cfg = EngineConfig::default();
    let shape = RequestShape {
        prompt_tokens: 3000,
        output_tokens: 1000,
    };
    let predicted = cfg.predicted_saturation(shape);
    assert_eq!(
        predicted.limited_by,
        vllm_emulator::SaturationLimit::KvCache
    );
    let run = open_loop(&cfg, predicted.requests_per_second * 1.5, shape, 1200.0, 11);
    let measured = completions_per_second(&run, 600.0, 1200.0);
    let err = (measured - predicted.requests_per_second).abs() / predicted.requests_per_second;
    assert!(
        err < 0.10,
        "measured {measured:.2} req/s, predicted {:.2} req/s",
        predicted.requests_per_second
    );
    assert!(run.engine.stats().num_preemptions_total > 0);
}

#[test]
fn published_waiting_counts_only_what_the_scheduler_has_seen() {
    let mut engine = Engine::new(EngineConfig::default()).unwrap();
    engine
        .add_request(secs(0.0), RequestSpec::new(4096, 64))
        .unwrap();
    // Arrives while the first prefill step is in flight: the engine core has not handed it
    // to the scheduler yet, so vLLM still publishes 0 waiting.
    engine
        .add_request(secs(0.001), RequestSpec::new(16, 4))
        .unwrap();
    let mut events = Vec::new();
    engine.advance_to(secs(0.001), &mut events);
    assert_eq!(engine.num_waiting(), 1, "instantaneous truth");
    assert_eq!(engine.published_gauges().waiting, 0);
    // After the first step ends the gauges are published: one running; the newcomer was
    // admitted at the next step's start, so nothing waits.
    let first_end = engine.next_event_time().unwrap();
    engine.advance_to(first_end, &mut events);
    let published = engine.published_gauges();
    assert_eq!(published.running, 1);
    assert_eq!(published.waiting, 0);
    assert!(published.kv_cache_usage > 0.0);
    drain(&mut engine, secs(60.0));
    assert_eq!(engine.published_gauges().running, 0);
}

#[test]
fn an_abort_is_published_at_once_even_with_a_step_in_flight() {
    let mut engine = Engine::new(EngineConfig::default()).unwrap();
    let id = engine
        .add_request(secs(0.0), RequestSpec::new(512, 1000))
        .unwrap();
    let mut events = Vec::new();
    engine.advance_to(secs(0.5), &mut events);
    assert_eq!(engine.published_gauges().running, 1);
    assert!(engine.next_event_time().is_some(), "a step is in flight");
    assert!(engine.abort(secs(0.5), id));
    let published = engine.published_gauges();
    assert_eq!((published.running, published.waiting), (0, 0));
    assert_eq!(published.kv_cache_usage, 0.0);
}
