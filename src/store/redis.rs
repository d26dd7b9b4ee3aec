//! The shared backend: the records in Redis, so that several replicas behind a balancer serve one
//! conversation, and a restart of any of them forgets nothing.
//!
//! Keys (every part escaped, so that a client id or a tenant claim holding `:`, `{` or `/` cannot reach
//! another's key):
//! - `agent-bridge:{route/tenant/conversation}:record`: the record ([`super::codec`]), expiring `idle_ttl`
//!   after its last load or save. One conversation's keys share the hash tag in braces, so a Redis Cluster
//!   keeps them on one node.
//! - `agent-bridge:{route/tenant}:idle` and `...:paused`: the tenant's conversations by when they were last
//!   saved, for its conversations quota, which is counted here and so across replicas.
//! - `agent-bridge:{route/tenant/kind/id}:document`: an inbound's document (a lease is one too), and
//!   `...:claim`: what one replica claimed to do (`SET NX PX`).
//! - `agent-bridge:{route/tenant}:counted/kind`: the tenant's documents of a kind that count against its
//!   quota (CMDC sessions, A2A tasks), so that it is counted across replicas too.
//! - `agent-bridge:{route/tenant}:held/kind`: the tenant's runs under way (`[routes.quota]` streams), each
//!   until its lease lapses, renewed while it runs.
//! - `agent-bridge:{route/tenant/kind/id}:events` (a list) and `...:ended`: a run log; each append publishes
//!   a notice on the channel `...:appended` ([`super::notices`]).
//!
//! `store.max_bytes` is Redis's own `maxmemory` here; start-up warns when its policy may evict a record
//! (an evicted paused run is a lost conversation). When Redis cannot be reached a turn fails at once with
//! [`Error::store_unavailable`]; the connection comes back by itself.
//!
//! `store.url` may name any node of a Redis Cluster: start-up asks the node (`INFO cluster`), and on a
//! cluster the proxy talks to every node, each command sent to the node of its key's slot. A cluster runs
//! a pipeline or a multi-key command only within one slot, so no pipeline here mixes two hash tags:
//! commands on keys of different tags go at once, each on its own (in one atomic step only where they
//! share a tag).

use std::sync::Arc;
use std::time::Duration;

use ::redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use ::redis::cluster::ClusterClient;
use ::redis::cluster_async::ClusterConnection;
use ::redis::cluster_routing::{MultipleNodeRoutingInfo, ResponsePolicy, RoutingInfo};
use ::redis::{Client, Cmd, FromRedisValue, Pipeline, RedisError, RedisFuture, Value};
use bytes::Bytes;
use futures_util::future::{try_join_all, BoxFuture};

use super::local::{micros, now_micros};
use super::notices::{LogWatch, Notices};
use super::{
    codec, fit_record, not_kept, Admission, DocumentKey, Evictable, Key, LogEnd, LogPage, Record,
    Store, MAKING,
};
use crate::config::StoreConfig;
use crate::error::{Error, Result};

/// How long start-up waits for Redis, and how long a turn waits on one command.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

/// The records in Redis.
pub struct RedisStore {
    connection: Connection,
    /// `None` when Redis refused the subscriptions' connection: followers poll.
    notices: Option<Notices>,
    idle_ttl: Duration,
    max_record: usize,
}

impl RedisStore {
    /// Connects to `config.url`; an unreachable server is an error (the proxy does not start without its
    /// store).
    pub async fn open(config: &StoreConfig) -> Result<Self> {
        let url = config
            .url
            .as_deref()
            .ok_or_else(|| Error::config("store.url is required for the redis backend"))?;
        // The URL may hold a password: errors name the key, never the URL.
        let client =
            Client::open(url).map_err(|error| Error::config(format!("store.url: {error}")))?;
        let settings = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_secs(2));
        let node = tokio::time::timeout(
            CONNECT_TIMEOUT,
            client.get_connection_manager_with_config(settings.clone()),
        )
        .await
        .map_err(|_| Error::config("store.url: Redis did not answer within 5 s"))?
        .map_err(|error| Error::config(format!("store.url: Redis cannot be reached: {error}")))?;
        warn_if_evicting(node.clone()).await;
        let (connection, notices) = if is_cluster(node.clone()).await {
            let nodes = || {
                // The node named leads to the others (`CLUSTER SLOTS`), with the URL's credentials.
                ClusterClient::builder([client.get_connection_info().clone()])
                    .connection_timeout(CONNECT_TIMEOUT)
                    .response_timeout(RESPONSE_TIMEOUT)
                    .retries(2)
            };
            let cluster = async { nodes().build()?.get_async_connection().await };
            let connection = tokio::time::timeout(CONNECT_TIMEOUT, cluster)
                .await
                .map_err(|_| {
                    Error::config("store.url: the Redis Cluster did not answer within 5 s")
                })?
                .map_err(|error| {
                    Error::config(format!(
                        "store.url: the Redis Cluster cannot be reached: {error}"
                    ))
                })?;
            let notices = opened(Notices::open_cluster(nodes())).await;
            (Connection::Cluster(connection), notices)
        } else {
            let notices = opened(Notices::open(&client, settings)).await;
            (Connection::Node(node), notices)
        };
        tracing::info!(
            cluster = matches!(connection, Connection::Cluster(_)),
            "conversation store: redis"
        );
        Ok(Self {
            connection,
            notices,
            idle_ttl: config.idle_ttl,
            max_record: config.max_record,
        })
    }

    /// Records and lists expire `idle_ttl` after their last use (Redis counts in milliseconds).
    fn ttl_ms(&self) -> u64 {
        u64::try_from(self.idle_ttl.as_millis()).unwrap_or(u64::MAX)
    }

    async fn query<T: FromRedisValue>(&self, command: &::redis::Cmd) -> Result<T> {
        let mut connection = self.connection.clone();
        command
            .query_async(&mut connection)
            .await
            .map_err(unavailable)
    }

    async fn run<T: FromRedisValue>(&self, pipeline: &Pipeline) -> Result<T> {
        let mut connection = self.connection.clone();
        pipeline
            .query_async(&mut connection)
            .await
            .map_err(unavailable)
    }

    /// Runs `commands` at once, each on its own (their keys may lie in different slots of a cluster); their
    /// answers in order.
    async fn each<T: FromRedisValue>(&self, commands: impl Iterator<Item = Cmd>) -> Result<Vec<T>> {
        let commands: Vec<Cmd> = commands.collect();
        try_join_all(commands.iter().map(|command| self.query(command))).await
    }

    /// Deletes `keys` (none is nothing). One command: a cluster sends each key to its own node.
    async fn delete(&self, keys: &[String]) -> Result<()> {
        if keys.is_empty() {
            return Ok(());
        }
        self.query(::redis::cmd("DEL").arg(keys)).await
    }

    async fn load(&self, key: &Key) -> Result<Option<Record>> {
        let bytes: Option<Vec<u8>> = self
            .query(
                ::redis::cmd("GETEX")
                    .arg(record_key(key))
                    .arg("PX")
                    .arg(self.ttl_ms()),
            )
            .await?;
        Ok(bytes.and_then(|bytes| {
            codec::decode(&bytes, &format_args!("conversation of route {}", key.route))
        }))
    }

    async fn save(&self, key: &Key, mut record: Record) -> Result<()> {
        let bytes = fit_record(&mut record, self.max_record);
        if bytes > self.max_record {
            return Err(not_kept(bytes, self.max_record));
        }
        let now = now_micros();
        let paused = record.is_paused();
        let (counted, other) = if paused {
            ("paused", "idle")
        } else {
            ("idle", "paused")
        };
        let mut set_record = ::redis::cmd("SET");
        set_record
            .arg(record_key(key))
            .arg(codec::encode(&record, now, paused))
            .arg("PX")
            .arg(self.ttl_ms());
        let mut lists = ::redis::pipe();
        lists
            .cmd("ZADD")
            .arg(tenant_key(key, counted))
            .arg(now)
            .arg(&key.conversation)
            .ignore();
        lists
            .cmd("ZREM")
            .arg(tenant_key(key, other))
            .arg(&key.conversation)
            .ignore();
        for list in ["idle", "paused"] {
            lists
                .cmd("PEXPIRE")
                .arg(tenant_key(key, list))
                .arg(self.ttl_ms())
                .ignore();
        }
        // The record and the tenant's lists have tags of their own.
        tokio::try_join!(self.query::<()>(&set_record), self.run::<()>(&lists))?;
        Ok(())
    }

    /// Makes room for a new conversation within the tenant's quota: its conversations saved longest ago and
    /// waiting on nobody go. Replicas admitting at the same moment may each let one in: a quota is a bound
    /// on what a tenant holds, not an exact count.
    async fn admit(&self, key: &Key, per_tenant: usize) -> Result<()> {
        let stale = now_micros().saturating_sub(micros(self.idle_ttl));
        let mut pipeline = ::redis::pipe();
        for list in ["idle", "paused"] {
            pipeline
                .cmd("ZREMRANGEBYSCORE")
                .arg(tenant_key(key, list))
                .arg("-inf")
                .arg(stale)
                .ignore();
            pipeline.cmd("ZCARD").arg(tenant_key(key, list));
        }
        let (idle, paused): (usize, usize) = self.run(&pipeline).await?;
        if idle + paused < per_tenant {
            return Ok(());
        }
        let excess = idle + paused + 1 - per_tenant;
        if idle < excess {
            return Err(Error::too_many(
                format!(
                    "{per_tenant} conversations of this client wait on their users (its quota); answer \
                     or abandon one first"
                ),
                60,
            ));
        }
        let evicted: Vec<(String, f64)> = self
            .query(
                ::redis::cmd("ZPOPMIN")
                    .arg(tenant_key(key, "idle"))
                    .arg(excess),
            )
            .await?;
        let gone: Vec<String> = evicted
            .iter()
            .map(|(conversation, _)| {
                record_key(&Key {
                    conversation: conversation.clone(),
                    ..key.clone()
                })
            })
            .collect();
        self.delete(&gone).await?;
        tracing::info!(
            route = %key.route,
            evicted = evicted.len(),
            per_tenant,
            "a tenant reached its conversations quota; its oldest idle conversations were dropped"
        );
        Ok(())
    }
}

/// Start-up's look at `maxmemory-policy`: anything but `noeviction` may drop a record when Redis is full
/// (every record has a ttl, so the `volatile-*` policies too). A server that hides its config is not
/// asked twice. (Of a cluster, the node `store.url` names: its nodes are set alike, or should be.)
async fn warn_if_evicting(mut node: ConnectionManager) {
    let asked: ::redis::RedisResult<Vec<String>> = ::redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .query_async(&mut node)
        .await;
    match asked.as_deref() {
        Ok([_, policy]) if policy != "noeviction" => tracing::warn!(
            policy = %policy,
            "Redis may evict keys when it is full (maxmemory-policy {policy}): an evicted paused run is a \
             lost conversation; set maxmemory-policy noeviction"
        ),
        Ok(_) => {}
        Err(error) => tracing::debug!("Redis's maxmemory-policy is not readable: {error}"),
    }
}

/// Whether the node is one of a Redis Cluster; a node that does not say (`INFO` refused) is taken as a
/// server of its own, with a warning (on a cluster, a command for another node's slot would then fail).
async fn is_cluster(mut node: ConnectionManager) -> bool {
    let info: ::redis::RedisResult<String> = ::redis::cmd("INFO")
        .arg("cluster")
        .query_async(&mut node)
        .await;
    match info {
        Ok(info) => info.lines().any(|line| line.trim() == "cluster_enabled:1"),
        Err(error) => {
            tracing::warn!(
                "Redis refused INFO ({error}): taken for a server of its own; a Redis Cluster's node must \
                 allow INFO for the proxy to find the cluster"
            );
            false
        }
    }
}

/// The notices' subscriptions, or `None` (logged) when Redis refused their connection: followers poll.
async fn opened(
    notices: impl std::future::Future<Output = ::redis::RedisResult<Notices>>,
) -> Option<Notices> {
    match tokio::time::timeout(CONNECT_TIMEOUT, notices).await {
        Ok(Ok(notices)) => Some(notices),
        Ok(Err(error)) => {
            tracing::warn!(
                "Redis refused a connection for run logs' notices ({error}); followers poll"
            );
            None
        }
        Err(_) => {
            tracing::warn!(
                "Redis did not answer a connection for run logs' notices; followers poll"
            );
            None
        }
    }
}

/// The connection commands go on: to one server, or to each node of a cluster by its keys' slot.
#[derive(Clone)]
enum Connection {
    Node(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, command: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Connection::Node(node) => node.req_packed_command(command),
            Connection::Cluster(cluster) => cluster.req_packed_command(command),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Connection::Node(node) => node.req_packed_commands(pipeline, offset, count),
            Connection::Cluster(cluster) => cluster.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Node(node) => node.get_db(),
            Connection::Cluster(cluster) => cluster.get_db(),
        }
    }
}

fn unavailable(error: RedisError) -> Error {
    Error::store_unavailable(format!(
        "the conversation store (Redis) is unavailable: {error}"
    ))
}

/// `part` with every byte but ASCII letters, digits and `-_.~` written `%XX`: no part can hold the key's
/// separators (`:`, `/`) or a hash tag's braces, and two parts escape alike only if they are alike.
fn escape(part: &str) -> String {
    let mut escaped = String::with_capacity(part.len());
    for byte in part.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            escaped.push(char::from(byte));
        } else {
            escaped.push_str(&format!("%{byte:02X}"));
        }
    }
    escaped
}

fn record_key(key: &Key) -> String {
    format!(
        "agent-bridge:{{{}/{}/{}}}:record",
        escape(&key.route),
        escape(&key.tenant),
        escape(&key.conversation)
    )
}

/// One of the tenant's conversation lists (`idle`, `paused`) on the key's route.
fn tenant_key(key: &Key, list: &str) -> String {
    tenant_list(&key.route, &key.tenant, list)
}

/// The tenant's documents of the key's kind that count against its quota, by when each was let in.
fn counted_key(key: &DocumentKey) -> String {
    tenant_list(
        &key.route,
        &key.tenant,
        &format!("counted/{}", escape(key.kind)),
    )
}

/// The tenant's slots of the key's kind held (its runs under way), by when each lapses.
fn held_key(key: &DocumentKey) -> String {
    tenant_list(
        &key.route,
        &key.tenant,
        &format!("held/{}", escape(key.kind)),
    )
}

fn tenant_list(route: &str, tenant: &str, list: &str) -> String {
    format!(
        "agent-bridge:{{{}/{}}}:{list}",
        escape(route),
        escape(tenant)
    )
}

/// A run log's list, its end mark and the channel its appends are told on:
/// `agent-bridge:{route/tenant/kind/id}:events`, `...:ended` and `...:appended`, one hash tag.
fn log_keys(key: &DocumentKey) -> [String; 3] {
    let tag = document_tag(key);
    [
        format!("{tag}:events"),
        format!("{tag}:ended"),
        format!("{tag}:appended"),
    ]
}

impl RedisStore {
    /// One atomic step: the log started afresh when `after` is 0, the events pushed, the end marked, both
    /// keys' expiry renewed, and followers told. Redis's own persistence decides durability. Whether a
    /// follower was told (subscribed to the log's notices).
    async fn append_events(
        &self,
        key: &DocumentKey,
        after: u64,
        events: Vec<Bytes>,
        end: Option<LogEnd>,
    ) -> Result<bool> {
        let [events_key, ended_key, channel] = log_keys(key);
        let told = !events.is_empty() || end.is_some();
        let mut pipeline = ::redis::pipe();
        pipeline.atomic();
        if after == 0 {
            pipeline
                .cmd("DEL")
                .arg(&events_key)
                .arg(&ended_key)
                .ignore();
        }
        if !events.is_empty() {
            let mut push = ::redis::cmd("RPUSH");
            push.arg(&events_key);
            for event in &events {
                push.arg(event.as_ref());
            }
            pipeline.add_command(push).ignore();
        }
        if let Some(end) = end {
            pipeline
                .cmd("SET")
                .arg(&ended_key)
                .arg(match end {
                    LogEnd::Whole => ENDED_WHOLE,
                    LogEnd::Cut => ENDED_CUT,
                })
                .arg("PX")
                .arg(self.ttl_ms())
                .ignore();
        }
        pipeline
            .cmd("PEXPIRE")
            .arg(&events_key)
            .arg(self.ttl_ms())
            .ignore();
        if told {
            pipeline.cmd("PUBLISH").arg(&channel).arg("");
        }
        let followers: Vec<u64> = self.run(&pipeline).await?;
        Ok(followers.first().is_some_and(|&n| n > 0))
    }

    /// One script, so that no push lands after the log's end: `-1` when it ended, else how many follow it.
    async fn push_event(&self, key: &DocumentKey, event: Bytes) -> Result<bool> {
        const PUSH_UNLESS_ENDED: &str = "\
            if redis.call('EXISTS', KEYS[2]) == 1 then return -1 end \
            redis.call('RPUSH', KEYS[1], ARGV[1]) \
            redis.call('PEXPIRE', KEYS[1], ARGV[2]) \
            return redis.call('PUBLISH', ARGV[3], '')";
        let [events_key, ended_key, channel] = log_keys(key);
        let mut push = ::redis::cmd("EVAL");
        push.arg(PUSH_UNLESS_ENDED)
            .arg(2)
            .arg(events_key)
            .arg(ended_key)
            .arg(event.as_ref())
            .arg(self.ttl_ms())
            .arg(channel);
        let followers: i64 = self.query(&push).await?;
        Ok(followers >= 0)
    }

    async fn read_events(
        &self,
        key: &DocumentKey,
        after: u64,
        max: usize,
    ) -> Result<Option<LogPage>> {
        let [events_key, ended_key, _] = log_keys(key);
        let first = isize::try_from(after).unwrap_or(isize::MAX);
        let last = first.saturating_add(isize::try_from(max).unwrap_or(isize::MAX) - 1);
        let mut pipeline = ::redis::pipe();
        pipeline.atomic();
        pipeline.cmd("LRANGE").arg(&events_key).arg(first).arg(last);
        pipeline.cmd("EXISTS").arg(&events_key);
        pipeline.cmd("GET").arg(&ended_key);
        let (events, exists, ended): (Vec<Vec<u8>>, bool, Option<String>) =
            self.run(&pipeline).await?;
        let ended = ended.map(|mark| {
            if mark == ENDED_CUT {
                LogEnd::Cut
            } else {
                LogEnd::Whole
            }
        });
        if !exists && ended.is_none() {
            return Ok(None);
        }
        let ended = ended.filter(|_| events.len() < max);
        let events = events.into_iter().map(Bytes::from).collect();
        Ok(Some(LogPage { events, ended }))
    }
}

impl RedisStore {
    /// The commands that save document `key` as `bytes` (two tags: sent apart).
    fn save_commands(&self, key: &DocumentKey, bytes: Vec<u8>) -> [Cmd; 2] {
        let mut set = ::redis::cmd("SET");
        set.arg(document_key(key))
            .arg(bytes)
            .arg("PX")
            .arg(self.ttl_ms());
        // What counts the tenant's documents of this kind lives as long as the newest of them.
        let mut counted = ::redis::cmd("PEXPIRE");
        counted.arg(counted_key(key)).arg(self.ttl_ms());
        [set, counted]
    }

    /// Counts the new document `key` first and then the tenant's others: replicas letting documents in at
    /// the same moment may each refuse one, but never let the tenant past its quota. Only when the count
    /// is over are the others looked at: those whose document is gone (deleted elsewhere, or expired) and
    /// that were let in longer than [`MAKING`] ago stop counting, and those `evictable` ranks make room,
    /// read oldest first and only as far as it takes.
    async fn admit_document(
        &self,
        key: &DocumentKey,
        per_tenant: usize,
        evictable: Option<Arc<Evictable>>,
    ) -> Result<Admission> {
        let counted = counted_key(key);
        let now = now_micros();
        let mut pipeline = ::redis::pipe();
        pipeline.cmd("ZADD").arg(&counted).arg(now).arg(&key.id);
        pipeline
            .cmd("PEXPIRE")
            .arg(&counted)
            .arg(self.ttl_ms())
            .ignore();
        pipeline
            .cmd("ZRANGE")
            .arg(&counted)
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES");
        // Scores as Redis writes them (a large one may come in exponent form).
        let (added, members): (u64, Vec<(String, f64)>) = self.run(&pipeline).await?;
        if members.len() <= per_tenant {
            return Ok(Admission::Admitted(Vec::new()));
        }
        let others: Vec<(String, f64)> = members
            .into_iter()
            .filter(|(id, _)| *id != key.id)
            .collect();
        let other = |id: &str| {
            document_key(&DocumentKey {
                id: id.to_owned(),
                ..key.clone()
            })
        };
        let kept: Vec<bool> = self
            .each(
                others
                    .iter()
                    .map(|(id, _)| ::redis::cmd("EXISTS").arg(other(id)).clone()),
            )
            .await?;
        let making = now.saturating_sub(micros(MAKING)) as f64;
        let (mut live, mut gone) = (Vec::new(), Vec::new());
        for ((id, let_in), kept) in others.iter().zip(kept) {
            if kept || *let_in >= making {
                live.push((id.as_str(), *let_in));
            } else {
                gone.push(id.as_str());
            }
        }
        let excess = (live.len() + 1).saturating_sub(per_tenant);
        let (evicted, held) = match evictable.as_deref() {
            Some(rank) if excess > 0 => {
                let making = |let_in: f64| let_in >= making;
                self.least_wanted(&live, excess, rank, &other, making)
                    .await?
            }
            _ => (Vec::new(), live.iter().map(|(id, _)| *id).collect()),
        };
        let admitted = evicted.len() >= excess;
        let mut uncounted = [gone, evicted.clone()].concat();
        // Only if this call counted it: a create of the same id that was let in stays counted.
        if !admitted && added > 0 {
            uncounted.push(&key.id);
        }
        if !uncounted.is_empty() {
            let evicted_keys: Vec<String> = evicted.iter().map(|id| other(id)).collect();
            let mut zrem = ::redis::cmd("ZREM");
            zrem.arg(&counted).arg(&uncounted);
            tokio::try_join!(self.query::<()>(&zrem), self.delete(&evicted_keys))?;
        }
        let owned = |ids: Vec<&str>| ids.into_iter().map(str::to_owned).collect();
        Ok(if admitted {
            Admission::Admitted(owned(evicted))
        } else {
            Admission::Refused(owned(held))
        })
    }

    /// The `excess` documents among `live` (oldest let in first) that `rank` lets go first, read a few at
    /// a time until that many of the lowest rank are found; or none, when fewer than `excess` may go at
    /// all. Then those that may not.
    async fn least_wanted<'a>(
        &self,
        live: &[(&'a str, f64)],
        excess: usize,
        rank: &Evictable,
        document_key: &impl Fn(&str) -> String,
        making: impl Fn(f64) -> bool,
    ) -> Result<(Vec<&'a str>, Vec<&'a str>)> {
        const READ_AT_ONCE: usize = 16;
        let (mut candidates, mut held) = (Vec::new(), Vec::new());
        for (chunk, ids) in live.chunks(READ_AT_ONCE).enumerate() {
            let documents: Vec<Option<Vec<u8>>> = self
                .each(
                    ids.iter()
                        .map(|(id, _)| ::redis::cmd("GET").arg(document_key(id)).clone()),
                )
                .await?;
            for (n, (&(id, let_in), document)) in ids.iter().zip(documents).enumerate() {
                // Let in again and not saved since (a paused task continued, its run about to save it):
                // being made, as one let in a moment ago with no document yet. Both are held as much as
                // one in use. (The times are two replicas' clocks: one ahead of the other by more than
                // the moment between the admission and the save misjudges it.)
                let remade = |bytes: &&[u8]| {
                    making(let_in)
                        && codec::header(bytes).is_some_and(|h| (h.touched as f64) < let_in)
                };
                match document
                    .as_deref()
                    .filter(|bytes| !remade(bytes))
                    .and_then(rank)
                {
                    Some(rank) => candidates.push((rank, chunk * READ_AT_ONCE + n, id)),
                    None => held.push(id),
                }
            }
            if candidates.iter().filter(|(rank, ..)| *rank == 0).count() >= excess {
                break;
            }
        }
        if candidates.len() < excess {
            return Ok((Vec::new(), held));
        }
        candidates.sort_unstable();
        Ok((candidates.iter().take(excess).map(|c| c.2).collect(), held))
    }
}

impl RedisStore {
    /// In first, then counted, as [`RedisStore::admit_document`]; lapsed slots (their replica died) first go.
    async fn enter_slot(&self, key: &DocumentKey, per_tenant: usize, until: u64) -> Result<bool> {
        let held = held_key(key);
        let mut pipeline = ::redis::pipe();
        pipeline
            .cmd("ZREMRANGEBYSCORE")
            .arg(&held)
            .arg("-inf")
            .arg(now_micros())
            .ignore();
        self.hold(&mut pipeline, key, until, Hold::Take);
        pipeline.cmd("ZCARD").arg(&held);
        let (count,): (usize,) = self.run(&pipeline).await?;
        if count <= per_tenant {
            return Ok(true);
        }
        // Not left: it lapses with its lease.
        let _ = self.leave_slot(key).await;
        Ok(false)
    }

    /// Adds to `pipeline` the slot `key` held until `until`; the set of them lives as long as that.
    fn hold(&self, pipeline: &mut Pipeline, key: &DocumentKey, until: u64, hold: Hold) {
        let held = held_key(key);
        let mut add = ::redis::cmd("ZADD");
        add.arg(&held);
        if hold == Hold::Renew {
            // A renewal that crossed the slot's leaving does not take it back.
            add.arg("XX");
        }
        add.arg(until).arg(&key.id);
        pipeline.add_command(add).ignore();
        let lasts_ms = until.saturating_sub(now_micros()) / 1000 + 1;
        pipeline.cmd("PEXPIRE").arg(&held).arg(lasts_ms).ignore();
    }

    async fn renew_slot(&self, key: &DocumentKey, until: u64) -> Result<()> {
        let mut pipeline = ::redis::pipe();
        self.hold(&mut pipeline, key, until, Hold::Renew);
        self.run(&pipeline).await
    }

    async fn leave_slot(&self, key: &DocumentKey) -> Result<()> {
        self.query(::redis::cmd("ZREM").arg(held_key(key)).arg(&key.id))
            .await
    }
}

/// Whether a slot is taken or renewed ([`RedisStore::hold`]).
#[derive(PartialEq, Eq)]
enum Hold {
    Take,
    Renew,
}

/// The end marks of a whole run log and of a cut one.
const ENDED_WHOLE: &str = "1";
const ENDED_CUT: &str = "cut";

/// An inbound's document: `agent-bridge:{route/tenant/kind/id}:document`.
fn document_key(key: &DocumentKey) -> String {
    format!("{}:document", document_tag(key))
}

/// A claim ([`Store::claim`]): `agent-bridge:{route/tenant/kind/id}:claim`.
fn claim_key(key: &DocumentKey) -> String {
    format!("{}:claim", document_tag(key))
}

/// `agent-bridge:{route/tenant/kind/id}`: what every key of one document, log or claim starts with (one
/// hash tag).
fn document_tag(key: &DocumentKey) -> String {
    format!(
        "agent-bridge:{{{}/{}/{}/{}}}",
        escape(&key.route),
        escape(&key.tenant),
        escape(key.kind),
        escape(&key.id)
    )
}

impl Store for RedisStore {
    fn shared(&self) -> bool {
        true
    }

    fn check(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let ping = ::redis::cmd("PING");
            match self.connection.clone() {
                Connection::Node(mut node) => ping.query_async::<()>(&mut node).await,
                // Any primary, not every one: with one of them down, the conversations whose slots the
                // others hold go on, and a replica that is not ready serves none.
                Connection::Cluster(mut cluster) => {
                    let any_primary = RoutingInfo::MultiNode((
                        MultipleNodeRoutingInfo::AllMasters,
                        Some(ResponsePolicy::OneSucceeded),
                    ));
                    cluster.route_command(ping, any_primary).await.map(drop)
                }
            }
            .map_err(unavailable)
        })
    }

    fn load_document<'a>(&'a self, key: &'a DocumentKey) -> BoxFuture<'a, Result<Option<Vec<u8>>>> {
        Box::pin(async move { self.query(::redis::cmd("GET").arg(document_key(key))).await })
    }

    fn save_document<'a>(
        &'a self,
        key: &'a DocumentKey,
        bytes: Vec<u8>,
    ) -> BoxFuture<'a, Result<()>> {
        self.save_documents(vec![(key.clone(), bytes)])
    }

    fn save_documents(&self, documents: Vec<(DocumentKey, Vec<u8>)>) -> BoxFuture<'_, Result<()>> {
        let commands = documents
            .into_iter()
            .flat_map(|(key, bytes)| self.save_commands(&key, bytes));
        let saved = self.each::<()>(commands);
        Box::pin(async move { saved.await.map(drop) })
    }

    fn delete_document<'a>(&'a self, key: &'a DocumentKey) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let document = [document_key(key)];
            let mut zrem = ::redis::cmd("ZREM");
            zrem.arg(counted_key(key)).arg(&key.id);
            tokio::try_join!(self.delete(&document), self.query::<()>(&zrem))?;
            Ok(())
        })
    }

    fn admit_document<'a>(
        &'a self,
        key: &'a DocumentKey,
        per_tenant: usize,
        evictable: Option<Arc<Evictable>>,
    ) -> BoxFuture<'a, Result<Admission>> {
        Box::pin(self.admit_document(key, per_tenant, evictable))
    }

    fn claim<'a>(&'a self, key: &'a DocumentKey, lasting: Duration) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let lasting_ms = u64::try_from(lasting.as_millis()).unwrap_or(u64::MAX);
            let mut claim = ::redis::cmd("SET");
            claim
                .arg(claim_key(key))
                .arg(1)
                .arg("NX")
                .arg("PX")
                .arg(lasting_ms);
            let claimed: Option<String> = self.query(&claim).await?;
            Ok(claimed.is_some())
        })
    }

    fn enter_slot<'a>(
        &'a self,
        key: &'a DocumentKey,
        per_tenant: usize,
        until: u64,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(self.enter_slot(key, per_tenant, until))
    }

    fn renew_slot<'a>(&'a self, key: &'a DocumentKey, until: u64) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.renew_slot(key, until))
    }

    fn leave_slot<'a>(&'a self, key: &'a DocumentKey) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.leave_slot(key))
    }

    fn append_events<'a>(
        &'a self,
        key: &'a DocumentKey,
        after: u64,
        events: Vec<Bytes>,
        end: Option<LogEnd>,
        _durable: bool,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(self.append_events(key, after, events, end))
    }

    fn push_event<'a>(&'a self, key: &'a DocumentKey, event: Bytes) -> BoxFuture<'a, Result<bool>> {
        Box::pin(self.push_event(key, event))
    }

    fn read_events<'a>(
        &'a self,
        key: &'a DocumentKey,
        after: u64,
        max: usize,
    ) -> BoxFuture<'a, Result<Option<LogPage>>> {
        Box::pin(self.read_events(key, after, max))
    }

    fn watch_log<'a>(&'a self, key: &'a DocumentKey) -> BoxFuture<'a, LogWatch> {
        Box::pin(async move {
            match &self.notices {
                Some(notices) => notices.watch(log_keys(key)[2].clone()).await,
                None => LogWatch::polling(),
            }
        })
    }

    fn load<'a>(&'a self, key: &'a Key) -> BoxFuture<'a, Result<Option<Record>>> {
        Box::pin(self.load(key))
    }

    fn save<'a>(&'a self, key: &'a Key, record: Record) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.save(key, record))
    }

    fn admit<'a>(&'a self, key: &'a Key, per_tenant: usize) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.admit(key, per_tenant))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(route: &str, tenant: &str, conversation: &str) -> Key {
        Key {
            route: route.into(),
            tenant: tenant.into(),
            conversation: conversation.into(),
        }
    }

    #[test]
    fn a_conversation_has_one_hash_tag_and_no_part_reaches_another_key() {
        assert_eq!(
            record_key(&key("weather", "acme", "thread-1")),
            "agent-bridge:{weather/acme/thread-1}:record"
        );
        assert_eq!(
            tenant_key(&key("weather", "acme", "thread-1"), "idle"),
            "agent-bridge:{weather/acme}:idle"
        );
        let session = DocumentKey {
            kind: "cmdc-session",
            route: "gw".into(),
            tenant: "a/b{c}".into(),
            id: "s-1".into(),
        };
        assert_eq!(
            counted_key(&session),
            "agent-bridge:{gw/a%2Fb%7Bc%7D}:counted/cmdc-session"
        );
        // Separators and braces in a part are escaped: the tag stays one, and no two keys meet.
        let hostile = record_key(&key("weather", "acme}:x", "a/b{c}%"));
        assert_eq!(
            hostile,
            "agent-bridge:{weather/acme%7D%3Ax/a%2Fb%7Bc%7D%25}:record"
        );
        assert_ne!(
            record_key(&key("r", "a/b", "c")),
            record_key(&key("r", "a", "b/c"))
        );
        assert_ne!(
            record_key(&key("r", "%2F", "c")),
            record_key(&key("r", "/", "c"))
        );
    }
}
