//! The proactive policy's learning kept in a ConfigMap, so a scaler pod that starts (after a
//! restart, a rollout, or beside its peer) begins from what another pod learned for the same
//! trigger instead of from nothing (`--learned-state-configmap NAMESPACE/NAME`).
//!
//! Owns: the ConfigMap's key for a trigger (`NAMESPACE.SCALEDOBJECT.TRIGGER`, the trigger id
//! being a hash of the whole metadata, so changed metadata starts afresh), the record kept
//! under it (the core's [`Persisted`] and when it was written), reading it and writing it with
//! a merge patch. Does not own: when a loop reads or writes ([`crate::control`]), or what the
//! policy does with it (the core's `Scaler::inherit`).
//!
//! Needs `get` and `patch` on that one ConfigMap (`resourceNames`), which must exist; without
//! them each loop starts from nothing, as without the flag, and says why in `/debug`.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use serde::{Deserialize, Serialize};
use vllm_keda_core::policy::proactive::Persisted;

use crate::scale_target::{KubeClient, read_error};

/// A record older than this is not inherited: the fleet it describes may have changed.
pub const MAX_AGE: Duration = Duration::from_secs(24 * 3600);

/// The most the ConfigMap's data may hold, bytes: the API server refuses an object over 1 MiB,
/// and this leaves room for its metadata. A record's demand history (about 40 KB for a day)
/// is cut from its oldest minutes to fit what the other keys leave, and an equal share of the
/// budget ([`Kept::room`]).
pub const CONFIGMAP_BUDGET: usize = 900 * 1024;

/// Where the learning is kept and how often a loop writes it.
#[derive(Debug, Clone)]
pub struct LearnedStore {
    client: KubeClient,
    /// The ConfigMap's namespace.
    pub namespace: String,
    /// The ConfigMap's name.
    pub name: String,
    /// How often a loop writes its learning.
    pub write_every: Duration,
}

/// What is kept under a trigger's key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// The learning.
    #[serde(flatten)]
    pub persisted: Persisted,
    /// When it was written, Unix seconds.
    pub written_unix_seconds: f64,
}

impl Record {
    /// Whether a running loop that has observed for `own` seconds adopts this record at
    /// `now_unix`: one under [`MAX_AGE`] old, with a capacity estimate, resting on a longer
    /// history than the loop's (a running peer's, or a restarted pod's that inherited more).
    /// A loop's own record never does, since its history only grows.
    pub fn outranks(&self, own: f64, now_unix: f64) -> bool {
        self.fresh_at(now_unix)
            && self.persisted.capacity_per_replica.is_some()
            && self.persisted.observed_seconds > own
    }

    /// The learning as it stands at `now_unix`: a hindsight floor it keeps is older by the
    /// time since the record was written.
    pub fn persisted_at(&self, now_unix: f64) -> Persisted {
        let elapsed = now_unix - self.written_unix_seconds;
        self.persisted
            .clone()
            .aged(if elapsed.is_finite() { elapsed } else { 0.0 })
    }

    /// Drops the demand history's oldest minutes until the record's JSON, under its key, takes
    /// at most `room` bytes; how many minutes it dropped. The rest of the record is kept
    /// whatever its size (a few hundred bytes).
    pub fn fit(&mut self, key: &str, room: usize) -> usize {
        let size = |r: &Self| key.len() + serde_json::to_string(r).map_or(0, |s| s.len());
        let mut dropped = 0;
        loop {
            let (len, over) = (self.persisted.demand_history.len(), size(self));
            if over <= room || len == 0 {
                return dropped;
            }
            // An entry takes 24 bytes or more: drop at most what the excess takes at that, at
            // least one, and measure again.
            let cut = (over - room).div_ceil(24).clamp(1, len);
            self.persisted.demand_history.drain(..cut);
            dropped += cut;
        }
    }

    /// Whether it is young enough to start from at `now_unix`: at most [`MAX_AGE`] old.
    pub fn fresh_at(&self, now_unix: f64) -> bool {
        let age = now_unix - self.written_unix_seconds;
        age.is_finite() && age <= MAX_AGE.as_secs_f64()
    }
}

/// A read of the ConfigMap that succeeded, with what a write after it needs.
#[derive(Debug)]
pub struct Kept {
    /// The record under the key, if there is one; why not, when the value is not a record (a
    /// write replaces it).
    pub record: Result<Option<Record>, String>,
    /// The room this key may take, bytes: what the other keys leave under
    /// [`CONFIGMAP_BUDGET`], and no more than an equal share of it among all the keys, this one
    /// included. Without the share the first triggers to write would keep whole days and the
    /// later ones nothing; with it, each write of a ConfigMap shared by more triggers than
    /// fit trims its own record to its share, and every trigger keeps its newest minutes
    /// within one write interval.
    pub room: usize,
    /// The ConfigMap's `resourceVersion` at the read, for a write that must not overwrite
    /// another pod's in between (`None` only where the API server gave none).
    pub version: Option<String>,
    /// The other keys whose records were written more than [`MAX_AGE`] before the read: no pod
    /// inherits them, so the write removes them (a trigger whose metadata changed, or that
    /// KEDA stopped asking about, leaves one behind). Values that are not records stay.
    pub expired: Vec<String>,
}

/// Why a write did not happen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteError {
    /// Another writer changed the ConfigMap since the read the write was based on (the API
    /// answered 409): nothing was written, and the next exchange reads again.
    Conflict,
    /// Any other failure, in words that name the ConfigMap and the fix.
    Failed(String),
}

/// Parses `NAMESPACE/NAME` (both DNS-1123 names), for `--learned-state-configmap`.
pub fn parse_location(value: &str) -> Result<(String, String), String> {
    let dns = |s: &str| {
        !s.is_empty()
            && s.len() <= 253
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
            && s.starts_with(|c: char| c.is_ascii_alphanumeric())
            && s.ends_with(|c: char| c.is_ascii_alphanumeric())
    };
    match value.split_once('/') {
        Some((ns, name)) if dns(ns) && dns(name) => Ok((ns.to_owned(), name.to_owned())),
        _ => Err(format!(
            "{value:?} is not NAMESPACE/NAME of a ConfigMap (lowercase letters, digits, '-' and \
             '.'), for example keda/vllm-keda-scaler-learned"
        )),
    }
}

/// The key of one trigger's record.
pub fn key(namespace: &str, scaledobject: &str, trigger: impl std::fmt::Display) -> String {
    format!("{namespace}.{scaledobject}.{trigger}")
}

impl LearnedStore {
    /// A store in the ConfigMap `namespace/name`, written every `write_every`.
    pub fn new(client: KubeClient, namespace: String, name: String, write_every: Duration) -> Self {
        Self {
            client,
            namespace,
            name,
            write_every,
        }
    }

    fn api(&self) -> Api<ConfigMap> {
        Api::namespaced(self.client.client().clone(), &self.namespace)
    }

    fn what(&self) -> String {
        format!("ConfigMap {}/{}", self.namespace, self.name)
    }

    /// The record under `key`, if there is one. A value that is not a record is an error that
    /// names the key (and never repeats the value).
    pub async fn read(&self, key: &str) -> Result<Option<Record>, String> {
        let (data, _) = self.get().await?;
        self.parse(key, data.get(key))
    }

    /// As [`LearnedStore::read`], with what a write after it at `now_unix` needs: the room
    /// this key may take, the ConfigMap's `resourceVersion`, and the records no pod will
    /// inherit any more. A read that fails gives none of them, so no write follows it: it
    /// would be blind, over the ConfigMap's budget and over a peer's newer record.
    pub async fn read_before_write(&self, key: &str, now_unix: f64) -> Result<Kept, String> {
        let (data, version) = self.get().await?;
        let expired = expired(&data, key, now_unix);
        Ok(Kept {
            record: self.parse(key, data.get(key)),
            room: room_for(&data, key, &expired),
            version,
            expired,
        })
    }

    /// The ConfigMap's data and `resourceVersion`.
    async fn get(&self) -> Result<(BTreeMap<String, String>, Option<String>), String> {
        match self.api().get(&self.name).await {
            Ok(map) => Ok((map.data.unwrap_or_default(), map.metadata.resource_version)),
            Err(e) => Err(read_error(&self.what(), "configmaps", e).0),
        }
    }

    fn parse(&self, key: &str, value: Option<&String>) -> Result<Option<Record>, String> {
        let Some(value) = value else {
            return Ok(None);
        };
        serde_json::from_str(value).map(Some).map_err(|e| {
            format!(
                "reading {}: the value under {key} is not a learned-state record ({}); \
                 delete the key, and the next write replaces it",
                self.what(),
                json_error_class(&e)
            )
        })
    }

    /// Writes `record` under `key` (a merge patch: other keys stay). With `version`, only onto
    /// that `resourceVersion` of the ConfigMap (the API's optimistic lock): when another pod
    /// wrote in between, nothing is written and the answer is [`WriteError::Conflict`].
    /// The keys in `remove` go in the same patch.
    pub async fn write(
        &self,
        key: &str,
        record: &Record,
        version: Option<&str>,
        remove: &[String],
    ) -> Result<(), WriteError> {
        let value = serde_json::to_string(record).map_err(|e| WriteError::Failed(e.to_string()))?;
        let mut patch = serde_json::json!({ "data": { key: value } });
        for gone in remove {
            patch["data"][gone] = serde_json::Value::Null;
        }
        if let Some(version) = version {
            patch["metadata"] = serde_json::json!({ "resourceVersion": version });
        }
        match self
            .api()
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 => Err(WriteError::Conflict),
            Err(e) => {
                let message = read_error(&self.what(), "configmaps", e).0;
                // The same mapping as reads, worded for a write.
                Err(WriteError::Failed(
                    message
                        .replacen("reading ", "writing ", 1)
                        .replace("`get` on configmaps", "`get` and `patch` on configmaps"),
                ))
            }
        }
    }
}

/// The keys of `data` other than `key` that hold records written more than [`MAX_AGE`] before
/// `now_unix` (see [`Kept::expired`]).
fn expired(data: &BTreeMap<String, String>, key: &str, now_unix: f64) -> Vec<String> {
    #[derive(Deserialize)]
    struct Written {
        written_unix_seconds: f64,
    }
    data.iter()
        .filter(|(k, v)| {
            k.as_str() != key
                && serde_json::from_str::<Written>(v)
                    .is_ok_and(|w| now_unix - w.written_unix_seconds > MAX_AGE.as_secs_f64())
        })
        .map(|(k, _)| k.clone())
        .collect()
}

/// The room `key` may take in a ConfigMap holding `data`, once the `expired` keys are removed
/// (see [`Kept::room`]).
fn room_for(data: &BTreeMap<String, String>, key: &str, expired: &[String]) -> usize {
    let kept = |k: &String| k.as_str() != key && !expired.contains(k);
    let others: usize = data
        .iter()
        .filter(|(k, _)| kept(k))
        .map(|(k, v)| k.len() + v.len())
        .sum();
    let keys = data.keys().filter(|k| kept(k)).count() + 1;
    CONFIGMAP_BUDGET
        .saturating_sub(others)
        .min(CONFIGMAP_BUDGET / keys)
}

/// What kind of JSON error `e` is, without its position or the input.
fn json_error_class(e: &serde_json::Error) -> &'static str {
    match e.classify() {
        serde_json::error::Category::Io => "an I/O error",
        serde_json::error::Category::Syntax => "not JSON",
        serde_json::error::Category::Data => "JSON of another shape",
        serde_json::error::Category::Eof => "JSON cut short",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vllm_keda_core::policy::proactive::{KeptMinute, PersistedFloor};

    #[test]
    fn a_key_may_take_what_the_others_leave_up_to_an_equal_share() {
        let data = |n: usize, size: usize| {
            (0..n)
                .map(|i| (format!("llm.so-{i:03}.0123456789abcdef"), "x".repeat(size)))
                .collect::<BTreeMap<_, _>>()
        };
        let room_for = |data: &BTreeMap<String, String>, key: &str| room_for(data, key, &[]);
        let key_len = "llm.so-000.0123456789abcdef".len();
        // Alone, a key may take the whole budget; beside three small keys, a quarter of it,
        // more than five whole days' history.
        assert_eq!(room_for(&data(0, 0), "llm.new.1"), CONFIGMAP_BUDGET);
        assert_eq!(room_for(&data(3, 1_000), "llm.new.1"), CONFIGMAP_BUDGET / 4);
        // Among 45 keys, each may take at most a 45th, even with room left: so the first
        // writers do not keep whole days while the later ones keep nothing.
        assert_eq!(room_for(&data(44, 300), "llm.new.1"), CONFIGMAP_BUDGET / 45);
        // Its own key counts once, and its own value is not counted against it.
        let mut full = data(44, 300);
        full.insert("llm.new.1".into(), "x".repeat(40_000));
        assert_eq!(room_for(&full, "llm.new.1"), CONFIGMAP_BUDGET / 45);
        // What others already hold bounds it below its share: 20 whole days leave little.
        assert_eq!(
            room_for(&data(20, 45_000), "llm.new.1"),
            CONFIGMAP_BUDGET - 20 * (key_len + 45_000)
        );
    }

    #[test]
    fn records_over_a_day_old_of_other_keys_are_removed_and_free_their_room() {
        let at = |written: f64| {
            format!(r#"{{"capacity_per_replica":2.0,"written_unix_seconds":{written}}}"#)
        };
        let now = 1_764_800_000.0;
        let day = MAX_AGE.as_secs_f64();
        let data = BTreeMap::from([
            ("llm.mine.01".to_owned(), at(now - 3.0 * day)),
            ("llm.old.02".to_owned(), at(now - day - 1.0)),
            ("llm.day.03".to_owned(), at(now - day)),
            ("llm.new.04".to_owned(), at(now - 60.0)),
            ("notes".to_owned(), "x".repeat(100)),
            (
                "llm.junk.05".to_owned(),
                r#"{"written_unix_seconds":"yesterday"}"#.to_owned(),
            ),
        ]);
        // Its own key is rewritten anyway; exactly a day old is still inherited; values that
        // are not records are not this store's to remove.
        let gone = expired(&data, "llm.mine.01", now);
        assert_eq!(gone, ["llm.old.02"]);
        // The removed key neither takes room nor counts toward the share.
        let others: usize = data
            .iter()
            .filter(|(k, _)| !["llm.mine.01", "llm.old.02"].contains(&k.as_str()))
            .map(|(k, v)| k.len() + v.len())
            .sum();
        assert!(CONFIGMAP_BUDGET - others > CONFIGMAP_BUDGET / 5);
        assert_eq!(room_for(&data, "llm.mine.01", &gone), CONFIGMAP_BUDGET / 5);
        assert_eq!(room_for(&data, "llm.mine.01", &[]), CONFIGMAP_BUDGET / 6);
    }

    #[test]
    fn a_location_is_namespace_and_name() {
        assert_eq!(
            parse_location("keda/vllm-keda-scaler-learned"),
            Ok(("keda".into(), "vllm-keda-scaler-learned".into()))
        );
        for bad in [
            "keda", "/x", "keda/", "Keda/x", "keda/x/y", "keda/-x", "keda/x_y",
        ] {
            let err = parse_location(bad).unwrap_err();
            assert!(err.contains("NAMESPACE/NAME"), "{bad}: {err}");
        }
    }

    #[test]
    fn a_record_reads_back_and_names_its_fields() {
        let record = Record {
            persisted: Persisted {
                capacity_per_replica: Some(13.5),
                capacity_verified: Some(9.0),
                startup_seconds: Some(254.0),
                observed_seconds: 3600.0,
                hindsight_floor: None,
                light_share: None,
                demand_history: vec![],
            },
            written_unix_seconds: 1_764_800_000.0,
        };
        let text = serde_json::to_string(&record).unwrap();
        assert_eq!(
            text,
            r#"{"capacity_per_replica":13.5,"capacity_verified":9.0,"startup_seconds":254.0,"observed_seconds":3600.0,"written_unix_seconds":1764800000.0}"#
        );
        assert_eq!(serde_json::from_str::<Record>(&text).unwrap(), record);
        assert_eq!(key("llm", "chat", "00ff"), "llm.chat.00ff");
        // A record written before the history was kept reads as none observed.
        let older = r#"{"capacity_per_replica":13.5,"capacity_verified":9.0,"startup_seconds":null,"written_unix_seconds":1764800000.0}"#;
        let older: Record = serde_json::from_str(older).unwrap();
        assert_eq!(older.persisted.observed_seconds, 0.0);
    }

    #[test]
    fn a_kept_floor_and_history_read_back_and_age_from_when_they_were_written() {
        let floor = PersistedFloor {
            replicas: 4,
            served_percent: 100.0,
            replica_hours: 8.0,
            ours_served_percent: 91.0,
            ours_replica_hours: 9.5,
            minutes: 120,
            peak_demand: 47.0,
            age_seconds: 1_800.0,
            capacity_per_replica: Some(9.5),
            served_beyond_requests: Some(1_234.5),
        };
        let record = Record {
            persisted: Persisted {
                capacity_per_replica: Some(13.5),
                capacity_verified: Some(9.0),
                startup_seconds: None,
                observed_seconds: 3600.0,
                hindsight_floor: Some(floor),
                light_share: Some(0.62),
                demand_history: vec![KeptMinute(180, 4.5, 6.25, 1.0, 2.0)],
            },
            written_unix_seconds: 1_764_800_000.0,
        };
        let text = serde_json::to_string(&record).unwrap();
        assert!(
            text.contains(r#""hindsight_floor":{"replicas":4,"#),
            "{text}"
        );
        assert!(
            text.contains(r#""demand_history":[[180,4.5,6.25,1.0,2.0]]"#),
            "{text}"
        );
        assert_eq!(serde_json::from_str::<Record>(&text).unwrap(), record);
        // Read ten minutes after it was written, the floor and the history are ten minutes
        // older; nothing else moves.
        let read = record.persisted_at(record.written_unix_seconds + 600.0);
        assert_eq!(read.hindsight_floor.unwrap().age_seconds, 2_400.0);
        assert_eq!(read.demand_history, [KeptMinute(780, 4.5, 6.25, 1.0, 2.0)]);
        assert_eq!(
            Persisted {
                hindsight_floor: Some(floor),
                demand_history: record.persisted.demand_history.clone(),
                ..read
            },
            record.persisted
        );
        // A clock behind the writer's, or no clock, does not make it younger.
        for now in [record.written_unix_seconds - 60.0, f64::NAN] {
            let read = record.persisted_at(now);
            assert_eq!(read.hindsight_floor.unwrap().age_seconds, 1_800.0, "{now}");
            assert_eq!(read.demand_history[0].seconds_ago(), 180, "{now}");
        }
    }

    #[test]
    fn a_record_fits_the_room_the_other_keys_leave_by_dropping_its_oldest_minutes() {
        let mut record = Record {
            persisted: Persisted {
                capacity_per_replica: Some(13.5),
                capacity_verified: None,
                startup_seconds: None,
                observed_seconds: 86_400.0,
                hindsight_floor: None,
                light_share: None,
                demand_history: (1..=1440)
                    .rev()
                    .map(|ago| KeptMinute(60 * ago, 12.34, 15.67, 3.45, 4.0))
                    .collect(),
            },
            written_unix_seconds: 1_764_800_000.0,
        };
        let key = "llm.chat.00ff";
        let size = |r: &Record| key.len() + serde_json::to_string(r).unwrap().len();
        let whole = size(&record);
        assert!((30_000..48_000).contains(&whole), "{whole}");
        // Room for all of it: nothing is dropped.
        assert_eq!(record.clone().fit(key, whole), 0);
        // Room for a quarter: the oldest minutes go, the newest stay, and it fits.
        let mut cut = record.clone();
        let dropped = cut.fit(key, whole / 4);
        assert!(size(&cut) <= whole / 4, "{}", size(&cut));
        assert_eq!(cut.persisted.demand_history.len(), 1440 - dropped);
        assert!(dropped > 1000, "{dropped}");
        assert_eq!(
            cut.persisted.demand_history.last().unwrap().seconds_ago(),
            60
        );
        // No room: the history goes, the rest of the learning stays.
        assert_eq!(record.fit(key, 0), 1440);
        assert_eq!(record.persisted.capacity_per_replica, Some(13.5));
    }

    #[test]
    fn a_record_outranks_a_shorter_history_while_it_is_fresh() {
        let record = Record {
            persisted: Persisted {
                capacity_per_replica: Some(13.5),
                capacity_verified: None,
                startup_seconds: None,
                observed_seconds: 3600.0,
                hindsight_floor: None,
                light_share: None,
                demand_history: vec![],
            },
            written_unix_seconds: 1_764_800_000.0,
        };
        let now = record.written_unix_seconds + 60.0;
        assert!(record.outranks(3599.0, now));
        assert!(
            !record.outranks(3600.0, now),
            "an equal history is not longer"
        );
        assert!(!record.outranks(7200.0, now));
        let day_later = record.written_unix_seconds + MAX_AGE.as_secs_f64() + 1.0;
        assert!(!record.outranks(0.0, day_later), "too old");
        assert!(!record.outranks(0.0, f64::NAN));
        let empty = Record {
            persisted: Persisted {
                capacity_per_replica: None,
                ..record.persisted
            },
            ..record
        };
        assert!(!empty.outranks(0.0, now), "no estimate to adopt");
    }
}
