//! The conversation store: one record per (route, tenant, conversation), holding what the proxy must
//! remember between turns. It knows no protocol: each outbound keeps what it remembers of its upstream (an
//! A2A contextId, a CMDC session, ...) as a type of its own ([`UpstreamState`]), which the record holds in
//! its serde form.
//!
//! Backends ([`open`]): `memory` (tests, throwaway runs), `redb` (a file: survives restarts) and `redis`
//! (shared by replicas). The ones one process owns share their bookkeeping (`local.rs`); the ones outside
//! the process write a record the same way (`codec.rs`).

mod codec;
mod local;
mod memory;
mod notices;
mod redb;
mod redis;
mod runlog;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::{StoreBackend, StoreConfig};
use crate::error::Result;
use crate::model::{Interrupt, Message};
use crate::size::json_len;

pub use self::local::{micros, now_micros};
pub use self::memory::MemoryStore;
pub use self::notices::LogWatch;
pub use self::redb::RedbStore;
pub use self::redis::RedisStore;
pub use self::runlog::{Followed, LogWriter, OpenLogs, LEASE, LEASE_RENEWAL};

/// Which conversation a record belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    pub route: String,
    pub tenant: String,
    pub conversation: String,
}

/// What the proxy remembers of one conversation.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// What the route's outbound remembers of its upstream; read and written through
    /// [`Record::upstream_state`] and [`Record::update_upstream`]. `None` starts a new upstream conversation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<UpstreamSlot>,
    /// Interrupts the client has not answered yet.
    #[serde(default)]
    pub pending_interrupts: Vec<Interrupt>,
    /// Calls of the client's own tools that the last run made and that the client has yet to answer with a
    /// tool message.
    #[serde(default)]
    pub pending_calls: Vec<String>,
    /// Interrupts answered or left to lapse: an inbound that pauses with a tool call (AG-UI) keeps that
    /// call and its answer in the history it resends, and they must stay out of the upstream's history.
    #[serde(default)]
    pub closed_interrupts: Vec<String>,
    /// The canonical message log, for inbounds that send deltas to upstreams that want full history.
    #[serde(default)]
    pub log: Vec<Message>,
    /// Ids of the client's messages already sent upstream, for inbounds that send full history to upstreams
    /// that keep their own.
    #[serde(default)]
    pub sent: Vec<String>,
    /// Ids of the messages the client built from what the proxy streamed to it (it sends them back).
    #[serde(default)]
    pub produced: Vec<String>,
}

/// What one outbound remembers of its upstream between turns: a type of the outbound's own.
pub trait UpstreamState: Serialize + DeserializeOwned + Default + PartialEq {
    /// Whose state it is. A record written by another outbound (the route's upstream changed protocol)
    /// reads as a new upstream conversation.
    const OWNER: &'static str;
    /// The fields that identify the conversation upstream (never a secret: they are logged), each with the
    /// trace attribute that names it on a run's span.
    const IDS: &'static [(&'static str, &'static str)];
}

/// One id of the conversation upstream ([`UpstreamState::IDS`]).
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamId {
    /// Its field in the outbound's state, as the run's log line names it.
    pub field: &'static str,
    /// The trace attribute that names it.
    pub attribute: &'static str,
    pub value: String,
}

/// An outbound's state in the record, under its owner's name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UpstreamSlot {
    owner: String,
    state: Value,
}

impl Record {
    /// The conversation waits on its user: its record is never dropped to make room.
    pub fn is_paused(&self) -> bool {
        !self.pending_interrupts.is_empty()
    }

    /// The outbound's ids of the conversation upstream ([`UpstreamState::IDS`]) that it has.
    pub fn upstream_ids<S: UpstreamState>(&self) -> Vec<UpstreamId> {
        let Some(slot) = self.upstream.as_ref().filter(|slot| slot.owner == S::OWNER) else {
            return Vec::new();
        };
        S::IDS
            .iter()
            .filter_map(|&(field, attribute)| {
                let value = match slot.state.get(field)? {
                    Value::Null => return None,
                    Value::String(id) => id.clone(),
                    id => id.to_string(),
                };
                Some(UpstreamId {
                    field,
                    attribute,
                    value,
                })
            })
            .collect()
    }

    /// The outbound's state; its default when the conversation has none of this outbound's yet.
    pub fn upstream_state<S: UpstreamState>(&self) -> S {
        let Some(slot) = self.upstream.as_ref().filter(|slot| slot.owner == S::OWNER) else {
            return S::default();
        };
        S::deserialize(&slot.state).unwrap_or_else(|error| {
            // Written by another version of the outbound: the upstream conversation starts afresh.
            tracing::warn!(
                owner = S::OWNER,
                "a stored upstream state is unreadable ({error}); starting afresh"
            );
            S::default()
        })
    }

    /// Changes the outbound's state in place; what `change` returns is handed back. A state left at its
    /// default takes no room.
    pub fn update_upstream<S: UpstreamState, R>(&mut self, change: impl FnOnce(&mut S) -> R) -> R {
        let mut state = self.upstream_state::<S>();
        let result = change(&mut state);
        if state == S::default() {
            self.upstream = None;
            return result;
        }
        self.upstream = match serde_json::to_value(&state) {
            Ok(state) => Some(UpstreamSlot {
                owner: S::OWNER.to_owned(),
                state,
            }),
            Err(error) => {
                tracing::error!(
                    owner = S::OWNER,
                    "an upstream state cannot be stored: {error}"
                );
                None
            }
        };
        result
    }
}

/// What a store answers for a record that is larger than `max_record` even without its messages.
fn not_kept(bytes: usize, max_record: usize) -> crate::error::Error {
    crate::error::Error::internal(format!(
        "the conversation record takes {bytes} bytes without its messages, more than store.max_record \
         ({max_record}); it is not kept"
    ))
}

/// The bytes a record takes: its JSON length (what a persistent backend would write; memory is close).
pub fn record_bytes(record: &Record) -> usize {
    json_len(record)
}

/// Fits a record within `max_record` bytes by dropping the oldest messages of its log (and a tool result
/// left first without its call): the conversation goes on with a shorter memory rather than not at all.
/// The record's size after; more than `max_record` only when what is left besides the log is that large.
pub fn fit_record(record: &mut Record, max_record: usize) -> usize {
    let mut bytes = record_bytes(record);
    if bytes <= max_record {
        return bytes;
    }
    let before = record.log.len();
    let mut drop = 0;
    while bytes > max_record && drop < record.log.len() {
        // The message and its comma.
        bytes = bytes.saturating_sub(json_len(&record.log[drop]) + 1);
        drop += 1;
    }
    while record
        .log
        .get(drop)
        .is_some_and(|message| message.role == crate::model::Role::Tool)
    {
        bytes = bytes.saturating_sub(json_len(&record.log[drop]) + 1);
        drop += 1;
    }
    record.log.drain(..drop);
    tracing::warn!(
        max_record,
        dropped = drop,
        kept = before - drop,
        "a conversation outgrew store.max_record; its oldest messages were dropped"
    );
    record_bytes(record)
}

/// Where an inbound's own document lives (an A2A task, the latest task of an A2A context): a kind of the
/// inbound's naming, and the route, tenant and id it belongs to. Another tenant's document is another key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DocumentKey {
    pub kind: &'static str,
    pub route: String,
    pub tenant: String,
    pub id: String,
}

/// A conversation store backend.
pub trait Store: Send + Sync {
    fn load<'a>(&'a self, key: &'a Key) -> BoxFuture<'a, Result<Option<Record>>>;
    fn save<'a>(&'a self, key: &'a Key, record: Record) -> BoxFuture<'a, Result<()>>;
    /// Makes room for the new conversation `key` within `per_tenant` conversations of its tenant on its
    /// route (`[routes.quota]` conversations): the tenant's own record touched longest ago goes, never one
    /// with pending interrupts; when all of them are paused the new conversation is refused (too many).
    fn admit<'a>(&'a self, key: &'a Key, per_tenant: usize) -> BoxFuture<'a, Result<()>>;
    /// Whether the store answers now (`/readyz`); a store in this process always does.
    fn check(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async { Ok(()) })
    }
    /// Whether this backend keeps documents at all (the memory backend does not).
    fn keeps_documents(&self) -> bool {
        true
    }
    /// Whether other processes read and write this store too (Redis): then a run another replica drives
    /// is told from a dead one only by its lease. In a store one process owns (a redb file), a run this
    /// process does not drive is dead.
    fn shared(&self) -> bool {
        false
    }
    /// A document an inbound keeps for itself beside the conversations, so that another replica, or this
    /// one restarted, can serve it; it expires with `idle_ttl` as records do. The memory backend keeps none:
    /// the inbound's own memory already holds it, and nobody else could read it.
    fn load_document<'a>(&'a self, key: &'a DocumentKey) -> BoxFuture<'a, Result<Option<Vec<u8>>>>;
    fn save_document<'a>(
        &'a self,
        key: &'a DocumentKey,
        bytes: Vec<u8>,
    ) -> BoxFuture<'a, Result<()>>;
    /// Saves several documents together: in one write where the store can (one transaction and its sync on
    /// redb; all sent at once on Redis, not atomic: some may be kept when an error is returned), else one
    /// after the other.
    fn save_documents(&self, documents: Vec<(DocumentKey, Vec<u8>)>) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            for (key, bytes) in documents {
                self.save_document(&key, bytes).await?;
            }
            Ok(())
        })
    }
    /// Deletes the document; it no longer counts against its tenant's quota ([`Store::admit_document`]).
    fn delete_document<'a>(&'a self, key: &'a DocumentKey) -> BoxFuture<'a, Result<()>>;
    /// Counts `key`, a document about to be made, among its tenant's documents of its kind on its route,
    /// unless the tenant has `per_tenant` of them already (`[routes.quota]`) and none of them is
    /// `evictable`; else as many as it takes of those go, lowest rank first, then the oldest. A deleted or
    /// expired document no longer counts; one let in counts while it is being made. A store that keeps
    /// documents counts them all, those of a process restarted too; the memory backend keeps none, and its
    /// inbound counts what its own memory holds.
    fn admit_document<'a>(
        &'a self,
        _key: &'a DocumentKey,
        _per_tenant: usize,
        _evictable: Option<Arc<Evictable>>,
    ) -> BoxFuture<'a, Result<Admission>> {
        Box::pin(std::future::ready(Ok(Admission::Admitted(Vec::new()))))
    }
    /// Claims `key` for `lasting`, unless it is claimed: whether this call did. What replicas race to do
    /// once (start a session's next run) is done by the one that claimed it. Where one process owns the
    /// store, that process's own memory decides, and every claim succeeds.
    fn claim<'a>(
        &'a self,
        _key: &'a DocumentKey,
        _lasting: Duration,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(std::future::ready(Ok(true)))
    }
    /// Holds `key` among its tenant's slots of its kind on its route (its runs under way) until `until` (µs
    /// since the epoch), unless `per_tenant` of them are held already (`[routes.quota]` streams): whether
    /// it holds. Only a store replicas share counts; where one process owns the store, the translator counts
    /// in its memory.
    fn enter_slot<'a>(
        &'a self,
        _key: &'a DocumentKey,
        _per_tenant: usize,
        _until: u64,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(std::future::ready(Ok(true)))
    }
    /// Holds the slot `key` until `until`: a slot not renewed lapses (the process holding it died).
    fn renew_slot<'a>(&'a self, _key: &'a DocumentKey, _until: u64) -> BoxFuture<'a, Result<()>> {
        Box::pin(std::future::ready(Ok(())))
    }
    fn leave_slot<'a>(&'a self, _key: &'a DocumentKey) -> BoxFuture<'a, Result<()>> {
        Box::pin(std::future::ready(Ok(())))
    }
    /// Appends `events` to the run log `key`, numbered from `after + 1` (`after` 0 starts the log afresh;
    /// [`APPEND`]: after whatever it holds, for a log several processes add to), and with an `end` marks the
    /// log ended. `durable`: on disk when this returns (redb); otherwise the next
    /// durable append carries it. Whether another process follows the log live (it was told of the
    /// append). The memory backend keeps no log, as it keeps no document.
    fn append_events<'a>(
        &'a self,
        _key: &'a DocumentKey,
        _after: u64,
        _events: Vec<Bytes>,
        _end: Option<LogEnd>,
        _durable: bool,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(std::future::ready(Ok(false)))
    }
    /// Adds `event` after whatever the log `key` holds (a request for the process that writes it), unless
    /// the log ended: whether it was added. Only a store replicas share checks, in the same step: where one
    /// process owns the store, that process writes the log and never pushes to it.
    fn push_event<'a>(&'a self, key: &'a DocumentKey, event: Bytes) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            self.append_events(key, APPEND, vec![event], None, false)
                .await
                .map(|_followed| true)
        })
    }
    /// At most `max` events of the run log `key` after its event `after`; `None` when no such log is kept.
    fn read_events<'a>(
        &'a self,
        _key: &'a DocumentKey,
        _after: u64,
        _max: usize,
    ) -> BoxFuture<'a, Result<Option<LogPage>>> {
        Box::pin(std::future::ready(Ok(None)))
    }
    /// What a follower of the run log `key` waits on between reads: notices of its appends where the
    /// backend has them, else a poll.
    fn watch_log<'a>(&'a self, _key: &'a DocumentKey) -> BoxFuture<'a, LogWatch> {
        Box::pin(std::future::ready(LogWatch::polling()))
    }
}

/// How long a document let in ([`Store::admit_document`]) counts before it is made.
const MAKING: Duration = Duration::from_secs(30);

/// Whether a stored document may go to make room for a new one of its tenant's ([`Store::admit_document`]):
/// `None` when it may not (in use), else its rank (the lowest go first).
pub type Evictable = dyn Fn(&[u8]) -> Option<u8> + Send + Sync;

/// What [`Store::admit_document`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Let in; the ids of the documents deleted to make room for it.
    Admitted(Vec<String>),
    /// The tenant holds its quota, none of it evictable: the ids of those found in use (a run's may have
    /// lost its replica, which only its inbound can tell).
    Refused(Vec<String>),
}

/// The `after` of [`Store::append_events`] that appends after whatever the log holds.
pub const APPEND: u64 = u64::MAX;

/// How a run log ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogEnd {
    /// With every event of its run.
    Whole,
    /// Without some of its run's events (it outgrew its bound, or its writer could not keep them): a
    /// follower reads what was kept, then that the rest is lost.
    Cut,
}

/// A part of a run log, as [`Store::read_events`] reads it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogPage {
    /// The events after the one asked for, in order.
    pub events: Vec<Bytes>,
    /// The log ended, and how: no event comes after its last.
    pub ended: Option<LogEnd>,
}

/// A document ready to be saved ([`Documents::encode`]).
pub struct Encoded(DocumentKey, Vec<u8>);

/// One route's documents, for its inbound: the store it keeps them in, and the route's name.
#[derive(Clone)]
pub struct Documents {
    store: Arc<dyn Store>,
    route: String,
    open_logs: Arc<OpenLogs>,
}

impl Documents {
    pub fn new(store: Arc<dyn Store>, route: &str) -> Self {
        Self {
            store,
            route: route.to_owned(),
            open_logs: Arc::default(),
        }
    }

    /// The same, writing its run logs among `open_logs` (a route's, kept across its live reloads).
    pub fn with_open_logs(self, open_logs: Arc<OpenLogs>) -> Self {
        Self { open_logs, ..self }
    }

    /// Documents kept nowhere but the inbound's memory (tests, the memory backend).
    pub fn in_memory() -> Self {
        Self::new(Arc::new(MemoryStore::new(std::time::Duration::MAX)), "")
    }

    /// Whether documents are kept anywhere but the inbound's memory: when not, an inbound need not make
    /// them.
    pub fn kept(&self) -> bool {
        self.store.keeps_documents()
    }

    /// Whether other replicas share these documents ([`Store::shared`]).
    pub fn shared(&self) -> bool {
        self.store.shared()
    }

    fn key(&self, kind: &'static str, tenant: &str, id: &str) -> DocumentKey {
        DocumentKey {
            kind,
            route: self.route.clone(),
            tenant: tenant.to_owned(),
            id: id.to_owned(),
        }
    }

    /// The document, decoded; `None` when there is none, or none this version reads (logged).
    pub async fn load<T: DeserializeOwned>(
        &self,
        kind: &'static str,
        tenant: &str,
        id: &str,
    ) -> Result<Option<T>> {
        let Some(bytes) = self
            .store
            .load_document(&self.key(kind, tenant, id))
            .await?
        else {
            return Ok(None);
        };
        Ok(codec::decode(&bytes, &format_args!("{kind} document")))
    }

    /// Whether the store keeps no document `id` at all (one it keeps but this version cannot read is
    /// there: [`Documents::load`] reads it as `None`).
    pub async fn is_absent(&self, kind: &'static str, tenant: &str, id: &str) -> Result<bool> {
        let key = self.key(kind, tenant, id);
        Ok(self.store.load_document(&key).await?.is_none())
    }

    pub async fn save<T: Serialize>(
        &self,
        kind: &'static str,
        tenant: &str,
        id: &str,
        document: &T,
    ) -> Result<()> {
        let Encoded(key, bytes) = self.encode(kind, tenant, id, document);
        self.store.save_document(&key, bytes).await
    }

    /// `document` as [`Documents::save_all`] saves it.
    pub fn encode<T: Serialize>(
        &self,
        kind: &'static str,
        tenant: &str,
        id: &str,
        document: &T,
    ) -> Encoded {
        let bytes = codec::encode(document, local::now_micros(), false);
        Encoded(self.key(kind, tenant, id), bytes)
    }

    /// Saves `documents` together ([`Store::save_documents`]).
    pub async fn save_all(&self, documents: Vec<Encoded>) -> Result<()> {
        let documents = documents
            .into_iter()
            .map(|Encoded(key, bytes)| (key, bytes));
        self.store.save_documents(documents.collect()).await
    }

    pub async fn delete(&self, kind: &'static str, tenant: &str, id: &str) -> Result<()> {
        self.store
            .delete_document(&self.key(kind, tenant, id))
            .await
    }

    /// Claims `kind`/`id` of `tenant` for `lasting`, where replicas share the store ([`Store::claim`]).
    pub async fn claim(
        &self,
        kind: &'static str,
        tenant: &str,
        id: &str,
        lasting: Duration,
    ) -> Result<bool> {
        self.store.claim(&self.key(kind, tenant, id), lasting).await
    }

    /// Counts the tenant's new document `id` of this kind against `per_tenant` of them, where a store keeps
    /// them ([`Store::admit_document`]); none of the others makes room.
    pub async fn admit(
        &self,
        kind: &'static str,
        tenant: &str,
        id: &str,
        per_tenant: usize,
    ) -> Result<Admission> {
        let key = self.key(kind, tenant, id);
        self.store.admit_document(&key, per_tenant, None).await
    }

    /// [`Documents::admit`], where the others of `rank` may make room (lowest first; `None`: in use).
    pub async fn admit_making_room<T: DeserializeOwned + 'static>(
        &self,
        kind: &'static str,
        tenant: &str,
        id: &str,
        per_tenant: usize,
        rank: impl Fn(&T) -> Option<u8> + Send + Sync + 'static,
    ) -> Result<Admission> {
        let key = self.key(kind, tenant, id);
        // One this version cannot read is the first to go.
        let evictable = move |bytes: &[u8]| {
            codec::decode::<T>(bytes, &format_args!("{kind} document"))
                .map_or(Some(0), |d| rank(&d))
        };
        self.store
            .admit_document(&key, per_tenant, Some(Arc::new(evictable)))
            .await
    }
}

/// Opens the configured backend: an error when its file cannot be had or its server cannot be reached.
pub async fn open(config: &StoreConfig) -> Result<Arc<dyn Store>> {
    Ok(match config.backend {
        StoreBackend::Memory => Arc::new(MemoryStore::with_config(config)),
        StoreBackend::Redb => Arc::new(RedbStore::open(config)?),
        StoreBackend::Redis => Arc::new(RedisStore::open(config).await?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
    struct Session {
        id: Option<String>,
        tools: Vec<String>,
    }

    impl UpstreamState for Session {
        const OWNER: &'static str = "one";
        const IDS: &'static [(&'static str, &'static str)] = &[];
    }

    #[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
    struct Context {
        id: Option<String>,
    }

    impl UpstreamState for Context {
        const OWNER: &'static str = "other";
        const IDS: &'static [(&'static str, &'static str)] = &[];
    }

    #[test]
    fn an_upstream_state_is_read_back_as_written_after_the_record_is_stored() {
        let mut record = Record::default();
        record.update_upstream(|session: &mut Session| {
            session.id = Some("s-1".into());
            session.tools.push("paint".into());
        });
        let stored = serde_json::to_string(&record).unwrap();
        let loaded: Record = serde_json::from_str(&stored).unwrap();
        assert_eq!(
            loaded.upstream_state::<Session>(),
            Session {
                id: Some("s-1".into()),
                tools: vec!["paint".into()],
            }
        );
    }

    #[test]
    fn another_outbounds_state_reads_as_a_new_conversation() {
        let mut record = Record::default();
        record.update_upstream(|session: &mut Session| session.id = Some("s-1".into()));
        assert_eq!(record.upstream_state::<Context>(), Context::default());
        record.update_upstream(|context: &mut Context| context.id = Some("c-1".into()));
        assert_eq!(record.upstream_state::<Session>(), Session::default());
    }

    #[test]
    fn a_state_back_at_its_default_takes_no_room() {
        let mut record = Record::default();
        record.update_upstream(|session: &mut Session| session.id = Some("s-1".into()));
        let taken = record.update_upstream(|session: &mut Session| session.id.take());
        assert_eq!(taken.as_deref(), Some("s-1"));
        assert_eq!(record, Record::default());
    }
}
