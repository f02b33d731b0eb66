//! Memory stays bounded by the body cap: a 200 MB body, an endless body and a 1 GiB gzip bomb
//! (about 1 MB on the wire) are each scraped beside healthy targets, and this process's peak
//! resident memory (VmHWM) may grow by less than 3x the cap. A control scrape of a body
//! that fits a larger cap shows the measurement does see a body's memory.
//!
//! One test in its own binary, so no other test allocates while it measures.

mod scrape_support;

use std::time::Duration;

use scrape_support::{Behavior, healthy_body, memory_bytes, serve};
use vllm_keda_service::scrape::{ScrapeSettings, Scraper};

const MIB: usize = 1 << 20;

#[test]
fn memory_stays_bounded_by_the_cap() {
    // One thread, so one allocator arena: retention by idle per-thread arenas does not blur
    // the measurement.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        tokio::time::timeout(Duration::from_secs(120), run())
            .await
            .expect("test timed out")
    });
}

async fn run() {
    let cap = 8 * MIB;
    let scraper = Scraper::new(ScrapeSettings {
        timeout: Duration::from_secs(60),
        max_body_bytes: cap,
        ..ScrapeSettings::loopback()
    });
    let healthy = serve(Behavior::Body(healthy_body("a"))).await;
    // Warm up the runtime, the client and the allocator before the baseline.
    let warm = scraper.scrape_all(&[healthy.url(), healthy.url()]).await;
    assert!(warm.iter().all(|o| o.result.is_ok()));

    let faults = [
        (
            "200 MB body",
            Behavior::Chunked {
                total: 200 * MIB as u64,
            },
        ),
        ("endless body", Behavior::Chunked { total: u64::MAX }),
        ("1 GiB gzip bomb", Behavior::GzipBomb { mebibytes: 1024 }),
    ];
    let bomb_wire_bytes = scrape_support::GzipBomb::new().block.len() * 1024;
    println!(
        "gzip bomb: 1024 MiB of zeros in {:.2} MiB of gzip",
        bomb_wire_bytes as f64 / MIB as f64
    );
    let (hwm_before, rss_before) = memory_bytes();
    println!(
        "baseline: VmHWM {:.1} MiB, VmRSS {:.1} MiB, cap {} MiB",
        mib(hwm_before),
        mib(rss_before),
        cap / MIB
    );
    for (name, behavior) in faults {
        let fault = serve(behavior).await;
        let urls = [healthy.url(), fault.url(), healthy.url()];
        let out = scraper.scrape_all(&urls).await;
        assert_eq!(
            out[1].result_label(),
            "too_large",
            "{name}: {:?}",
            out[1].result
        );
        for o in [&out[0], &out[2]] {
            assert_eq!(
                o.result.as_deref().unwrap().as_bytes(),
                &healthy_body("a")[..]
            );
        }
        let (hwm, rss) = memory_bytes();
        println!(
            "after {name}: VmHWM {:.1} MiB (+{:.1}), VmRSS {:.1} MiB",
            mib(hwm),
            mib(hwm.saturating_sub(hwm_before)),
            mib(rss)
        );
    }
    let (hwm_after, _) = memory_bytes();
    let growth = hwm_after.saturating_sub(hwm_before);
    assert!(
        growth < 3 * cap as u64,
        "peak memory grew by {:.1} MiB, more than 3x the {} MiB cap",
        mib(growth),
        cap / MIB
    );

    // Control: a 48 MiB body under a 64 MiB cap is read whole, and the measurement sees it.
    let big = 48 * MIB;
    let control = serve(Behavior::Chunked { total: big as u64 }).await;
    let roomy = Scraper::new(ScrapeSettings {
        timeout: Duration::from_secs(60),
        max_body_bytes: 64 * MIB,
        ..ScrapeSettings::loopback()
    });
    let body = roomy.scrape(&control.url()).await.expect("control body");
    assert_eq!(body.len(), big);
    let (hwm_control, _) = memory_bytes();
    println!(
        "after a {} MiB body under a 64 MiB cap: VmHWM {:.1} MiB",
        big / MIB,
        mib(hwm_control)
    );
    assert!(
        hwm_control >= rss_before + (big as u64 / 4) * 3,
        "VmHWM did not see a {} MiB body: the measurement is blind",
        big / MIB
    );
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / MIB as f64
}
