//! How many emulated replicas one process serves while every replica is scraped every 2 s.
//!
//! Starts the real binary (`vllm-keda-scaler emulate --replicas N`) as a child process, scrapes
//! each replica's `/metrics` every 2 s from this process (spread evenly over the interval),
//! optionally sends each replica light traffic, and reports scrape success and latency plus the
//! emulator's CPU and resident memory read from `/proc`.
//!
//! Usage: `cargo bench --bench emulator_fleet -- [--replicas 100,1000] [--seconds 20]
//! [--base-port 21000] [--rps-per-replica 0.0]`. Under `cargo test` (no `--bench` argument) it
//! runs a 3-second smoke check of 4 replicas on ephemeral ports instead.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hdrhistogram::Histogram;
use tokio::sync::Mutex;
use tokio::time::Instant;

struct Args {
    replicas: Vec<usize>,
    seconds: u64,
    base_port: u16,
    rps_per_replica: f64,
}

fn parse_args() -> Args {
    let mut args = Args {
        replicas: vec![1000],
        seconds: 20,
        base_port: 21000,
        rps_per_replica: 0.0,
    };
    // `cargo test --all-targets` runs this binary without `--bench`: a short smoke run on
    // ephemeral ports instead of the measurement.
    if !std::env::args().any(|a| a == "--bench") {
        args.replicas = vec![4];
        args.seconds = 3;
        args.base_port = 0;
    }
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || it.next().unwrap_or_default();
        match a.as_str() {
            "--replicas" => {
                args.replicas = value()
                    .split(',')
                    .map(|v| {
                        v.trim()
                            .parse()
                            .expect("--replicas: comma-separated counts")
                    })
                    .collect();
            }
            "--seconds" => args.seconds = value().parse().expect("--seconds: a whole number"),
            "--base-port" => args.base_port = value().parse().expect("--base-port: a port"),
            "--rps-per-replica" => {
                args.rps_per_replica = value().parse().expect("--rps-per-replica: a number");
            }
            _ => {} // cargo bench passes --bench
        }
    }
    args
}

/// CPU seconds (user + system) and resident bytes of a process, from /proc.
fn proc_usage(pid: u32) -> (f64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which is in parentheses): utime is field 14, stime 15.
    let after = stat.rsplit_once(')').map(|x| x.1).unwrap_or("");
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let cpu = (ticks(11) + ticks(12)) / 100.0;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss_kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    (cpu, rss_kb * 1024)
}

struct Stop(Child);

impl Drop for Stop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn run_one(n: usize, args: &Args) {
    let exe = env!("CARGO_BIN_EXE_vllm-keda-scaler");
    let started = Instant::now();
    let mut child = Command::new(exe)
        .args([
            "emulate",
            "--replicas",
            &n.to_string(),
            "--base-port",
            &args.base_port.to_string(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the emulator binary");
    let pid = child.id();
    // Kept open for the whole run: the emulator prints more lines, and again when it stops.
    let mut stdout = std::io::BufReader::new(child.stdout.take().expect("piped stdout"));
    let banner = {
        use std::io::BufRead as _;
        let mut line = String::new();
        stdout.read_line(&mut line).expect("emulator banner");
        line
    };
    let _guard = Stop(child);
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .pool_max_idle_per_host(1)
        .build()
        .unwrap();
    let urls: Vec<String> = if args.base_port == 0 {
        // Ephemeral ports: the banner lists them (only for up to 4 replicas).
        let urls: Vec<String> = banner
            .split_whitespace()
            .filter(|w| w.starts_with("http://"))
            .map(str::to_string)
            .collect();
        assert_eq!(urls.len(), n, "use --base-port for more than 4 replicas");
        urls
    } else {
        (0..n)
            .map(|i| format!("http://127.0.0.1:{}", usize::from(args.base_port) + i))
            .collect()
    };
    // Ready when the last replica answers /health.
    loop {
        if let Ok(r) = client.get(format!("{}/health", urls[n - 1])).send().await
            && r.status().is_success()
        {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "emulator did not come up"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let startup = started.elapsed();
    let ok = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let bytes = Arc::new(AtomicU64::new(0));
    let latency = Arc::new(Mutex::new(Histogram::<u64>::new(3).unwrap()));
    let measuring = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let t0 = Instant::now() + Duration::from_millis(200);
    let period = Duration::from_secs(2);
    let mut tasks = Vec::new();
    for (i, url) in urls.iter().enumerate() {
        let offset = period.mul_f64(i as f64 / n as f64);
        let (client, url) = (client.clone(), format!("{url}/metrics"));
        let (ok, failed, bytes, latency, measuring) = (
            ok.clone(),
            failed.clone(),
            bytes.clone(),
            latency.clone(),
            measuring.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval_at(t0 + offset, period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let s = Instant::now();
                let res = client.get(&url).send().await;
                let body = match res {
                    Ok(r) if r.status().is_success() => r.bytes().await.ok(),
                    _ => None,
                };
                if !measuring.load(Ordering::Relaxed) {
                    continue;
                }
                match body {
                    Some(b) => {
                        ok.fetch_add(1, Ordering::Relaxed);
                        bytes.fetch_add(b.len() as u64, Ordering::Relaxed);
                        let us = s.elapsed().as_micros() as u64;
                        latency.lock().await.record(us.max(1)).ok();
                    }
                    None => {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    if args.rps_per_replica > 0.0 {
        for url in &urls {
            let (client, url) = (client.clone(), format!("{url}/v1/completions"));
            let gap = Duration::from_secs_f64(1.0 / args.rps_per_replica);
            tasks.push(tokio::spawn(async move {
                let mut tick = tokio::time::interval(gap);
                loop {
                    tick.tick().await;
                    let c = client.clone();
                    let url = url.clone();
                    tokio::spawn(async move {
                        let _ = c
                            .post(url)
                            .header("content-type", "application/json")
                            .body(r#"{"prompt":"x","prompt_tokens":512,"max_tokens":128}"#)
                            .send()
                            .await;
                    });
                }
            }));
        }
    }
    // Warm up one full scrape cycle, then measure.
    tokio::time::sleep(period + Duration::from_millis(300)).await;
    measuring.store(true, Ordering::Relaxed);
    let (cpu0, _) = proc_usage(pid);
    let (self_cpu0, _) = proc_usage(std::process::id());
    let m0 = Instant::now();
    let mut rss_max = 0;
    let mut last_print = Instant::now();
    while m0.elapsed() < Duration::from_secs(args.seconds) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        rss_max = rss_max.max(proc_usage(pid).1);
        if last_print.elapsed() >= Duration::from_secs(5) {
            eprintln!(
                "  {n} replicas: {:>3.0}/{} s, {} scrapes ok, {} failed",
                m0.elapsed().as_secs_f64(),
                args.seconds,
                ok.load(Ordering::Relaxed),
                failed.load(Ordering::Relaxed)
            );
            last_print = Instant::now();
        }
    }
    let (cpu1, rss) = proc_usage(pid);
    let (self_cpu1, _) = proc_usage(std::process::id());
    let wall = m0.elapsed().as_secs_f64();
    measuring.store(false, Ordering::Relaxed);
    for t in &tasks {
        t.abort();
    }
    let h = latency.lock().await;
    let okn = ok.load(Ordering::Relaxed);
    let expected = n as f64 * wall / 2.0;
    println!(
        "| {n} | {:.1} | {okn} / {:.0} | {} | {:.1} / {:.1} / {:.1} | {:.0} | {:.1} | {:.0} | {:.0} | {:.1} |",
        startup.as_secs_f64(),
        expected,
        failed.load(Ordering::Relaxed),
        h.value_at_quantile(0.5) as f64 / 1000.0,
        h.value_at_quantile(0.99) as f64 / 1000.0,
        h.max() as f64 / 1000.0,
        (bytes.load(Ordering::Relaxed) as f64 / okn.max(1) as f64) / 1024.0,
        (cpu1 - cpu0) / wall * 100.0,
        rss.max(rss_max) as f64 / 1048576.0,
        rss.max(rss_max) as f64 / 1024.0 / n as f64,
        (self_cpu1 - self_cpu0) / wall * 100.0,
    );
    assert_eq!(failed.load(Ordering::Relaxed), 0, "scrapes failed");
    assert!(okn > 0, "no scrape succeeded");
}

fn main() {
    let args = parse_args();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    println!(
        "emulated replicas scraped every 2 s for {} s (light traffic: {} req/s per replica)\n",
        args.seconds, args.rps_per_replica
    );
    println!(
        "| replicas | start-up s | scrapes ok / due | failed | scrape ms p50 / p99 / max | body KiB | emulator CPU % of one core | emulator RSS MiB | RSS KiB per replica | scraper CPU % of one core |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for &n in &args.replicas {
        rt.block_on(run_one(n, &args));
        std::thread::sleep(Duration::from_millis(500));
    }
}
