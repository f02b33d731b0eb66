//! Tier 3: GPU signals from NVIDIA dcgm-exporter bodies.
//!
//! Owns: extracting per-GPU readings (`DCGM_FI_DEV_FB_USED`/`FB_FREE` in MiB, `GPU_UTIL` in
//! percent, `POWER_USAGE` in W, the `ECC_SBE_VOL_TOTAL` counter), the per-exporter history the
//! ECC rate needs, matching GPUs to vLLM pods by the `pod` label, and the aggregate. Does not
//! own: fetching, parsing or the field names (see [`crate::catalog::dcgm`]). GPU readings are
//! reported, never a scale input on their own.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use crate::catalog::dcgm;
use crate::exposition::Exposition;

use super::{GpuSignals, MaxMean};

/// One GPU as one dcgm-exporter scrape reported it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuDevice {
    /// `UUID` label.
    pub uuid: Option<String>,
    /// `gpu` label (index on the node).
    pub gpu: Option<String>,
    /// `Hostname` (or, from 2026 releases, `hostname`) label.
    pub hostname: Option<String>,
    /// `modelName` label.
    pub model_name: Option<String>,
    /// `pod` label, when the exporter maps GPUs to pods.
    pub pod: Option<String>,
    /// `namespace` label, when mapped.
    pub namespace: Option<String>,
    /// `DCGM_FI_DEV_FB_USED`, MiB.
    pub fb_used_mib: Option<f64>,
    /// `DCGM_FI_DEV_FB_FREE`, MiB.
    pub fb_free_mib: Option<f64>,
    /// `DCGM_FI_DEV_GPU_UTIL`, percent.
    pub utilization_percent: Option<f64>,
    /// `DCGM_FI_DEV_POWER_USAGE`, watts.
    pub power_watts: Option<f64>,
    /// `DCGM_FI_DEV_ECC_SBE_VOL_TOTAL`, a counter (off in the exporter's default list).
    pub ecc_sbe_total: Option<f64>,
}

impl GpuDevice {
    /// Frame-buffer used / (used + free), 0..1.
    pub fn memory_used_fraction(&self) -> Option<f64> {
        let (used, free) = (self.fb_used_mib?, self.fb_free_mib?);
        let total = used + free;
        (total > 0.0).then(|| used / total)
    }

    /// Identity across scrapes: the UUID, else hostname and index (what [`GpuIndex`] gives).
    #[cfg(test)]
    fn same_gpu(&self, uuid: Option<&str>, hostname: Option<&str>, gpu: Option<&str>) -> bool {
        match (self.uuid.as_deref(), uuid) {
            (Some(a), Some(b)) => a == b,
            _ => self.hostname.as_deref() == hostname && self.gpu.as_deref() == gpu,
        }
    }
}

/// One dcgm-exporter scrape, owned.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuSnapshot {
    /// GPUs in body order.
    pub gpus: Vec<GpuDevice>,
}

impl GpuSnapshot {
    /// Extracts per-GPU readings from a parsed dcgm-exporter body (O(n) in the samples: GPUs
    /// are found through a map, never a scan per sample).
    pub fn from_exposition(exposition: &Exposition<'_>) -> Self {
        let mut snapshot = GpuSnapshot::default();
        let mut index = GpuIndex::default();
        for sample in &exposition.samples {
            let setter: fn(&mut GpuDevice, f64) = match sample.name {
                dcgm::FB_USED => |d, v| d.fb_used_mib = Some(v),
                dcgm::FB_FREE => |d, v| d.fb_free_mib = Some(v),
                dcgm::GPU_UTIL => |d, v| d.utilization_percent = Some(v),
                dcgm::POWER_USAGE => |d, v| d.power_watts = Some(v),
                dcgm::ECC_SBE_VOL_TOTAL => |d, v| d.ecc_sbe_total = Some(v),
                _ => continue,
            };
            if !sample.value.is_finite() {
                continue;
            }
            let uuid = sample.label(dcgm::LABEL_UUID);
            let hostname = sample
                .label(dcgm::LABEL_HOSTNAME)
                .or_else(|| sample.label(dcgm::LABEL_HOSTNAME_LOWER));
            let gpu = sample.label(dcgm::LABEL_GPU);
            let at = match index.find(uuid, hostname, gpu) {
                Some(at) => at,
                None => {
                    let owned = |v: Option<&str>| v.map(str::to_owned);
                    snapshot.gpus.push(GpuDevice {
                        uuid: owned(uuid),
                        gpu: owned(gpu),
                        hostname: owned(hostname),
                        model_name: owned(sample.label(dcgm::LABEL_MODEL_NAME)),
                        pod: owned(sample.label(dcgm::LABEL_POD)).filter(|p| !p.is_empty()),
                        namespace: owned(sample.label(dcgm::LABEL_NAMESPACE))
                            .filter(|n| !n.is_empty()),
                        ..GpuDevice::default()
                    });
                    let at = snapshot.gpus.len() - 1;
                    index.insert(&snapshot.gpus[at], at);
                    at
                }
            };
            setter(&mut snapshot.gpus[at], sample.value);
        }
        snapshot
    }
}

/// GPUs by identity, giving what a scan with [`GpuDevice::same_gpu`] in order would: the first
/// device with the same UUID when both have one, else the first with the same hostname and
/// index.
#[derive(Default)]
struct GpuIndex {
    by_uuid: HashMap<String, usize>,
    /// Devices without a UUID, by (hostname, index).
    no_uuid: HashMap<(Option<String>, Option<String>), usize>,
    /// All devices, by (hostname, index).
    all: HashMap<(Option<String>, Option<String>), usize>,
}

impl GpuIndex {
    fn of(devices: &[GpuDevice]) -> Self {
        let mut index = Self::default();
        for (at, device) in devices.iter().enumerate() {
            index.insert(device, at);
        }
        index
    }

    fn insert(&mut self, device: &GpuDevice, at: usize) {
        let place = (device.hostname.clone(), device.gpu.clone());
        match &device.uuid {
            Some(uuid) => {
                self.by_uuid.entry(uuid.clone()).or_insert(at);
            }
            None => {
                self.no_uuid.entry(place.clone()).or_insert(at);
            }
        }
        self.all.entry(place).or_insert(at);
    }

    fn find(&self, uuid: Option<&str>, hostname: Option<&str>, gpu: Option<&str>) -> Option<usize> {
        let place = (hostname.map(str::to_owned), gpu.map(str::to_owned));
        match uuid {
            // A device with the UUID, or one without any UUID at the same place: the first.
            Some(uuid) => match (self.by_uuid.get(uuid), self.no_uuid.get(&place)) {
                (Some(&a), Some(&b)) => Some(a.min(b)),
                (a, b) => a.or(b).copied(),
            },
            None => self.all.get(&place).copied(),
        }
    }
}

/// One exporter's recent scrapes (for the ECC rate) and health.
#[derive(Debug, Clone, Default)]
pub(super) struct GpuHistory {
    healthy: bool,
    entries: VecDeque<(Duration, GpuSnapshot)>,
}

/// A GPU's latest reading with its ECC error rate over the window.
#[derive(Debug)]
pub(super) struct DeviceReading<'a> {
    pub(super) device: &'a GpuDevice,
    pub(super) ecc_per_second: Option<f64>,
}

impl GpuHistory {
    pub(super) fn record(
        &mut self,
        now: Duration,
        snapshot: Option<GpuSnapshot>,
        window: Duration,
    ) {
        let Some(snapshot) = snapshot else {
            self.healthy = false;
            return;
        };
        self.healthy = true;
        while self.entries.back().is_some_and(|(at, _)| *at >= now) {
            self.entries.pop_back();
        }
        self.entries.push_back((now, snapshot));
        if let Some(cutoff) = now.checked_sub(window) {
            while self.entries.len() >= 2 && self.entries[1].0 <= cutoff {
                self.entries.pop_front();
            }
        }
        // Bounded even when scraped far more often than the window needs.
        while self.entries.len() > 256 {
            self.entries.pop_front();
        }
    }

    pub(super) fn readings(&self, now: Duration, window: Duration) -> Vec<DeviceReading<'_>> {
        let Some((last_at, last)) = self.entries.back().filter(|_| self.healthy) else {
            return Vec::new();
        };
        let base_index = match now.checked_sub(window) {
            Some(cutoff) => self
                .entries
                .partition_point(|(at, _)| *at <= cutoff)
                .saturating_sub(1),
            None => 0,
        };
        let (base_at, base) = &self.entries[base_index];
        let seconds = last_at.saturating_sub(*base_at).as_secs_f64();
        let base_index = GpuIndex::of(&base.gpus);
        last.gpus
            .iter()
            .map(|device| {
                let then = base_index
                    .find(
                        device.uuid.as_deref(),
                        device.hostname.as_deref(),
                        device.gpu.as_deref(),
                    )
                    .and_then(|at| base.gpus[at].ecc_sbe_total);
                let ecc_per_second = match (then, device.ecc_sbe_total) {
                    // A counter that went down (exporter or driver restart) gives no rate.
                    (Some(then), Some(now)) if seconds > 0.0 && now >= then => {
                        Some((now - then) / seconds)
                    }
                    _ => None,
                };
                DeviceReading {
                    device,
                    ecc_per_second,
                }
            })
            .collect()
    }
}

/// The host part of a target (a URL, `host:port`, or a pod name).
fn target_host(target: &str) -> &str {
    let without_scheme = target.split_once("://").map_or(target, |(_, rest)| rest);
    without_scheme
        .split(['/', ':'])
        .next()
        .unwrap_or(without_scheme)
}

/// vLLM targets by every `pod` label value that [`pod_matches`] them: the target itself, its
/// host, and each prefix of its host that ends before a `.`. A lookup gives the first target
/// in order that matches, as a scan would, in O(1) instead of O(pods).
pub(super) struct PodIndex<'a> {
    by_label: HashMap<&'a str, usize>,
}

impl<'a> PodIndex<'a> {
    pub(super) fn new(targets: impl IntoIterator<Item = &'a str>) -> Self {
        let mut by_label = HashMap::new();
        for (at, target) in targets.into_iter().enumerate() {
            let host = target_host(target);
            by_label.entry(target).or_insert(at);
            by_label.entry(host).or_insert(at);
            for (dot, _) in host.match_indices('.') {
                by_label.entry(&host[..dot]).or_insert(at);
            }
        }
        Self { by_label }
    }

    /// The first target that is the pod named `pod_label`.
    pub(super) fn find(&self, pod_label: &str) -> Option<usize> {
        self.by_label.get(pod_label).copied()
    }
}

/// Whether a vLLM target (a URL, `host:port`, or a pod name) is the pod named `pod_label`:
/// equal, or its host is the pod name or starts with `<pod>.` (a pod DNS name).
pub fn pod_matches(target: &str, pod_label: &str) -> bool {
    if target == pod_label {
        return true;
    }
    let host = target_host(target);
    host == pod_label
        || host
            .strip_prefix(pod_label)
            .is_some_and(|rest| rest.starts_with('.'))
}

fn max_mean(values: &[f64]) -> MaxMean {
    MaxMean {
        max: values.iter().copied().reduce(f64::max),
        mean: (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64),
    }
}

pub(super) fn aggregate(readings: Vec<&DeviceReading<'_>>) -> GpuSignals {
    let memory: Vec<f64> = readings
        .iter()
        .filter_map(|r| r.device.memory_used_fraction())
        .collect();
    let utilization: Vec<f64> = readings
        .iter()
        .filter_map(|r| r.device.utilization_percent.map(|p| p / 100.0))
        .collect();
    let sum_of = |values: Vec<f64>| (!values.is_empty()).then(|| values.iter().sum::<f64>());
    GpuSignals {
        memory_used_fraction: max_mean(&memory),
        utilization: max_mean(&utilization),
        power_watts_total: sum_of(
            readings
                .iter()
                .filter_map(|r| r.device.power_watts)
                .collect(),
        ),
        ecc_errors_per_second: sum_of(readings.iter().filter_map(|r| r.ecc_per_second).collect()),
        gpus: readings.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ecc_rate_runs_from_the_sample_at_the_window_start_and_never_from_a_drop() {
        let snap = |ecc: f64| GpuSnapshot {
            gpus: vec![GpuDevice {
                uuid: Some("GPU-1".into()),
                ecc_sbe_total: Some(ecc),
                ..GpuDevice::default()
            }],
        };
        let rate = |h: &GpuHistory, now: u64| {
            h.readings(Duration::from_secs(now), Duration::from_secs(60))[0].ecc_per_second
        };
        let window = Duration::from_secs(60);
        let mut h = GpuHistory::default();
        h.record(Duration::from_secs(0), Some(snap(100.0)), window);
        // One sample: no rate (not 0/0).
        assert_eq!(rate(&h, 0), None);
        h.record(Duration::from_secs(30), Some(snap(130.0)), window);
        h.record(Duration::from_secs(60), Some(snap(160.0)), window);
        h.record(Duration::from_secs(90), Some(snap(250.0)), window);
        // At 90 s the window starts at 30 s: (250 - 130) / 60.
        assert_eq!(rate(&h, 90), Some(2.0));
        // A counter that went down (exporter restart) gives no rate; an unchanged one gives 0.
        h.record(Duration::from_secs(120), Some(snap(10.0)), window);
        assert_eq!(rate(&h, 120), None);
        h.record(Duration::from_secs(150), Some(snap(10.0)), window);
        h.record(Duration::from_secs(180), Some(snap(10.0)), window);
        assert_eq!(rate(&h, 180), Some(0.0));
    }

    #[test]
    fn a_dcgm_body_gives_each_gpu_its_identity_and_placement() {
        let body = "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-a\",modelName=\"H100\",Hostname=\"n1\",namespace=\"llm\",pod=\"vllm-0\"} 97\n\
                    DCGM_FI_DEV_GPU_UTIL{gpu=\"1\",UUID=\"GPU-b\",modelName=\"H100\",Hostname=\"n1\",namespace=\"\",pod=\"\"} 3\n";
        let parsed = crate::exposition::parse(body).unwrap();
        let gpus = GpuSnapshot::from_exposition(&parsed).gpus;
        assert_eq!(gpus.len(), 2);
        let first = &gpus[0];
        assert_eq!(first.uuid.as_deref(), Some("GPU-a"));
        assert_eq!(first.gpu.as_deref(), Some("0"));
        assert_eq!(first.hostname.as_deref(), Some("n1"));
        assert_eq!(first.model_name.as_deref(), Some("H100"));
        assert_eq!(first.namespace.as_deref(), Some("llm"));
        assert_eq!(first.pod.as_deref(), Some("vllm-0"));
        // An idle GPU's empty pod and namespace labels mean none.
        assert_eq!(
            (gpus[1].pod.as_deref(), gpus[1].namespace.as_deref()),
            (None, None)
        );
    }

    #[test]
    fn max_and_mean_of_the_fleets_gpus() {
        let m = max_mean(&[0.2, 0.6]);
        assert_eq!(m.max, Some(0.6));
        assert!((m.mean.unwrap() - 0.4).abs() < 1e-12, "{m:?}");
        let none = max_mean(&[]);
        assert_eq!((none.max, none.mean), (None, None));
    }

    #[test]
    fn memory_used_fraction_needs_a_frame_buffer() {
        let gpu = |used, free| GpuDevice {
            fb_used_mib: Some(used),
            fb_free_mib: Some(free),
            ..GpuDevice::default()
        };
        assert_eq!(gpu(20.0, 60.0).memory_used_fraction(), Some(0.25));
        // A device reporting no frame buffer at all has no fraction (not 0/0).
        assert_eq!(gpu(0.0, 0.0).memory_used_fraction(), None);
        assert_eq!(GpuDevice::default().memory_used_fraction(), None);
    }

    proptest::proptest! {
        /// The index finds what a scan with `same_gpu` in order finds, UUIDs or not.
        #[test]
        fn the_gpu_index_finds_what_a_scan_finds(
            devices in proptest::collection::vec(
                (proptest::option::of(0u8..4), proptest::option::of(0u8..3), proptest::option::of(0u8..3)),
                0..12,
            ),
            probe in (proptest::option::of(0u8..5), proptest::option::of(0u8..3), proptest::option::of(0u8..3)),
        ) {
            let text = |v: Option<u8>| v.map(|v| v.to_string());
            let devices: Vec<GpuDevice> = devices
                .into_iter()
                .map(|(uuid, host, gpu)| GpuDevice {
                    uuid: text(uuid),
                    hostname: text(host),
                    gpu: text(gpu),
                    ..GpuDevice::default()
                })
                .collect();
            let (uuid, host, gpu) = (text(probe.0), text(probe.1), text(probe.2));
            let (uuid, host, gpu) = (uuid.as_deref(), host.as_deref(), gpu.as_deref());
            let scan = devices.iter().position(|d| d.same_gpu(uuid, host, gpu));
            proptest::prop_assert_eq!(GpuIndex::of(&devices).find(uuid, host, gpu), scan);
        }
    }

    #[test]
    fn the_pod_index_finds_what_a_scan_finds() {
        let targets = [
            "http://vllm-0.vllm.ns.svc:8000/metrics",
            "vllm-0",
            "http://10.0.0.5:8000/metrics",
            "vllm-1.vllm:8000",
            "http://vllm-01:8000/metrics",
        ];
        let index = PodIndex::new(targets);
        for label in [
            "vllm-0",
            "vllm-1",
            "vllm-01",
            "vllm",
            "10",
            "10.0.0.5",
            "vllm-0.vllm",
            "x",
        ] {
            let scan = targets.iter().position(|t| pod_matches(t, label));
            assert_eq!(index.find(label), scan, "{label}");
        }
    }

    #[test]
    fn pod_names_match_urls_and_dns_names() {
        assert!(pod_matches("vllm-0", "vllm-0"));
        assert!(pod_matches("http://vllm-0:8000/metrics", "vllm-0"));
        assert!(pod_matches(
            "http://vllm-0.vllm.ns.svc:8000/metrics",
            "vllm-0"
        ));
        assert!(pod_matches("vllm-0.vllm:8000", "vllm-0"));
        assert!(!pod_matches("http://vllm-01:8000/metrics", "vllm-0"));
        assert!(!pod_matches("http://10.0.0.5:8000/metrics", "vllm-0"));
    }
}
