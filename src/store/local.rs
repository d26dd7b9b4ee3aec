//! The backends whose records one process owns: memory, and redb (a file only one process opens). An index
//! in memory knows each record's size, when it was last touched and whether it waits on its user, and
//! decides what goes:
//! - a record idle for longer than `idle_ttl` (swept at most once a minute, on save);
//! - over `max_bytes` in all, the records touched longest ago, never one with pending interrupts (a paused
//!   run waiting on its user); when only those are left, a new conversation is refused
//!   ([`Error::store_full`]);
//! - over a tenant's conversations quota, that tenant's oldest idle records.
//!
//! A record over `max_record` loses its oldest messages first ([`super::fit_record`]). Where the records
//! themselves live is the backend's ([`Bodies`]).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use super::{fit_record, not_kept, Key, Record};
use crate::config::StoreConfig;
use crate::error::{Error, Result};

/// Where a backend keeps its records. Calls may block (a file's transaction); the index calls them while it
/// holds its lock, so that what the index says and what is kept never disagree for long.
pub(super) trait Bodies: Send + Sync {
    /// The record under `key`; `None` when there is none, or none this proxy can read.
    fn read(&self, key: &Key) -> Result<Option<Record>>;
    /// Keeps `put` (the record and when it was touched, in µs since the epoch) and forgets `gone`, at once.
    fn write(&self, put: Option<(&Key, Record, u64)>, gone: &[Key]) -> Result<()>;
}

/// What the index knows of one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Meta {
    pub bytes: usize,
    /// Microseconds since the Unix epoch, unique within the index (least recently used goes first, even
    /// among records touched within one microsecond); a file's records are still dated after a restart.
    pub touched: u64,
    pub paused: bool,
}

/// The index and the records, with the store's limits.
pub(super) struct Local<B> {
    idle_ttl: u64,
    max_record: usize,
    max_bytes: usize,
    index: Mutex<Index>,
    pub(super) bodies: B,
}

struct Index {
    entries: HashMap<Key, Meta>,
    /// The bytes of every record.
    bytes: usize,
    /// When idle records were last dropped: a sweep walks every record, so it runs at most once per
    /// [`SWEEP_INTERVAL`], not on every save.
    swept: u64,
    /// The latest time handed out by [`Index::stamp`].
    stamped: u64,
}

/// A minute, in microseconds.
pub(super) const SWEEP_INTERVAL: u64 = 60_000_000;

/// Below this many records a table is not worth shrinking.
pub(super) const MIN_ROOM: usize = 64;

/// A map keeps the room of its busiest moment: after a burst of conversations the store would hold the
/// burst's table for good. Once less than a quarter of it is used, it shrinks to twice what is left.
pub(super) fn give_back_room<V>(entries: &mut HashMap<Key, V>) {
    if entries.capacity() > 4 * entries.len().max(MIN_ROOM) {
        entries.shrink_to(2 * entries.len().max(MIN_ROOM));
    }
}

/// Now, in microseconds since the Unix epoch: the store's clock.
pub fn now_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, micros)
}

/// `duration` in microseconds, the store's unit of time.
pub fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

impl<B: Bodies> Local<B> {
    /// A store of the records `known` (what a file held when it was opened).
    pub(super) fn new(config: &StoreConfig, bodies: B, known: HashMap<Key, Meta>) -> Self {
        let bytes = known.values().map(|meta| meta.bytes).sum();
        let stamped = known.values().map(|meta| meta.touched).max().unwrap_or(0);
        let index = Index {
            entries: known,
            bytes,
            swept: 0,
            stamped,
        };
        Self {
            idle_ttl: micros(config.idle_ttl),
            max_record: config.max_record,
            max_bytes: config.max_bytes,
            index: Mutex::new(index),
            bodies,
        }
    }

    fn with_index<T>(&self, f: impl FnOnce(&mut Index) -> Result<T>) -> Result<T> {
        let mut index = self
            .index
            .lock()
            .map_err(|_| Error::internal("conversation store lock poisoned"))?;
        f(&mut index)
    }

    fn live(&self, meta: &Meta, now: u64) -> bool {
        now.saturating_sub(meta.touched) < self.idle_ttl
    }

    pub(super) fn load(&self, key: &Key) -> Result<Option<Record>> {
        let now = now_micros();
        let known = self.with_index(|index| {
            let stamp = index.stamp(now);
            if let Some(meta) = index.entries.get_mut(key) {
                if self.live(meta, now) {
                    meta.touched = stamp;
                    return Ok(true);
                }
            }
            // A new conversation starts only if the store has room for its first record.
            let (fits, evicted) = self.make_room(index, 0, key);
            self.bodies.write(None, &evicted)?;
            if fits {
                Ok(false)
            } else {
                Err(Error::store_full())
            }
        })?;
        if !known {
            return Ok(None);
        }
        let record = self.bodies.read(key)?;
        if record.is_none() {
            // Unreadable, or dropped by another call in between: the conversation starts afresh.
            self.with_index(|index| {
                index.forget(key);
                Ok(())
            })?;
        }
        Ok(record)
    }

    pub(super) fn save(&self, key: &Key, mut record: Record) -> Result<()> {
        let now = now_micros();
        let bytes = fit_record(&mut record, self.max_record);
        self.with_index(|index| {
            let stamp = index.stamp(now);
            let mut gone = self.expire(index, now);
            if index.forget(key).is_some() {
                gone.push(key.clone());
            }
            if bytes > self.max_record {
                self.bodies.write(None, &gone)?;
                return Err(not_kept(bytes, self.max_record));
            }
            let paused = record.is_paused();
            let (fits, evicted) = self.make_room(index, bytes, key);
            gone.extend(evicted);
            // A paused run's record is kept even over max_bytes: its user's answer must find it.
            if !fits && !paused {
                self.bodies.write(None, &gone)?;
                return Err(Error::store_full());
            }
            self.bodies.write(Some((key, record, stamp)), &gone)?;
            index.bytes += bytes;
            let meta = Meta {
                bytes,
                touched: stamp,
                paused,
            };
            index.entries.insert(key.clone(), meta);
            Ok(())
        })
    }

    pub(super) fn admit(&self, key: &Key, per_tenant: usize) -> Result<()> {
        self.with_index(|index| {
            let Some(evicted) = Self::make_room_for_tenant(index, key, per_tenant) else {
                return Err(Error::too_many(
                    format!(
                        "{per_tenant} conversations of this client wait on their users (its quota); \
                         answer or abandon one first"
                    ),
                    60,
                ));
            };
            self.bodies.write(None, &evicted)
        })
    }

    /// Drops every record idle for longer than the ttl, at most once per sweep interval. Called on save, so
    /// the store stays bounded by the conversations active within one ttl (plus one interval). What went.
    fn expire(&self, index: &mut Index, now: u64) -> Vec<Key> {
        if now.saturating_sub(index.swept) < SWEEP_INTERVAL.min(self.idle_ttl) {
            return Vec::new();
        }
        index.swept = now;
        let expired: Vec<Key> = index
            .entries
            .iter()
            .filter(|(_, meta)| !self.live(meta, now))
            .map(|(key, _)| key.clone())
            .collect();
        for key in &expired {
            index.forget(key);
        }
        give_back_room(&mut index.entries);
        expired
    }

    /// Drops the records touched longest ago, none with pending interrupts and never `keep`, until `needed`
    /// more bytes fit within `max_bytes`. Whether they fit, and what went.
    fn make_room(&self, index: &mut Index, needed: usize, keep: &Key) -> (bool, Vec<Key>) {
        let fits = |index: &Index| index.bytes + needed <= self.max_bytes;
        if fits(index) {
            return (true, Vec::new());
        }
        let mut idle: Vec<(u64, Key)> = index
            .entries
            .iter()
            .filter(|(key, meta)| *key != keep && !meta.paused)
            .map(|(key, meta)| (meta.touched, key.clone()))
            .collect();
        idle.sort_unstable_by_key(|(touched, _)| *touched);
        let mut evicted = Vec::new();
        for (_, key) in idle {
            if fits(index) {
                break;
            }
            index.forget(&key);
            evicted.push(key);
        }
        if !evicted.is_empty() {
            tracing::info!(
                evicted = evicted.len(),
                max_bytes = self.max_bytes,
                "the conversation store reached store.max_bytes; the oldest idle conversations were dropped"
            );
        }
        (fits(index), evicted)
    }

    /// Drops the oldest records of `key`'s tenant on its route that wait on nobody, until fewer than
    /// `per_tenant` are left: what went, or `None` when too many of them wait on their users. One pass
    /// over the records: quotas are per route and tenant, and a new conversation is rare next to the turns
    /// of existing ones.
    fn make_room_for_tenant(index: &mut Index, key: &Key, per_tenant: usize) -> Option<Vec<Key>> {
        let same_tenant = |other: &Key| other.route == key.route && other.tenant == key.tenant;
        let mut own: Vec<(bool, u64, Key)> = index
            .entries
            .iter()
            .filter(|(other, _)| same_tenant(other) && *other != key)
            .map(|(other, meta)| (meta.paused, meta.touched, other.clone()))
            .collect();
        if own.len() < per_tenant {
            return Some(Vec::new());
        }
        own.sort_unstable_by_key(|(paused, touched, _)| (*paused, *touched));
        let excess = own.len() + 1 - per_tenant;
        let idle = own.iter().take_while(|(paused, ..)| !paused).count();
        if idle < excess {
            return None;
        }
        let evicted: Vec<Key> = own
            .into_iter()
            .take(excess)
            .map(|(_, _, other)| other)
            .collect();
        for other in &evicted {
            index.forget(other);
        }
        tracing::info!(
            route = %key.route,
            evicted = excess,
            per_tenant,
            "a tenant reached its conversations quota; its oldest idle conversations were dropped"
        );
        Some(evicted)
    }

    #[cfg(test)]
    pub(super) fn indexed(&self) -> (usize, usize) {
        let index = self.index.lock().unwrap();
        (index.entries.len(), index.entries.capacity())
    }
}

impl Index {
    /// `now`, or just after the last time handed out when that is later: every touch is ordered.
    fn stamp(&mut self, now: u64) -> u64 {
        self.stamped = now.max(self.stamped + 1);
        self.stamped
    }

    fn forget(&mut self, key: &Key) -> Option<Meta> {
        let meta = self.entries.remove(key)?;
        self.bytes -= meta.bytes;
        Some(meta)
    }
}
