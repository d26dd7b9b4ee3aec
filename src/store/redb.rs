//! The embedded backend: every record in one redb file, so a restart keeps every conversation, paused runs
//! included. One process opens the file (redb locks it); at start the index of what it holds is rebuilt
//! from the records' headers ([`super::codec`]), and the limits are kept as memory keeps them
//! ([`super::local`]). Each save is one transaction, durable when it returns: a turn's record is there
//! whole after a crash, or not at all.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use ::redb::{
    Database, DatabaseError, Durability, ReadableDatabase, ReadableTable, TableDefinition,
};
use bytes::Bytes;
use futures_util::future::BoxFuture;

use super::local::{micros, now_micros, Bodies, Local, Meta, SWEEP_INTERVAL};
use super::{
    codec, Admission, DocumentKey, Evictable, Key, LogEnd, LogPage, Record, Store, APPEND, MAKING,
};
use crate::config::StoreConfig;
use crate::error::{Error, Result};

/// (route, tenant, conversation) -> the stored record.
const RECORDS: TableDefinition<(&str, &str, &str), &[u8]> = TableDefinition::new("conversations");
/// (kind, route, tenant, id) -> an inbound's stored document.
const DOCUMENTS: TableDefinition<(&str, &str, &str, &str), &[u8]> =
    TableDefinition::new("documents");
/// Run logs: (kind, route, tenant, id, number) to the events one append kept, numbered from `number` on
/// ([`encode_batch`]): a row per append, not per event. Number 0 is the log's header ([`LogHeader`]).
const LOGS: TableDefinition<(&str, &str, &str, &str, u64), &[u8]> =
    TableDefinition::new("run_logs");
/// The previous version's run logs, a row per event: dropped at open. A log is only read again by a
/// client coming back within its run's life, which a restart ended.
const PREVIOUS_LOGS: TableDefinition<(&str, &str, &str, &str, u64), &[u8]> =
    TableDefinition::new("run_events");

type EventKey<'a> = (&'a str, &'a str, &'a str, &'a str, u64);

/// The records in a redb file, and the inbounds' documents beside them.
pub struct RedbStore {
    local: Arc<Local<File>>,
    idle_ttl: u64,
    /// When expired documents were last dropped (µs since the epoch); at most once a minute, on a save.
    documents_swept: AtomicU64,
}

struct File {
    database: Database,
    path: PathBuf,
    /// Documents let in ([`Store::admit_document`]) and not saved yet, and when: they count for
    /// [`MAKING`].
    making: Mutex<HashMap<DocumentKey, u64>>,
}

impl RedbStore {
    /// Opens (or creates) the file at `config.path`, and its folder. A file another process holds, or a
    /// path that cannot be written, is an error naming the file.
    pub fn open(config: &StoreConfig) -> Result<Self> {
        let path = config
            .path
            .as_deref()
            .ok_or_else(|| Error::config("store.path is required for the redb backend"))?;
        if let Some(folder) = path
            .parent()
            .filter(|folder| !folder.as_os_str().is_empty())
        {
            std::fs::create_dir_all(folder).map_err(|error| {
                Error::config(format!(
                    "store.path {}: its folder cannot be created: {error}",
                    path.display()
                ))
            })?;
        }
        let database = Database::create(path).map_err(|error| refused(path, error))?;
        let file = File {
            database,
            path: path.to_owned(),
            making: Mutex::default(),
        };
        let known = file.index()?;
        tracing::info!(
            path = %path.display(),
            conversations = known.len(),
            "conversation store opened"
        );
        Ok(Self {
            local: Arc::new(Local::new(config, file, known)),
            idle_ttl: micros(config.idle_ttl),
            documents_swept: AtomicU64::new(0),
        })
    }

    /// Runs `call` on a blocking thread: a write transaction waits on the disk (its sync).
    fn blocking<'a, T: Send + 'static>(
        &'a self,
        call: impl FnOnce(&Local<File>) -> Result<T> + Send + 'static,
    ) -> BoxFuture<'a, Result<T>> {
        let local = Arc::clone(&self.local);
        Box::pin(async move {
            tokio::task::spawn_blocking(move || call(&local))
                .await
                .map_err(|error| Error::internal(format!("a store call failed: {error}")))?
        })
    }

    /// Runs `call`, a read, on this thread: redb serves it from its cache or the system's, in far less time
    /// than the hop to a blocking thread and back costs (two thread wake-ups). A read never waits for a
    /// sync: it opens a snapshot, and a commit holds what a read needs only while it writes, not while it
    /// syncs. A page in neither cache is read from the disk on this thread (a cold file after a restart).
    fn reading<'a, T: Send + 'a>(
        &'a self,
        call: impl FnOnce(&Local<File>) -> Result<T> + Send + 'a,
    ) -> BoxFuture<'a, Result<T>> {
        Box::pin(async move { call(&self.local) })
    }
}

fn refused(path: &Path, error: DatabaseError) -> Error {
    let why = match error {
        DatabaseError::DatabaseAlreadyOpen => {
            "the file is held by another process (another agent-bridge?); give each replica a file of its \
             own, or share a redis store"
                .to_owned()
        }
        other => format!("it cannot be opened: {other}"),
    };
    Error::config(format!("store.path {}: {why}", path.display()))
}

impl File {
    fn failed(&self, error: impl std::fmt::Display) -> Error {
        Error::internal(format!(
            "the conversation store {} failed: {error}",
            self.path.display()
        ))
    }

    /// What the file holds, by key, from the headers; creates the table in a new file.
    fn index(&self) -> Result<HashMap<Key, Meta>> {
        let write = self.database.begin_write().map_err(|e| self.failed(e))?;
        let mut known = HashMap::new();
        {
            write.open_table(DOCUMENTS).map_err(|e| self.failed(e))?;
            write.open_table(LOGS).map_err(|e| self.failed(e))?;
            write
                .delete_table(PREVIOUS_LOGS)
                .map_err(|e| self.failed(e))?;
            let table = write.open_table(RECORDS).map_err(|e| self.failed(e))?;
            for entry in table.iter().map_err(|e| self.failed(e))? {
                let (key, bytes) = entry.map_err(|e| self.failed(e))?;
                let (route, tenant, conversation) = key.value();
                let bytes = bytes.value();
                // A record of a format this version does not read stays out of the index: absent.
                let Some(header) = codec::header(bytes) else {
                    continue;
                };
                let key = Key {
                    route: route.to_owned(),
                    tenant: tenant.to_owned(),
                    conversation: conversation.to_owned(),
                };
                let meta = Meta {
                    bytes: bytes.len(),
                    touched: header.touched,
                    paused: header.paused,
                };
                known.insert(key, meta);
            }
        }
        write.commit().map_err(|e| self.failed(e))?;
        Ok(known)
    }
}

fn parts(key: &Key) -> (&str, &str, &str) {
    (&key.route, &key.tenant, &key.conversation)
}

impl Bodies for File {
    fn read(&self, key: &Key) -> Result<Option<Record>> {
        let read = self.database.begin_read().map_err(|e| self.failed(e))?;
        let table = read.open_table(RECORDS).map_err(|e| self.failed(e))?;
        let Some(bytes) = table.get(parts(key)).map_err(|e| self.failed(e))? else {
            return Ok(None);
        };
        Ok(codec::decode(
            bytes.value(),
            &format_args!("of route {}", key.route),
        ))
    }

    fn write(&self, put: Option<(&Key, Record, u64)>, gone: &[Key]) -> Result<()> {
        if put.is_none() && gone.is_empty() {
            return Ok(());
        }
        let write = self.database.begin_write().map_err(|e| self.failed(e))?;
        {
            let mut table = write.open_table(RECORDS).map_err(|e| self.failed(e))?;
            for key in gone {
                table.remove(parts(key)).map_err(|e| self.failed(e))?;
            }
            if let Some((key, record, touched)) = put {
                let bytes = codec::encode(&record, touched, record.is_paused());
                table
                    .insert(parts(key), bytes.as_slice())
                    .map_err(|e| self.failed(e))?;
            }
        }
        write.commit().map_err(|e| self.failed(e))
    }
}

fn document_parts(key: &DocumentKey) -> (&str, &str, &str, &str) {
    (key.kind, &key.route, &key.tenant, &key.id)
}

/// Whether a document's bytes were written less than `idle_ttl` before `now`. Bytes of a format this proxy
/// does not read count as live: the read that decodes them logs them and treats them as absent.
fn is_live(bytes: &[u8], now: u64, idle_ttl: u64) -> bool {
    codec::header(bytes).is_none_or(|header| now.saturating_sub(header.touched) < idle_ttl)
}

impl File {
    fn load_document(&self, key: &DocumentKey, idle_ttl: u64) -> Result<Option<Vec<u8>>> {
        let read = self.database.begin_read().map_err(|e| self.failed(e))?;
        let table = read.open_table(DOCUMENTS).map_err(|e| self.failed(e))?;
        let found = table.get(document_parts(key)).map_err(|e| self.failed(e))?;
        let now = now_micros();
        Ok(found
            .map(|bytes| bytes.value().to_vec())
            .filter(|bytes| is_live(bytes, now, idle_ttl)))
    }

    /// Keeps each document of `writes` (or forgets it, when `None`) in one transaction; with `sweep`, also
    /// drops every document idle for longer than `idle_ttl`.
    fn write_documents(
        &self,
        writes: &[(DocumentKey, Option<Vec<u8>>)],
        sweep: Option<u64>,
    ) -> Result<()> {
        let write = self.database.begin_write().map_err(|e| self.failed(e))?;
        if let Some(idle_ttl) = sweep {
            sweep_expired(&write, idle_ttl).map_err(|e| self.failed(e))?;
        }
        {
            let mut table = write.open_table(DOCUMENTS).map_err(|e| self.failed(e))?;
            for (key, put) in writes {
                match put {
                    Some(bytes) => table
                        .insert(document_parts(key), bytes.as_slice())
                        .map(drop),
                    None => table.remove(document_parts(key)).map(drop),
                }
                .map_err(|e| self.failed(e))?;
            }
        }
        // Taken before the commit: no admission finds the document gone from the file yet still being made.
        let mut making = self.making();
        write.commit().map_err(|e| self.failed(e))?;
        for (key, _) in writes {
            making.remove(key);
        }
        Ok(())
    }

    fn making(&self) -> MutexGuard<'_, HashMap<DocumentKey, u64>> {
        self.making.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// [`Store::admit_document`] in one write transaction, so that no save crosses it: the tenant's other
    /// live documents of the kind count, and those let in and being made; those `evictable` ranks lowest,
    /// then those saved longest ago, make room.
    fn admit_document(
        &self,
        key: &DocumentKey,
        per_tenant: usize,
        evictable: Option<&Evictable>,
        idle_ttl: u64,
    ) -> Result<Admission> {
        let (kind, route, tenant, _) = document_parts(key);
        let write = self.database.begin_write().map_err(|e| self.failed(e))?;
        let now = now_micros();
        let mut making = self.making();
        making.retain(|_, let_in| now.saturating_sub(*let_in) < micros(MAKING));
        let evicted = {
            let mut table = write.open_table(DOCUMENTS).map_err(|e| self.failed(e))?;
            let mut kept =
                live_documents(&table, key, now, idle_ttl).map_err(|e| self.failed(e))?;
            // Let in and not saved since (new, or continued and kept as it was before): held, as one in
            // use is.
            let mut held: Vec<String> = making
                .keys()
                .filter(|made| is_sibling(made, key))
                .map(|made| made.id.clone())
                .collect();
            kept.retain(|(id, _)| !held.contains(id));
            let excess = (kept.len() + held.len() + 1).saturating_sub(per_tenant);
            let mut candidates = Vec::new();
            for (id, saved) in kept.into_iter().filter(|_| excess > 0) {
                let bytes = table
                    .get((kind, route, tenant, id.as_str()))
                    .map_err(|e| self.failed(e))?;
                let rank = bytes
                    .zip(evictable)
                    .and_then(|(bytes, rank)| rank(bytes.value()));
                match rank {
                    Some(rank) => candidates.push((rank, saved, id)),
                    None => held.push(id),
                }
            }
            if candidates.len() < excess {
                return Ok(Admission::Refused(held));
            }
            candidates.sort_unstable();
            let evicted: Vec<String> = candidates.into_iter().take(excess).map(|c| c.2).collect();
            for id in &evicted {
                table
                    .remove((kind, route, tenant, id.as_str()))
                    .map_err(|e| self.failed(e))?;
            }
            evicted
        };
        if !evicted.is_empty() {
            write.commit().map_err(|e| self.failed(e))?;
        }
        making.insert(key.clone(), now);
        Ok(Admission::Admitted(evicted))
    }
}

/// Whether `other` is a document of `key`'s kind, route and tenant other than `key`.
fn is_sibling(other: &DocumentKey, key: &DocumentKey) -> bool {
    (other.kind, &other.route, &other.tenant) == (key.kind, &key.route, &key.tenant)
        && other.id != key.id
}

/// The ids of the documents of `key`'s kind, route and tenant but `key`'s that are not idle past
/// `idle_ttl`, and when each was saved.
fn live_documents(
    table: &impl ReadableTable<(&'static str, &'static str, &'static str, &'static str), &'static [u8]>,
    key: &DocumentKey,
    now: u64,
    idle_ttl: u64,
) -> std::result::Result<Vec<(String, u64)>, ::redb::StorageError> {
    let (kind, route, tenant, _) = document_parts(key);
    let mut live = Vec::new();
    for entry in table.range((kind, route, tenant, "")..)? {
        let (found, bytes) = entry?;
        let (found_kind, found_route, found_tenant, id) = found.value();
        if (found_kind, found_route, found_tenant) != (kind, route, tenant) {
            break;
        }
        let bytes = bytes.value();
        if id != key.id && is_live(bytes, now, idle_ttl) {
            // A document of a format this version does not read is the oldest.
            live.push((id.to_owned(), codec::header(bytes).map_or(0, |h| h.touched)));
        }
    }
    Ok(live)
}

/// A run log's number 0: whether and how it ended, when it was last appended to (µs since the epoch), and
/// the number of its last event.
struct LogHeader {
    ended: Option<LogEnd>,
    touched: u64,
    last: u64,
}

impl LogHeader {
    fn encode(&self) -> [u8; 17] {
        let mut bytes = [0; 17];
        bytes[0] = match self.ended {
            None => 0,
            Some(LogEnd::Whole) => 1,
            Some(LogEnd::Cut) => 2,
        };
        bytes[1..9].copy_from_slice(&self.touched.to_le_bytes());
        bytes[9..].copy_from_slice(&self.last.to_le_bytes());
        bytes
    }

    fn decode(bytes: &[u8]) -> Option<Self> {
        let (&ended, rest) = bytes.split_first()?;
        let (touched, last) = rest.split_first_chunk::<8>()?;
        Some(Self {
            ended: match ended {
                0 => None,
                2 => Some(LogEnd::Cut),
                _ => Some(LogEnd::Whole),
            },
            touched: u64::from_le_bytes(*touched),
            last: u64::from_le_bytes(last.try_into().ok()?),
        })
    }
}

/// One append's events in one row: each as its length (u32, little-endian), then its bytes.
fn encode_batch(events: &[Bytes]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(events.iter().map(|event| 4 + event.len()).sum());
    for event in events {
        // A run log keeps at most 16 MiB ([`super::runlog`]): an event's length fits.
        let len = u32::try_from(event.len()).unwrap_or(u32::MAX);
        bytes.extend_from_slice(&len.to_le_bytes());
        bytes.extend_from_slice(event);
    }
    bytes
}

/// The events of a row [`encode_batch`] wrote, in order.
fn batch_events(mut bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    std::iter::from_fn(move || {
        let (len, rest) = bytes.split_first_chunk::<4>()?;
        let len = u32::from_le_bytes(*len) as usize;
        let event = rest.get(..len)?;
        bytes = &rest[len..];
        Some(event)
    })
}

fn event_key(key: &DocumentKey, number: u64) -> EventKey<'_> {
    (key.kind, &key.route, &key.tenant, &key.id, number)
}

/// Drops the documents and run logs last written `idle_ttl` ago or more.
fn sweep_expired(
    write: &::redb::WriteTransaction,
    idle_ttl: u64,
) -> std::result::Result<(), ::redb::Error> {
    let now = now_micros();
    write.open_table(DOCUMENTS)?.retain(|_, bytes| {
        codec::header(bytes).is_some_and(|header| now.saturating_sub(header.touched) < idle_ttl)
    })?;
    sweep_logs(&mut write.open_table(LOGS)?, idle_ttl)?;
    Ok(())
}

/// Drops the run logs last appended to `idle_ttl` ago or more.
fn sweep_logs(
    table: &mut ::redb::Table<EventKey<'static>, &'static [u8]>,
    idle_ttl: u64,
) -> std::result::Result<(), ::redb::StorageError> {
    let now = now_micros();
    let mut stale = std::collections::HashSet::new();
    for entry in table.iter()? {
        let (key, bytes) = entry?;
        let (kind, route, tenant, id, number) = key.value();
        let old = LogHeader::decode(bytes.value())
            .is_none_or(|header| now.saturating_sub(header.touched) >= idle_ttl);
        if number == 0 && old {
            stale.insert(log_name(kind, route, tenant, id));
        }
    }
    if stale.is_empty() {
        return Ok(());
    }
    table.retain(|(kind, route, tenant, id, _), _| {
        !stale.contains(&log_name(kind, route, tenant, id))
    })
}

fn log_name(kind: &str, route: &str, tenant: &str, id: &str) -> [String; 4] {
    [kind, route, tenant, id].map(str::to_owned)
}

impl File {
    fn append_events(
        &self,
        key: &DocumentKey,
        after: u64,
        events: &[Bytes],
        end: Option<LogEnd>,
        durable: bool,
        sweep: Option<u64>,
    ) -> Result<()> {
        let mut write = self.database.begin_write().map_err(|e| self.failed(e))?;
        if !durable {
            // Batches as the run streams; the run's end (or a pause) commits them to disk.
            write
                .set_durability(Durability::None)
                .map_err(|e| self.failed(e))?;
        }
        if let Some(idle_ttl) = sweep {
            sweep_expired(&write, idle_ttl).map_err(|e| self.failed(e))?;
        }
        {
            let mut table = write.open_table(LOGS).map_err(|e| self.failed(e))?;
            let after = match after {
                0 => {
                    table
                        .retain_in(event_key(key, 0)..=event_key(key, u64::MAX), |_, _| false)
                        .map_err(|e| self.failed(e))?;
                    0
                }
                APPEND => table
                    .get(event_key(key, 0))
                    .map_err(|e| self.failed(e))?
                    .and_then(|header| LogHeader::decode(header.value()))
                    .map_or(0, |header| header.last),
                after => after,
            };
            if !events.is_empty() {
                table
                    .insert(event_key(key, after + 1), encode_batch(events).as_slice())
                    .map_err(|e| self.failed(e))?;
            }
            let header = LogHeader {
                ended: end,
                touched: now_micros(),
                last: after + events.len() as u64,
            };
            table
                .insert(event_key(key, 0), header.encode().as_slice())
                .map_err(|e| self.failed(e))?;
        }
        write.commit().map_err(|e| self.failed(e))
    }

    fn read_events(
        &self,
        key: &DocumentKey,
        after: u64,
        max: usize,
        idle_ttl: u64,
    ) -> Result<Option<LogPage>> {
        let read = self.database.begin_read().map_err(|e| self.failed(e))?;
        let table = read.open_table(LOGS).map_err(|e| self.failed(e))?;
        let header = table.get(event_key(key, 0)).map_err(|e| self.failed(e))?;
        let Some(header) = header
            .and_then(|bytes| LogHeader::decode(bytes.value()))
            .filter(|header| now_micros().saturating_sub(header.touched) < idle_ttl)
        else {
            return Ok(None);
        };
        let wanted = after.saturating_add(1);
        if wanted > header.last {
            return Ok(Some(LogPage {
                events: Vec::new(),
                ended: header.ended,
            }));
        }
        // The row holding event `wanted`: the last one numbered at or before it.
        let holding = table
            .range(event_key(key, 1)..=event_key(key, wanted))
            .map_err(|e| self.failed(e))?
            .next_back()
            .transpose()
            .map_err(|e| self.failed(e))?
            .map_or(wanted, |(first, _)| first.value().4);
        let mut events = Vec::new();
        for entry in table
            .range(event_key(key, holding)..=event_key(key, header.last))
            .map_err(|e| self.failed(e))?
        {
            let (first, bytes) = entry.map_err(|e| self.failed(e))?;
            let numbered = (first.value().4..).zip(batch_events(bytes.value()));
            let new = numbered.filter(|(number, _)| *number >= wanted);
            events.extend(new.map(|(_, event)| Bytes::copy_from_slice(event)));
            if events.len() >= max {
                break;
            }
        }
        events.truncate(max);
        let ended = header
            .ended
            .filter(|_| after + events.len() as u64 >= header.last);
        Ok(Some(LogPage { events, ended }))
    }
}

impl RedbStore {
    /// Whether this save should also sweep the expired documents (at most once a minute).
    fn sweep_due(&self) -> Option<u64> {
        let now = now_micros();
        let last = self.documents_swept.load(Ordering::Relaxed);
        let due = now.saturating_sub(last) >= SWEEP_INTERVAL.min(self.idle_ttl)
            && self
                .documents_swept
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok();
        due.then_some(self.idle_ttl)
    }
}

impl Store for RedbStore {
    fn load_document<'a>(&'a self, key: &'a DocumentKey) -> BoxFuture<'a, Result<Option<Vec<u8>>>> {
        let idle_ttl = self.idle_ttl;
        self.reading(move |local| local.bodies.load_document(key, idle_ttl))
    }

    fn save_document<'a>(
        &'a self,
        key: &'a DocumentKey,
        bytes: Vec<u8>,
    ) -> BoxFuture<'a, Result<()>> {
        self.save_documents(vec![(key.clone(), bytes)])
    }

    fn save_documents(&self, documents: Vec<(DocumentKey, Vec<u8>)>) -> BoxFuture<'_, Result<()>> {
        let writes: Vec<_> = documents
            .into_iter()
            .map(|(key, bytes)| (key, Some(bytes)))
            .collect();
        let sweep = self.sweep_due();
        self.blocking(move |local| local.bodies.write_documents(&writes, sweep))
    }

    fn delete_document<'a>(&'a self, key: &'a DocumentKey) -> BoxFuture<'a, Result<()>> {
        let writes = [(key.clone(), None)];
        self.blocking(move |local| local.bodies.write_documents(&writes, None))
    }

    fn admit_document<'a>(
        &'a self,
        key: &'a DocumentKey,
        per_tenant: usize,
        evictable: Option<Arc<Evictable>>,
    ) -> BoxFuture<'a, Result<Admission>> {
        let (key, idle_ttl) = (key.clone(), self.idle_ttl);
        self.blocking(move |local| {
            let evictable = evictable.as_deref();
            local
                .bodies
                .admit_document(&key, per_tenant, evictable, idle_ttl)
        })
    }

    fn append_events<'a>(
        &'a self,
        key: &'a DocumentKey,
        after: u64,
        events: Vec<Bytes>,
        end: Option<LogEnd>,
        durable: bool,
    ) -> BoxFuture<'a, Result<bool>> {
        let (key, sweep) = (key.clone(), self.sweep_due());
        // Nobody follows a log live in a file one process owns but this process, which writes it.
        self.blocking(move |local| {
            local
                .bodies
                .append_events(&key, after, &events, end, durable, sweep)
                .map(|()| false)
        })
    }

    fn read_events<'a>(
        &'a self,
        key: &'a DocumentKey,
        after: u64,
        max: usize,
    ) -> BoxFuture<'a, Result<Option<LogPage>>> {
        let idle_ttl = self.idle_ttl;
        self.reading(move |local| local.bodies.read_events(key, after, max, idle_ttl))
    }

    fn load<'a>(&'a self, key: &'a Key) -> BoxFuture<'a, Result<Option<Record>>> {
        let key = key.clone();
        self.blocking(move |local| local.load(&key))
    }

    fn save<'a>(&'a self, key: &'a Key, record: Record) -> BoxFuture<'a, Result<()>> {
        let key = key.clone();
        self.blocking(move |local| local.save(&key, record))
    }

    fn admit<'a>(&'a self, key: &'a Key, per_tenant: usize) -> BoxFuture<'a, Result<()>> {
        let key = key.clone();
        self.blocking(move |local| local.admit(&key, per_tenant))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn config(path: &Path) -> StoreConfig {
        StoreConfig {
            backend: crate::config::StoreBackend::Redb,
            path: Some(path.to_owned()),
            idle_ttl: Duration::from_secs(60),
            ..StoreConfig::default()
        }
    }

    fn temp_file(name: &str) -> PathBuf {
        let folder = std::env::temp_dir().join(format!(
            "agent-bridge-redb-{name}-{}-{}",
            std::process::id(),
            super::super::local::now_micros()
        ));
        folder.join("nested").join("conversations.redb")
    }

    fn key(conversation: &str) -> Key {
        Key {
            route: "r:{1}".into(),
            tenant: "acme".into(),
            conversation: conversation.into(),
        }
    }

    fn paused() -> Record {
        let mut record = Record::default();
        record.pending_interrupts.push(crate::model::Interrupt {
            id: "i-1".into(),
            kind: crate::model::InterruptKind::Question {
                text: "Which city?".into(),
                options: vec![],
            },
        });
        record
    }

    #[tokio::test]
    async fn records_survive_closing_the_file_and_keep_their_pause() {
        let path = temp_file("reopen");
        let store = RedbStore::open(&config(&path)).unwrap();
        store.save(&key("paused"), paused()).await.unwrap();
        let mut plain = Record::default();
        plain.sent.push("m-1".into());
        store.save(&key("plain"), plain.clone()).await.unwrap();
        drop(store);

        let reopened = RedbStore::open(&config(&path)).unwrap();
        assert_eq!(reopened.load(&key("paused")).await.unwrap(), Some(paused()));
        assert_eq!(reopened.load(&key("plain")).await.unwrap(), Some(plain));
        assert_eq!(reopened.load(&key("other")).await.unwrap(), None);
        // The index was rebuilt from the file: the paused record still counts as paused.
        reopened.admit(&key("new"), 2).await.unwrap();
        assert_eq!(reopened.load(&key("plain")).await.unwrap(), None, "evicted");
        assert!(reopened.load(&key("paused")).await.unwrap().is_some());
        drop(reopened);
        let _ = std::fs::remove_dir_all(path.parent().unwrap().parent().unwrap());
    }

    #[test]
    fn a_file_held_by_another_store_is_an_error_naming_it() {
        let path = temp_file("held");
        let _held = RedbStore::open(&config(&path)).unwrap();
        let error = RedbStore::open(&config(&path)).err().unwrap();
        assert_eq!(error.code(), "CONFIG_ERROR");
        assert!(
            error.message().contains(&path.display().to_string()),
            "{error}"
        );
        assert!(error.message().contains("another process"), "{error}");
        let _ = std::fs::remove_dir_all(path.parent().unwrap().parent().unwrap());
    }

    #[test]
    fn a_path_that_cannot_be_written_is_an_error_naming_it() {
        let blocker = temp_file("blocked");
        let folder = blocker.parent().unwrap().parent().unwrap().to_owned();
        std::fs::create_dir_all(&folder).unwrap();
        // A plain file where the store's folder should be.
        std::fs::write(folder.join("nested"), b"not a folder").unwrap();
        let error = RedbStore::open(&config(&blocker)).err().unwrap();
        assert!(
            error.message().contains(&blocker.display().to_string()),
            "{error}"
        );
        let _ = std::fs::remove_dir_all(&folder);
    }

    #[tokio::test]
    async fn documents_are_kept_per_kind_route_and_tenant_until_deleted_or_idle() {
        let path = temp_file("documents");
        let store = RedbStore::open(&config(&path)).unwrap();
        let key = |kind: &'static str, tenant: &str| DocumentKey {
            kind,
            route: "r".into(),
            tenant: tenant.into(),
            id: "task-1".into(),
        };
        store
            .save_document(&key("a2a-task", "acme"), b"kept".to_vec())
            .await
            .unwrap();
        let kept = store.load_document(&key("a2a-task", "acme")).await.unwrap();
        assert_eq!(kept.as_deref(), Some(&b"kept"[..]));
        assert_eq!(
            store
                .load_document(&key("a2a-task", "other"))
                .await
                .unwrap(),
            None
        );
        assert_eq!(
            store
                .load_document(&key("a2a-context", "acme"))
                .await
                .unwrap(),
            None
        );
        store
            .delete_document(&key("a2a-task", "acme"))
            .await
            .unwrap();
        assert_eq!(
            store.load_document(&key("a2a-task", "acme")).await.unwrap(),
            None
        );
        drop(store);

        let brief = StoreConfig {
            idle_ttl: Duration::from_millis(20),
            ..config(&path)
        };
        let store = RedbStore::open(&brief).unwrap();
        let bytes = codec::encode(&"old", now_micros(), false);
        store
            .save_document(&key("a2a-task", "acme"), bytes)
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(40)).await;
        assert_eq!(
            store.load_document(&key("a2a-task", "acme")).await.unwrap(),
            None,
            "idle"
        );
        drop(store);
        let _ = std::fs::remove_dir_all(path.parent().unwrap().parent().unwrap());
    }

    /// A document whose bytes say whether it may make room: `done` first, then `paused`; `running` not.
    fn task(state: &str, saved: u64) -> Vec<u8> {
        codec::encode(&state, saved, false)
    }

    fn rank_by_state() -> Option<Arc<Evictable>> {
        Some(Arc::new(|bytes: &[u8]| {
            match codec::decode::<String>(bytes, &"task")?.as_str() {
                "done" => Some(0),
                "paused" => Some(1),
                _ => None,
            }
        }))
    }

    /// The ids a refusal found in use, sorted; a failure if it admitted.
    fn held(admission: Admission) -> Vec<String> {
        let Admission::Refused(mut held) = admission else {
            panic!("admitted past the quota: {admission:?}");
        };
        held.sort();
        held
    }

    #[tokio::test]
    async fn a_tenants_documents_are_counted_from_the_file_the_lowest_ranked_oldest_making_room() {
        let path = temp_file("admit");
        let store = RedbStore::open(&config(&path)).unwrap();
        let key = |tenant: &str, id: &str| DocumentKey {
            kind: "a2a-task",
            route: "r".into(),
            tenant: tenant.into(),
            id: id.into(),
        };
        let now = now_micros();
        let kept = [("old-done", "done", now - 3), ("done", "done", now - 2)];
        for (id, state, saved) in kept.into_iter().chain([("paused", "paused", now - 4)]) {
            let bytes = task(state, saved);
            store.save_document(&key("acme", id), bytes).await.unwrap();
        }
        store
            .save_document(&key("other", "x"), task("done", now))
            .await
            .unwrap();
        drop(store);

        // Reopened: what the file kept counts. The finished tasks go before the paused one, oldest first.
        let store = RedbStore::open(&config(&path)).unwrap();
        let admitted = store
            .admit_document(&key("acme", "new"), 2, rank_by_state())
            .await
            .unwrap();
        assert_eq!(
            admitted,
            Admission::Admitted(vec!["old-done".into(), "done".into()])
        );
        assert_eq!(
            store.load_document(&key("acme", "done")).await.unwrap(),
            None
        );
        assert!(store
            .load_document(&key("other", "x"))
            .await
            .unwrap()
            .is_some());

        // `new`, let in and not saved yet, counts and is held; the paused task makes room.
        let admitted = store
            .admit_document(&key("acme", "newer"), 2, rank_by_state())
            .await
            .unwrap();
        assert_eq!(admitted, Admission::Admitted(vec!["paused".into()]));
        for id in ["new", "newer"] {
            let bytes = task("running", now_micros());
            store.save_document(&key("acme", id), bytes).await.unwrap();
        }
        let refused = store
            .admit_document(&key("acme", "third"), 2, rank_by_state())
            .await
            .unwrap();
        assert_eq!(held(refused), ["new", "newer"]);
        // A document already kept (a task continued) counts once.
        let continued = store
            .admit_document(&key("acme", "new"), 2, rank_by_state())
            .await
            .unwrap();
        assert_eq!(continued, Admission::Admitted(vec![]));

        // A paused task continued is held until its run saves it: a new one does not push it out.
        store.delete_document(&key("acme", "new")).await.unwrap();
        let bytes = task("paused", now_micros());
        store
            .save_document(&key("acme", "waiting"), bytes)
            .await
            .unwrap();
        let continued = store
            .admit_document(&key("acme", "waiting"), 2, rank_by_state())
            .await
            .unwrap();
        assert_eq!(continued, Admission::Admitted(vec![]));
        let refused = store
            .admit_document(&key("acme", "fourth"), 2, rank_by_state())
            .await
            .unwrap();
        assert_eq!(held(refused), ["newer", "waiting"]);
        drop(store);
        let _ = std::fs::remove_dir_all(path.parent().unwrap().parent().unwrap());
    }

    #[tokio::test]
    async fn a_record_that_does_not_decode_reads_as_absent() {
        let path = temp_file("corrupt");
        let store = RedbStore::open(&config(&path)).unwrap();
        store.save(&key("c"), Record::default()).await.unwrap();
        {
            let write = store.local.bodies.database.begin_write().unwrap();
            {
                let mut table = write.open_table(RECORDS).unwrap();
                let mut bytes =
                    codec::encode(&Record::default(), super::super::local::now_micros(), false);
                bytes.truncate(bytes.len() - 1);
                table.insert(parts(&key("c")), bytes.as_slice()).unwrap();
            }
            write.commit().unwrap();
        }
        assert_eq!(store.load(&key("c")).await.unwrap(), None);
        store.save(&key("c"), paused()).await.unwrap();
        assert_eq!(store.load(&key("c")).await.unwrap(), Some(paused()));
        drop(store);
        let _ = std::fs::remove_dir_all(path.parent().unwrap().parent().unwrap());
    }

    #[tokio::test]
    async fn a_run_log_reads_from_any_event_across_the_appends_that_kept_it() {
        let path = temp_file("log");
        let store = RedbStore::open(&config(&path)).unwrap();
        let key = DocumentKey {
            kind: "run",
            route: "r".into(),
            tenant: "acme".into(),
            id: "1".into(),
        };
        let events = |numbers: std::ops::RangeInclusive<u64>| -> Vec<Bytes> {
            numbers.map(|n| Bytes::from(format!("event {n}"))).collect()
        };
        let page = |events: Vec<Bytes>, ended| Some(LogPage { events, ended });
        store
            .append_events(&key, 0, Vec::new(), None, false)
            .await
            .unwrap();
        for (numbers, end) in [(1..=3, None), (4..=4, None), (5..=9, Some(LogEnd::Cut))] {
            store
                .append_events(&key, APPEND, events(numbers), end, end.is_some())
                .await
                .unwrap();
        }
        let cut = Some(LogEnd::Cut);
        for after in 0..=9 {
            let read = store.read_events(&key, after, 100).await.unwrap();
            assert_eq!(read, page(events(after + 1..=9), cut), "after {after}");
        }
        let read = store.read_events(&key, 2, 3).await.unwrap();
        assert_eq!(
            read,
            page(events(3..=5), None),
            "a page of 3 from the middle"
        );
        let read = store.read_events(&key, 6, 3).await.unwrap();
        assert_eq!(read, page(events(7..=9), cut), "the last page");

        store
            .append_events(&key, 0, Vec::new(), None, false)
            .await
            .unwrap();
        let read = store.read_events(&key, 0, 100).await.unwrap();
        assert_eq!(read, page(Vec::new(), None), "started afresh");
        drop(store);
        let _ = std::fs::remove_dir_all(path.parent().unwrap().parent().unwrap());
    }
}
