//! The in-memory backend: a map behind a mutex, with idle expiry and byte bounds.
//!
//! Each record counts its JSON length ([`super::record_bytes`]). A record over `max_record` loses its oldest
//! messages ([`super::fit_record`]). Over `max_bytes` in all, the records touched longest ago go first, but
//! never one with pending interrupts (a paused run waiting on its user); when only those are left, a new
//! conversation is refused ([`Error::store_full`]) and a record that still does not fit is not kept.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures_util::future::{self, BoxFuture};

use super::{fit_record, Key, Record, Store};
use crate::error::{Error, Result};

/// Records live in memory and expire after `idle_ttl` without a load or save.
pub struct MemoryStore {
    idle_ttl: Duration,
    max_record: usize,
    max_bytes: usize,
    records: Mutex<Records>,
}

struct Records {
    entries: HashMap<Key, Entry>,
    /// The bytes of every entry's record.
    bytes: usize,
    /// When idle records were last dropped: a sweep walks every record, so it runs at most once per
    /// [`SWEEP_INTERVAL`], not on every save.
    swept: Instant,
}

const SWEEP_INTERVAL: Duration = Duration::from_secs(60);

/// A map keeps the room of its busiest moment: after a burst of conversations the store would hold the
/// burst's table for good. Once less than a quarter of it is used, it shrinks to twice what is left.
fn give_back_room(entries: &mut HashMap<Key, Entry>) {
    if entries.capacity() > 4 * entries.len().max(MIN_ROOM) {
        entries.shrink_to(2 * entries.len().max(MIN_ROOM));
    }
}

/// Below this many records a table is not worth shrinking.
const MIN_ROOM: usize = 64;

struct Entry {
    record: Record,
    bytes: usize,
    touched: Instant,
}

impl MemoryStore {
    pub fn new(idle_ttl: Duration) -> Self {
        let records = Records {
            entries: HashMap::new(),
            bytes: 0,
            swept: Instant::now(),
        };
        let defaults = crate::config::StoreConfig::default();
        Self {
            idle_ttl,
            max_record: defaults.max_record,
            max_bytes: defaults.max_bytes,
            records: Mutex::new(records),
        }
    }

    pub fn with_limits(mut self, max_record: usize, max_bytes: usize) -> Self {
        self.max_record = max_record;
        self.max_bytes = max_bytes;
        self
    }

    fn with_records<T>(&self, f: impl FnOnce(&mut Records) -> T) -> Result<T> {
        let mut records = self
            .records
            .lock()
            .map_err(|_| Error::internal("conversation store lock poisoned"))?;
        Ok(f(&mut records))
    }

    /// Drops every record idle for longer than the ttl, at most once per sweep interval. Called on save, so
    /// memory stays bounded by the conversations active within one ttl (plus one interval).
    fn expire(&self, records: &mut Records, now: Instant) {
        let interval = SWEEP_INTERVAL.min(self.idle_ttl);
        if now.duration_since(records.swept) < interval {
            return;
        }
        records.swept = now;
        let mut freed = 0;
        records.entries.retain(|_, entry| {
            let live = now.duration_since(entry.touched) < self.idle_ttl;
            if !live {
                freed += entry.bytes;
            }
            live
        });
        records.bytes -= freed;
        give_back_room(&mut records.entries);
    }

    /// Drops the records touched longest ago, none with pending interrupts and never `keep`, until `needed`
    /// more bytes fit within `max_bytes`. Whether they fit.
    fn make_room(&self, records: &mut Records, needed: usize, keep: &Key) -> bool {
        let fits = |records: &Records| records.bytes + needed <= self.max_bytes;
        if fits(records) {
            return true;
        }
        let mut idle: Vec<(Instant, Key)> = records
            .entries
            .iter()
            .filter(|(key, entry)| *key != keep && entry.record.pending_interrupts.is_empty())
            .map(|(key, entry)| (entry.touched, key.clone()))
            .collect();
        idle.sort_unstable_by_key(|(touched, _)| *touched);
        let mut evicted = 0;
        for (_, key) in idle {
            if fits(records) {
                break;
            }
            if let Some(entry) = records.entries.remove(&key) {
                records.bytes -= entry.bytes;
                evicted += 1;
            }
        }
        if evicted > 0 {
            tracing::info!(
                evicted,
                max_bytes = self.max_bytes,
                "the conversation store reached store.max_bytes; the oldest idle conversations were dropped"
            );
        }
        fits(records)
    }

    /// Drops the oldest records of `key`'s tenant on its route that wait on nobody, until fewer than
    /// `per_tenant` are left. Whether they are. One pass over the records: quotas are per route and tenant,
    /// and a new conversation is rare next to the turns of existing ones.
    fn make_room_for_tenant(records: &mut Records, key: &Key, per_tenant: usize) -> bool {
        let same_tenant = |other: &Key| other.route == key.route && other.tenant == key.tenant;
        let mut own: Vec<(bool, Instant, Key)> = records
            .entries
            .iter()
            .filter(|(other, _)| same_tenant(other) && *other != key)
            .map(|(other, entry)| {
                let paused = !entry.record.pending_interrupts.is_empty();
                (paused, entry.touched, other.clone())
            })
            .collect();
        if own.len() < per_tenant {
            return true;
        }
        own.sort_unstable_by_key(|(paused, touched, _)| (*paused, *touched));
        let excess = own.len() + 1 - per_tenant;
        let idle = own.iter().take_while(|(paused, ..)| !paused).count();
        if idle < excess {
            return false;
        }
        for (_, _, other) in own.into_iter().take(excess) {
            if let Some(entry) = records.entries.remove(&other) {
                records.bytes -= entry.bytes;
            }
        }
        tracing::info!(
            route = %key.route,
            evicted = excess,
            per_tenant,
            "a tenant reached its conversations quota; its oldest idle conversations were dropped"
        );
        true
    }
}

impl Store for MemoryStore {
    fn load<'a>(&'a self, key: &'a Key) -> BoxFuture<'a, Result<Option<Record>>> {
        let now = Instant::now();
        let found = self.with_records(|records| {
            if let Some(entry) = records.entries.get_mut(key) {
                if now.duration_since(entry.touched) < self.idle_ttl {
                    entry.touched = now;
                    return Ok(Some(entry.record.clone()));
                }
            }
            // A new conversation starts only if the store has room for its first record.
            if self.make_room(records, 0, key) {
                Ok(None)
            } else {
                Err(Error::store_full())
            }
        });
        Box::pin(future::ready(found.and_then(|found| found)))
    }

    fn save<'a>(&'a self, key: &'a Key, mut record: Record) -> BoxFuture<'a, Result<()>> {
        let now = Instant::now();
        let bytes = fit_record(&mut record, self.max_record);
        let saved = self.with_records(|records| {
            self.expire(records, now);
            if let Some(old) = records.entries.remove(key) {
                records.bytes -= old.bytes;
            }
            if bytes > self.max_record {
                return Err(Error::internal(format!(
                    "the conversation record takes {bytes} bytes without its messages, more than \
                     store.max_record ({}); it is not kept",
                    self.max_record
                )));
            }
            let paused = !record.pending_interrupts.is_empty();
            // A paused run's record is kept even over max_bytes: its user's answer must find it.
            if !self.make_room(records, bytes, key) && !paused {
                return Err(Error::store_full());
            }
            records.bytes += bytes;
            let entry = Entry {
                record,
                bytes,
                touched: now,
            };
            records.entries.insert(key.clone(), entry);
            Ok(())
        });
        Box::pin(future::ready(saved.and_then(|saved| saved)))
    }

    fn admit<'a>(&'a self, key: &'a Key, per_tenant: usize) -> BoxFuture<'a, Result<()>> {
        let admitted = self.with_records(|records| {
            if Self::make_room_for_tenant(records, key, per_tenant) {
                Ok(())
            } else {
                Err(Error::too_many(
                    format!(
                        "{per_tenant} conversations of this client wait on their users (its quota); \
                         answer or abandon one first"
                    ),
                    60,
                ))
            }
        });
        Box::pin(future::ready(admitted.and_then(|admitted| admitted)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(conversation: &str) -> Key {
        Key {
            route: "r".into(),
            tenant: String::new(),
            conversation: conversation.into(),
        }
    }

    #[tokio::test]
    async fn saved_records_load_back() {
        let store = MemoryStore::new(Duration::from_secs(60));
        let mut record = Record::default();
        record.pending_calls.push("call-1".into());
        store.save(&key("t1"), record.clone()).await.unwrap();
        assert_eq!(store.load(&key("t1")).await.unwrap(), Some(record));
        assert_eq!(store.load(&key("t2")).await.unwrap(), None);
    }

    fn with_text(bytes: usize) -> Record {
        Record {
            log: vec![crate::model::Message::text_message(
                "m",
                crate::model::Role::User,
                "x".repeat(bytes),
            )],
            ..Record::default()
        }
    }

    fn paused(bytes: usize) -> Record {
        let mut record = with_text(bytes);
        record.pending_interrupts.push(crate::model::Interrupt {
            id: "i".into(),
            kind: crate::model::InterruptKind::Question {
                text: "?".into(),
                options: vec![],
            },
        });
        record
    }

    #[tokio::test]
    async fn over_max_bytes_the_oldest_idle_record_goes_and_a_paused_one_stays() {
        let store = MemoryStore::new(Duration::from_secs(60)).with_limits(2_000, 2_500);
        store.save(&key("paused"), paused(900)).await.unwrap();
        store.save(&key("idle"), with_text(900)).await.unwrap();
        store.save(&key("new"), with_text(900)).await.unwrap();
        assert!(store.load(&key("paused")).await.unwrap().is_some());
        assert_eq!(store.load(&key("idle")).await.unwrap(), None, "evicted");
        assert!(store.load(&key("new")).await.unwrap().is_some());

        // Only paused runs left and no room: a new conversation is refused as "too many".
        store.save(&key("new"), paused(900)).await.unwrap();
        store.save(&key("paused2"), paused(900)).await.unwrap();
        let refused = store.load(&key("another")).await.unwrap_err();
        assert_eq!(refused.code(), "RATE_LIMITED");
        assert!(refused.message().contains("store is full"));
    }

    #[tokio::test]
    async fn a_tenant_at_its_conversations_quota_makes_room_among_its_own_idle_ones_else_is_refused(
    ) {
        let store = MemoryStore::new(Duration::from_secs(60));
        let of = |tenant: &str, conversation: &str| Key {
            tenant: tenant.into(),
            ..key(conversation)
        };
        store.save(&of("a", "paused"), paused(10)).await.unwrap();
        store.save(&of("a", "old"), with_text(10)).await.unwrap();
        store.save(&of("b", "theirs"), with_text(10)).await.unwrap();
        store.save(&of("a", "recent"), with_text(10)).await.unwrap();

        store.admit(&of("a", "new"), 3).await.unwrap();
        assert_eq!(store.load(&of("a", "old")).await.unwrap(), None, "evicted");
        for kept in [of("a", "paused"), of("a", "recent"), of("b", "theirs")] {
            assert!(store.load(&kept).await.unwrap().is_some(), "{kept:?}");
        }

        store.save(&of("a", "recent"), paused(10)).await.unwrap();
        let refused = store.admit(&of("a", "new"), 2).await.unwrap_err();
        assert_eq!(refused.code(), "RATE_LIMITED");
        assert!(refused.message().contains("quota"), "{refused}");
        store.admit(&of("b", "new"), 2).await.unwrap();
    }

    #[tokio::test]
    async fn a_record_over_max_record_loses_its_oldest_messages() {
        let store = MemoryStore::new(Duration::from_secs(60)).with_limits(1_200, 1 << 20);
        let mut record = Record::default();
        for text in ["first", "second", "third"] {
            let padded = format!("{text}{}", " ".repeat(400));
            record.log.push(crate::model::Message::text_message(
                text,
                crate::model::Role::User,
                padded,
            ));
        }
        store.save(&key("c"), record).await.unwrap();
        let kept = store.load(&key("c")).await.unwrap().unwrap();
        let ids: Vec<&str> = kept.log.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(ids, ["second", "third"]);
        assert!(super::super::record_bytes(&kept) <= 1_200);

        // What is not a log cannot be trimmed: such a record is not kept.
        let mut huge = Record::default();
        huge.sent.push("x".repeat(2_000));
        let refused = store.save(&key("h"), huge).await.unwrap_err();
        assert!(refused.message().contains("store.max_record"), "{refused}");
        assert_eq!(store.load(&key("h")).await.unwrap(), None);
    }

    #[tokio::test]
    async fn idle_records_expire() {
        let store = MemoryStore::new(Duration::from_millis(20));
        store.save(&key("t1"), Record::default()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(40)).await;
        assert_eq!(store.load(&key("t1")).await.unwrap(), None);
        store.save(&key("t2"), Record::default()).await.unwrap();
        assert_eq!(
            store.records.lock().unwrap().entries.len(),
            1,
            "expired records are dropped on save"
        );
    }

    #[tokio::test]
    async fn the_room_of_a_burst_is_given_back_once_it_expired() {
        let store = MemoryStore::new(Duration::from_millis(300));
        for n in 0..5_000 {
            store
                .save(&key(&n.to_string()), Record::default())
                .await
                .unwrap();
        }
        let burst = store.records.lock().unwrap().entries.capacity();
        assert!(burst >= 5_000);
        tokio::time::sleep(Duration::from_millis(400)).await;
        store.save(&key("after"), Record::default()).await.unwrap();
        let after = store.records.lock().unwrap().entries.capacity();
        assert!(after <= 4 * MIN_ROOM, "{burst} slots kept {after}");
    }
}
