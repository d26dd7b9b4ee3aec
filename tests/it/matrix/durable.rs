//! The pair's proxy run as its users run it in production: the `agent-bridge` binary, keeping its
//! conversations in a store that outlives it, and something happening to it between two turns
//! ([`Topology`]).

use std::path::PathBuf;

use toml::{Table, Value};

use crate::support::binary::{agent_bridge, AgentBridge};
use crate::support::stores::{Balancer, RedisServer, TempDir};
use crate::support::{Route, Routes};

/// What happens to the proxy between two turns of a conversation.
#[derive(Clone, Copy, Debug)]
pub enum Topology {
    /// One proxy on a redb file, killed (SIGKILL: no goodbye, no flush) and started again.
    Restarted,
    /// Two proxies on one Redis; turns alternate between them, as a round-robin balancer sends them.
    Replicas,
    /// Two proxies on one Redis behind nginx configured as `docker/compose.yaml` runs it: the client
    /// talks to nginx, which sends each request to the next replica.
    Balanced,
}

/// The proxies of one test, their routes file and their store; all stopped on drop.
pub struct Deployment {
    topology: Topology,
    config: PathBuf,
    proxies: Vec<AgentBridge>,
    /// Which proxy serves the next turn.
    turn: usize,
    folder: TempDir,
    _redis: Option<RedisServer>,
    balancer: Option<Balancer>,
}

/// Where the restarted proxy keeps its file: relative, so relative to the routes file.
const REDB_PATH: &str = "data/conversations.redb";

impl Deployment {
    pub fn start(topology: Topology, route: Route) -> Deployment {
        let folder = TempDir::new("durable");
        let mut store = Table::new();
        let redis = match topology {
            Topology::Restarted => {
                store.insert("backend".into(), "redb".into());
                store.insert("path".into(), REDB_PATH.into());
                None
            }
            Topology::Replicas | Topology::Balanced => {
                let redis = RedisServer::start();
                store.insert("backend".into(), "redis".into());
                store.insert("url".into(), redis.url().into());
                Some(redis)
            }
        };
        let routes = Routes::default()
            .set("store", Value::Table(store))
            .route(route);
        let config = folder.path().join("routes.toml");
        std::fs::write(&config, routes.to_string()).expect("write the routes file");
        let replicas = match topology {
            Topology::Restarted => 1,
            Topology::Replicas | Topology::Balanced => 2,
        };
        let proxies: Vec<AgentBridge> = (0..replicas).map(|_| launch(&config)).collect();
        let balancer = matches!(topology, Topology::Balanced).then(|| {
            let addresses: Vec<&str> = proxies.iter().map(|p| p.address.as_str()).collect();
            Balancer::start(&addresses)
        });
        Deployment {
            topology,
            config,
            proxies,
            turn: 0,
            folder,
            _redis: redis,
            balancer,
        }
    }

    /// The URL of `path` on the proxy that serves the next turn (on the balancer, which picks it).
    pub fn url(&self, path: &str) -> String {
        let address = match &self.balancer {
            Some(balancer) => balancer.address(),
            None => self.proxies[self.turn % self.proxies.len()].address.clone(),
        };
        format!("http://{address}{path}")
    }

    /// Kills and restarts the proxy, or moves on to the other replica.
    pub fn between_turns(&mut self) {
        match self.topology {
            Topology::Restarted => {
                let killed = self.proxies.pop();
                // Dropping it kills it (SIGKILL) and reaps it.
                drop(killed);
                self.proxies.push(launch(&self.config));
                assert!(
                    self.folder.path().join(REDB_PATH).exists(),
                    "the redb file is next to the routes file"
                );
            }
            Topology::Replicas => self.turn += 1,
            Topology::Balanced => {}
        }
    }
}

fn launch(config: &std::path::Path) -> AgentBridge {
    let mut command = agent_bridge();
    command
        .arg("--config")
        .arg(config)
        .args(["--listen", "127.0.0.1:0"]);
    AgentBridge::start(command)
}
