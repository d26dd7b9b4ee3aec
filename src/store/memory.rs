//! The in-memory backend: a map behind a mutex, with idle expiry.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures_util::future::{self, BoxFuture};

use super::{Key, Record, Store};
use crate::error::{Error, Result};

/// Records live in memory and expire after `idle_ttl` without a load or save.
pub struct MemoryStore {
    idle_ttl: Duration,
    records: Mutex<Records>,
}

struct Records {
    entries: HashMap<Key, Entry>,
    /// When idle records were last dropped: a sweep walks every record, so it runs at most once per
    /// [`SWEEP_INTERVAL`], not on every save.
    swept: Instant,
}

const SWEEP_INTERVAL: Duration = Duration::from_secs(60);

struct Entry {
    record: Record,
    touched: Instant,
}

impl MemoryStore {
    pub fn new(idle_ttl: Duration) -> Self {
        let records = Records {
            entries: HashMap::new(),
            swept: Instant::now(),
        };
        Self {
            idle_ttl,
            records: Mutex::new(records),
        }
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
        records
            .entries
            .retain(|_, entry| now.duration_since(entry.touched) < self.idle_ttl);
    }
}

impl Store for MemoryStore {
    fn load<'a>(&'a self, key: &'a Key) -> BoxFuture<'a, Result<Option<Record>>> {
        let now = Instant::now();
        let found = self.with_records(|records| match records.entries.get_mut(key) {
            Some(entry) if now.duration_since(entry.touched) < self.idle_ttl => {
                entry.touched = now;
                Some(entry.record.clone())
            }
            _ => None,
        });
        Box::pin(future::ready(found))
    }

    fn save<'a>(&'a self, key: &'a Key, record: Record) -> BoxFuture<'a, Result<()>> {
        let now = Instant::now();
        let saved = self.with_records(|records| {
            self.expire(records, now);
            records.entries.insert(
                key.clone(),
                Entry {
                    record,
                    touched: now,
                },
            );
        });
        Box::pin(future::ready(saved))
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
        record
            .upstream
            .insert("a2a.context_id".into(), "ctx-1".into());
        store.save(&key("t1"), record.clone()).await.unwrap();
        assert_eq!(store.load(&key("t1")).await.unwrap(), Some(record));
        assert_eq!(store.load(&key("t2")).await.unwrap(), None);
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
}
