//! The in-memory backend: the records in a map, bounded and expired by the index they share with redb
//! ([`super::local`]). For tests and throwaway runs: a restart forgets every conversation.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use futures_util::future::{self, BoxFuture};

use super::local::{give_back_room, Bodies, Local};
use super::{DocumentKey, Key, Record, Store};
use crate::config::StoreConfig;
use crate::error::{Error, Result};

/// Records live in memory and expire after `idle_ttl` without a load or save.
pub struct MemoryStore(Local<Records>);

struct Records(Mutex<HashMap<Key, Record>>);

impl Bodies for Records {
    fn read(&self, key: &Key) -> Result<Option<Record>> {
        Ok(self.lock()?.get(key).cloned())
    }

    fn write(&self, put: Option<(&Key, Record, u64)>, gone: &[Key]) -> Result<()> {
        let mut records = self.lock()?;
        for key in gone {
            records.remove(key);
        }
        if let Some((key, record, _)) = put {
            records.insert(key.clone(), record);
        }
        give_back_room(&mut records);
        Ok(())
    }
}

impl Records {
    fn lock(&self) -> Result<std::sync::MutexGuard<'_, HashMap<Key, Record>>> {
        self.0
            .lock()
            .map_err(|_| Error::internal("conversation store lock poisoned"))
    }
}

impl MemoryStore {
    pub fn new(idle_ttl: Duration) -> Self {
        Self::with_config(&StoreConfig {
            idle_ttl,
            ..StoreConfig::default()
        })
    }

    pub fn with_config(config: &StoreConfig) -> Self {
        let records = Records(Mutex::new(HashMap::new()));
        Self(Local::new(config, records, HashMap::new()))
    }
}

impl Store for MemoryStore {
    fn load<'a>(&'a self, key: &'a Key) -> BoxFuture<'a, Result<Option<Record>>> {
        Box::pin(future::ready(self.0.load(key)))
    }

    fn save<'a>(&'a self, key: &'a Key, record: Record) -> BoxFuture<'a, Result<()>> {
        Box::pin(future::ready(self.0.save(key, record)))
    }

    fn admit<'a>(&'a self, key: &'a Key, per_tenant: usize) -> BoxFuture<'a, Result<()>> {
        Box::pin(future::ready(self.0.admit(key, per_tenant)))
    }

    fn keeps_documents(&self) -> bool {
        false
    }

    fn load_document<'a>(&'a self, _: &'a DocumentKey) -> BoxFuture<'a, Result<Option<Vec<u8>>>> {
        Box::pin(future::ready(Ok(None)))
    }

    fn save_document<'a>(&'a self, _: &'a DocumentKey, _: Vec<u8>) -> BoxFuture<'a, Result<()>> {
        Box::pin(future::ready(Ok(())))
    }

    fn delete_document<'a>(&'a self, _: &'a DocumentKey) -> BoxFuture<'a, Result<()>> {
        Box::pin(future::ready(Ok(())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::local::MIN_ROOM;

    fn limited(max_record: usize, max_bytes: usize) -> MemoryStore {
        MemoryStore::with_config(&StoreConfig {
            idle_ttl: Duration::from_secs(60),
            max_record,
            max_bytes,
            ..StoreConfig::default()
        })
    }

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
        let store = limited(2_000, 2_500);
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
        let store = limited(1_200, 1 << 20);
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
            store.0.indexed().0,
            1,
            "expired records are dropped on save"
        );
        assert_eq!(store.0.bodies.0.lock().unwrap().len(), 1);
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
        let burst = store.0.indexed().1;
        assert!(burst >= 5_000);
        tokio::time::sleep(Duration::from_millis(400)).await;
        store.save(&key("after"), Record::default()).await.unwrap();
        let (_, after) = store.0.indexed();
        assert!(after <= 4 * MIN_ROOM, "{burst} slots kept {after}");
        let records = store.0.bodies.0.lock().unwrap().capacity();
        assert!(records <= 4 * MIN_ROOM, "{burst} slots kept {records}");
    }
}
