//! What wakes a follower of a run log when the log may have grown, so that an idle follower does not read
//! the store ten times a second: a run's control log and a session's callback calls, followed for as long
//! as the run lasts, are written a few times per run if at all.
//!
//! In Redis, each append publishes a notice on the log's channel; a process subscribes (over a RESP3
//! connection of its own, one per node of a cluster, subscriptions renewed after a reconnect) to the
//! channel of each log it follows, for as long as it follows it. A notice is a hint: a follower still
//! reads the store every [`FALLBACK`], for a notice lost while the connection was down and to look at the
//! run's lease. Where no notices exist (a store one process owns), the follower reads every [`POLL`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ::redis::aio::{ConnectionManager, ConnectionManagerConfig};
use ::redis::cluster::ClusterClientBuilder;
use ::redis::cluster_async::ClusterConnection;
use ::redis::{Client, ProtocolVersion, PushInfo, PushKind, RedisResult};
use tokio::sync::watch;

/// How often a follower reads a log it gets no notices of.
const POLL: Duration = Duration::from_millis(100);
/// How often a follower that gets notices reads the log anyway: as often as a run's lease is renewed, so
/// that a lapsed one is seen within a renewal of lapsing, and a notice lost is late by that at most. (Not
/// more often: a run's control log is followed for as long as the run lasts, and read for nothing but
/// this.)
const FALLBACK: Duration = Duration::from_secs(3);

/// What a follower waits on between two reads of its log.
pub struct LogWatch {
    notified: Option<Notified>,
}

struct Notified {
    notices: watch::Receiver<u64>,
    _subscription: Subscription,
}

impl LogWatch {
    /// A watch that only waits [`POLL`].
    pub fn polling() -> Self {
        Self { notified: None }
    }

    /// Returns when the log may have grown since the last return.
    pub async fn changed(&mut self) {
        let Some(notified) = &mut self.notified else {
            return tokio::time::sleep(POLL).await;
        };
        match tokio::time::timeout(FALLBACK, notified.notices.changed()).await {
            Ok(Ok(())) | Err(_) => {}
            // The subscription is gone (the store is closing): poll.
            Ok(Err(_)) => {
                self.notified = None;
                tokio::time::sleep(POLL).await;
            }
        }
    }
}

/// One process's subscriptions to log channels in Redis.
#[derive(Clone)]
pub struct Notices {
    connection: Subscriber,
    channels: Arc<Mutex<HashMap<String, Channel>>>,
}

/// The connection the subscriptions are made on: to one server, or to a cluster's nodes, each channel
/// subscribed on its slot's node (where its log's appends publish). Either makes its subscriptions again
/// after a reconnect; a cluster's subscription stays with its node's address, so after a failover its
/// followers read every [`FALLBACK`] instead.
#[derive(Clone)]
enum Subscriber {
    Node(ConnectionManager),
    Cluster(ClusterConnection),
}

impl Subscriber {
    async fn subscribe(&mut self, channel: &str) -> RedisResult<()> {
        match self {
            Subscriber::Node(node) => node.subscribe(channel).await,
            Subscriber::Cluster(cluster) => cluster.subscribe(channel).await,
        }
    }

    async fn unsubscribe(&mut self, channel: &str) -> RedisResult<()> {
        match self {
            Subscriber::Node(node) => node.unsubscribe(channel).await,
            Subscriber::Cluster(cluster) => cluster.unsubscribe(channel).await,
        }
    }
}

/// A channel some followers of this process watch.
struct Channel {
    watchers: usize,
    notices: watch::Sender<u64>,
}

impl Notices {
    /// Opens the subscriptions' connection beside `client`'s (the same server and credentials, RESP3 so
    /// that notices arrive on it as pushes).
    pub async fn open(client: &Client, settings: ConnectionManagerConfig) -> RedisResult<Self> {
        let info = client.get_connection_info().clone();
        let resp3 = info
            .redis_settings()
            .clone()
            .set_protocol(ProtocolVersion::RESP3);
        let client = Client::open(info.set_redis_settings(resp3))?;
        let channels = Arc::default();
        let settings = settings
            .set_automatic_resubscription()
            .set_push_sender(delivering(&channels));
        let connection = client.get_connection_manager_with_config(settings).await?;
        Ok(Self {
            connection: Subscriber::Node(connection),
            channels,
        })
    }

    /// Opens the subscriptions' connections to the cluster `nodes` name (RESP3, as [`Notices::open`]).
    pub async fn open_cluster(nodes: ClusterClientBuilder) -> RedisResult<Self> {
        let channels = Arc::default();
        let connection = nodes
            .use_protocol(ProtocolVersion::RESP3)
            .push_sender(delivering(&channels))
            .build()?
            .get_async_connection()
            .await?;
        Ok(Self {
            connection: Subscriber::Cluster(connection),
            channels,
        })
    }

    /// A watch on `channel`, subscribed to before this returns (a notice published after it is not
    /// missed); a polling one when Redis does not take the subscription.
    pub async fn watch(&self, channel: String) -> LogWatch {
        let (notices, first) = {
            let mut channels = self.channels.lock().unwrap_or_else(|e| e.into_inner());
            let entry = channels.entry(channel.clone()).or_insert_with(|| Channel {
                watchers: 0,
                notices: watch::Sender::new(0),
            });
            entry.watchers += 1;
            (entry.notices.subscribe(), entry.watchers == 1)
        };
        let subscription = Subscription {
            notices: self.clone(),
            channel,
        };
        if first {
            let mut connection = self.connection.clone();
            if let Err(error) = connection.subscribe(&subscription.channel).await {
                tracing::debug!("a run log's notices cannot be subscribed to: {error}");
                return LogWatch::polling();
            }
        }
        LogWatch {
            notified: Some(Notified {
                notices,
                _subscription: subscription,
            }),
        }
    }
}

/// What hands each notice Redis pushes to the watchers of its channel in `channels`.
fn delivering(
    channels: &Arc<Mutex<HashMap<String, Channel>>>,
) -> impl Fn(PushInfo) -> Result<(), std::convert::Infallible> + Send + Sync + 'static {
    let channels = Arc::clone(channels);
    move |push| {
        deliver(&channels, push);
        Ok(())
    }
}

/// A notice Redis pushed, to the watchers of its channel.
fn deliver(channels: &Mutex<HashMap<String, Channel>>, push: PushInfo) {
    if push.kind != PushKind::Message {
        return;
    }
    let Some(Ok(channel)) = push
        .data
        .first()
        .map(::redis::from_redis_value_ref::<String>)
    else {
        return;
    };
    let channels = channels.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(watched) = channels.get(&channel) {
        watched.notices.send_modify(|count| *count += 1);
    }
}

/// One follower's interest in a channel: the last one to go unsubscribes.
struct Subscription {
    notices: Notices,
    channel: String,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let last = {
            let mut channels = self
                .notices
                .channels
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let Some(watched) = channels.get_mut(&self.channel) else {
                return;
            };
            watched.watchers -= 1;
            let last = watched.watchers == 0;
            if last {
                channels.remove(&self.channel);
            }
            last
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if last {
            let (notices, channel) = (self.notices.clone(), std::mem::take(&mut self.channel));
            runtime.spawn(async move {
                // Watched again meanwhile: that watcher subscribed, and this would undo it.
                let watched = notices
                    .channels
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .contains_key(&channel);
                if !watched {
                    let _ = notices.connection.clone().unsubscribe(&channel).await;
                }
            });
        }
    }
}
