//! The conversation store: one record per (route, tenant, conversation), holding what the proxy must
//! remember between turns. It knows no protocol: outbounds keep their upstream identities under keys of
//! their own choosing.

mod memory;

use std::collections::BTreeMap;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};

use crate::config::{StoreBackend, StoreConfig};
use crate::error::{Error, Result};
use crate::model::{Interrupt, Message};
use crate::size::json_len;

pub use memory::MemoryStore;

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
    /// Upstream identities learned so far (an A2A contextId, a CMDC session id, ...), keyed by the outbound.
    #[serde(default)]
    pub upstream: BTreeMap<String, String>,
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

/// A conversation store backend.
pub trait Store: Send + Sync {
    fn load<'a>(&'a self, key: &'a Key) -> BoxFuture<'a, Result<Option<Record>>>;
    fn save<'a>(&'a self, key: &'a Key, record: Record) -> BoxFuture<'a, Result<()>>;
    /// Makes room for the new conversation `key` within `per_tenant` conversations of its tenant on its
    /// route (`[routes.quota]` conversations): the tenant's own record touched longest ago goes, never one
    /// with pending interrupts; when all of them are paused the new conversation is refused (too many).
    fn admit<'a>(&'a self, key: &'a Key, per_tenant: usize) -> BoxFuture<'a, Result<()>>;
}

/// Opens the configured backend.
pub fn open(config: &StoreConfig) -> Result<Arc<dyn Store>> {
    match config.backend {
        StoreBackend::Memory => Ok(Arc::new(
            MemoryStore::new(config.idle_ttl).with_limits(config.max_record, config.max_bytes),
        )),
        StoreBackend::Redb | StoreBackend::Redis => Err(Error::config(
            "store backends redb and redis are not available yet; use backend = \"memory\"",
        )),
    }
}
