//! The stores the proxy keeps conversations in, and the balancer in front of its replicas, started for
//! real: Debian's `redis-server` on a free port ([`RedisServer`]), three of them made a Redis Cluster
//! ([`RedisCluster`]), Debian's nginx with the compose file's
//! configuration ([`Balancer`]), both stopped on drop (`.ci/run` installs them), and a folder of the test's
//! own for redb files ([`TempDir`], removed on drop); and the binary run on them as production runs it,
//! with something happening to it between two requests ([`Deployment`], [`Topology`]).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use toml::{Table, Value};

use super::binary::{serve_command, unique_temp_path, AgentBridge};
use super::{Route, Routes, WAIT};

/// A folder under the temp directory that no other test uses; removed with what it holds on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        let path = unique_temp_path(name);
        std::fs::create_dir_all(&path).expect("create the test's folder");
        TempDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A `redis-server` of the test's own, on a port that was free, saving nothing to disk.
pub struct RedisServer {
    process: Option<Child>,
    port: u16,
    /// Extra `--name value` settings, kept for a restart.
    settings: Vec<(String, String)>,
    /// A cluster's node's bus port: a free one of its own, picked with the port (by default it is the
    /// port plus 10,000, past 65,535 for a high free port), and kept for a restart as the port is.
    bus_port: Option<u16>,
}

impl RedisServer {
    pub fn start() -> RedisServer {
        Self::start_with(&[])
    }

    /// A server with extra settings (`("maxmemory-policy", "allkeys-lru")`).
    pub fn start_with(settings: &[(&str, &str)]) -> RedisServer {
        let settings: Vec<(String, String)> = settings
            .iter()
            .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
            .collect();
        let cluster_node = settings.iter().any(|(name, _)| name == "cluster-enabled");
        let mut server = RedisServer {
            process: None,
            port: 0,
            settings,
            bus_port: None,
        };
        // A port found free may be taken before redis binds it: another one is tried.
        for _ in 0..5 {
            server.port = free_port();
            server.bus_port = cluster_node.then(free_port);
            if server.launch() {
                return server;
            }
        }
        panic!("redis-server did not start on any of five free ports");
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Kills it at once (SIGKILL), as a crashed or unreachable server.
    pub fn kill(&mut self) {
        if let Some(mut process) = self.process.take() {
            let _ = process.kill();
            let _ = process.wait();
        }
    }

    /// Starts it again on the same port, empty.
    pub fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + WAIT;
        while !self.launch() {
            assert!(
                Instant::now() < deadline,
                "redis-server did not start again on port {} within {WAIT:?}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts the process and waits until it answers PING; whether it did.
    fn launch(&mut self) -> bool {
        let mut command = Command::new("redis-server");
        command
            .args(["--bind", "127.0.0.1", "--port"])
            .arg(self.port.to_string())
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        for (name, value) in &self.settings {
            command.arg(format!("--{name}")).arg(value);
        }
        if let Some(bus_port) = self.bus_port {
            command.arg("--cluster-port").arg(bus_port.to_string());
        }
        let mut process = command.spawn().expect(
            "start redis-server (Debian's redis-server package; `bash .ci/run` installs it)",
        );
        let deadline = Instant::now() + WAIT;
        while Instant::now() < deadline {
            if matches!(process.try_wait(), Ok(Some(_))) {
                return false;
            }
            if ping(self.port) {
                self.process = Some(process);
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = process.kill();
        let _ = process.wait();
        false
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// How long a cluster may take to form: `redis-cli` waits a second at a time for the nodes to agree, and
/// on a busy machine (many tests starting clusters at once) that takes longer than a request.
const FORMING: Duration = Duration::from_secs(30);

/// Three `redis-server`s of the test's own made one Redis Cluster by `redis-cli --cluster create`, each the
/// master of a third of the slots (no replicas); stopped on drop.
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    _folder: TempDir,
}

impl RedisCluster {
    pub fn start() -> RedisCluster {
        let folder = TempDir::new("redis-cluster");
        let nodes: Vec<RedisServer> = (0..3)
            .map(|n| {
                let config = folder.path().join(format!("nodes-{n}.conf"));
                RedisServer::start_with(&[
                    ("cluster-enabled", "yes"),
                    ("cluster-config-file", &config.display().to_string()),
                ])
            })
            .collect();
        let addresses = nodes.iter().map(|node| format!("127.0.0.1:{}", node.port));
        let mut create = Command::new("redis-cli");
        create.args(["--cluster", "create"]).args(addresses).args([
            "--cluster-replicas",
            "0",
            "--cluster-yes",
        ]);
        let (created, said) = run_within(&mut create, FORMING);
        assert!(created, "redis-cli --cluster create failed: {said}");
        let cluster = RedisCluster {
            nodes,
            _folder: folder,
        };
        // Each node knows every slot's node before a proxy asks any.
        cluster.wait_until_ok();
        cluster
    }

    /// The URL of its first node: the proxy finds the others from it.
    pub fn url(&self) -> String {
        self.nodes[0].url()
    }

    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// Kills node `n` at once (SIGKILL), as a crashed one.
    pub fn kill_node(&mut self, n: usize) {
        self.nodes[n].kill();
    }

    /// Kills every node at once, as a cluster gone.
    pub fn kill(&mut self) {
        self.nodes.iter_mut().for_each(RedisServer::kill);
    }

    /// Starts every node again on its ports, empty but for its cluster configuration, and waits until the
    /// cluster is ok again.
    pub fn restart(&mut self) {
        self.nodes.iter_mut().for_each(RedisServer::restart);
        self.wait_until_ok();
    }

    fn wait_until_ok(&self) {
        let deadline = Instant::now() + FORMING;
        while !self
            .nodes
            .iter()
            .all(|node| node.cli(&["cluster", "info"]).contains("cluster_state:ok"))
        {
            assert!(
                Instant::now() < deadline,
                "the Redis Cluster was not ok within {FORMING:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl RedisServer {
    /// What `redis-cli` prints for `arguments` on this server.
    pub fn cli(&self, arguments: &[&str]) -> String {
        let mut cli = Command::new("redis-cli");
        cli.args(["-p", &self.port.to_string()]).args(arguments);
        let (ran, said) = run_within(&mut cli, WAIT);
        assert!(ran, "redis-cli {arguments:?} failed: {said}");
        said
    }
}

/// Runs `command` to its end, killed if it takes longer than `limit`: whether it succeeded, and what it
/// printed.
fn run_within(command: &mut Command, limit: Duration) -> (bool, String) {
    let mut process = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start redis-cli (Debian's redis-tools, installed with redis-server)");
    let deadline = Instant::now() + limit;
    while process.try_wait().expect("wait for redis-cli").is_none() {
        if Instant::now() >= deadline {
            let _ = process.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let output = process.wait_with_output().expect("read redis-cli's output");
    let said = String::from_utf8_lossy(&output.stdout) + String::from_utf8_lossy(&output.stderr);
    (output.status.success(), said.into_owned())
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("its address").port()
}

/// Whether nginx answers on `port`. Connecting is not enough: between the port's pick and nginx's bind, a
/// listener of another test can take it (nginx then exits, but the connection succeeds).
fn nginx_answers(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    if stream
        .write_all(b"GET /healthz HTTP/1.0\r\nHost: balancer\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut answer = String::new();
    let _ = std::io::Read::read_to_string(&mut stream, &mut answer);
    answer.to_ascii_lowercase().contains("server: nginx")
}

fn ping(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    if stream.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut answer = [0u8; 7];
    stream.read_exact(&mut answer).is_ok() && &answer == b"+PONG\r\n"
}

/// Debian's nginx in front of `replicas`, configured by `docker/nginx.conf` (the compose file's balancer)
/// with the replicas' and the listen addresses replaced; stopped on drop.
pub struct Balancer {
    process: Child,
    port: u16,
    folder: TempDir,
}

impl Balancer {
    pub fn start(replicas: &[&str]) -> Balancer {
        let shipped = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("docker/nginx.conf"),
        )
        .expect("read docker/nginx.conf");
        assert_eq!(replicas.len(), 2, "docker/nginx.conf names two replicas");
        for _ in 0..5 {
            let port = free_port();
            let folder = TempDir::new("nginx");
            // Which replica served each request, for the tests to check that both did.
            let served = format!(
                "http {{\n    log_format replica '$upstream_addr';\n    access_log {} replica;",
                folder.path().join("logs/served.log").display()
            );
            let conf = shipped
                .replace("agent-bridge-1:8080", replicas[0])
                .replace("agent-bridge-2:8080", replicas[1])
                .replace("listen 8080;", &format!("listen 127.0.0.1:{port};"))
                .replacen("http {", &served, 1);
            assert_ne!(
                conf, shipped,
                "docker/nginx.conf has the addresses replaced"
            );
            std::fs::create_dir_all(folder.path().join("logs")).expect("nginx's log folder");
            let file = folder.path().join("nginx.conf");
            std::fs::write(&file, conf).expect("write nginx.conf");
            let globals = format!(
                "daemon off; master_process off; pid {};",
                folder.path().join("nginx.pid").display()
            );
            let mut process = Command::new(nginx())
                .arg("-p")
                .arg(folder.path())
                .arg("-c")
                .arg(&file)
                .arg("-e")
                .arg(folder.path().join("logs/error.log"))
                .args(["-g", &globals])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start nginx (Debian's nginx package; `bash .ci/run` installs it)");
            let deadline = Instant::now() + WAIT;
            while Instant::now() < deadline {
                if matches!(process.try_wait(), Ok(Some(_))) {
                    break;
                }
                if nginx_answers(port) {
                    return Balancer {
                        process,
                        port,
                        folder,
                    };
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = process.kill();
            let _ = process.wait();
        }
        panic!("nginx did not start on any of five free ports");
    }

    /// `127.0.0.1:PORT`.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The replicas that served a request so far, by address (nginx writes a request's line as it ends).
    pub fn served(&self) -> std::collections::BTreeSet<String> {
        let log =
            std::fs::read_to_string(self.folder.path().join("logs/served.log")).unwrap_or_default();
        log.lines()
            .flat_map(|line| line.split(", "))
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for Balancer {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

/// Debian installs nginx in /usr/sbin, which is not on every PATH.
fn nginx() -> PathBuf {
    let sbin = PathBuf::from("/usr/sbin/nginx");
    if sbin.exists() {
        sbin
    } else {
        PathBuf::from("nginx")
    }
}

// --- Proxies that outlive their conversations ---------------------------------------------------------

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
    /// Two proxies on a three-node Redis Cluster; turns alternate between them.
    Clustered,
}

/// The proxies of one test, their routes file and their store; all stopped on drop.
pub struct Deployment {
    topology: Topology,
    config: PathBuf,
    proxies: Vec<AgentBridge>,
    /// Which proxy serves the next turn.
    turn: usize,
    folder: TempDir,
    _redis: Option<SharedRedis>,
    balancer: Option<Balancer>,
}

/// The Redis replicas share: one server or a cluster.
pub enum SharedRedis {
    Server(RedisServer),
    Cluster(RedisCluster),
}

impl SharedRedis {
    pub fn url(&self) -> String {
        match self {
            SharedRedis::Server(server) => server.url(),
            SharedRedis::Cluster(cluster) => cluster.url(),
        }
    }

    pub fn kill(&mut self) {
        match self {
            SharedRedis::Server(server) => server.kill(),
            SharedRedis::Cluster(cluster) => cluster.kill(),
        }
    }

    pub fn restart(&mut self) {
        match self {
            SharedRedis::Server(server) => server.restart(),
            SharedRedis::Cluster(cluster) => cluster.restart(),
        }
    }
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
            Topology::Replicas | Topology::Balanced | Topology::Clustered => {
                let redis = match topology {
                    Topology::Clustered => SharedRedis::Cluster(RedisCluster::start()),
                    _ => SharedRedis::Server(RedisServer::start()),
                };
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
            Topology::Replicas | Topology::Balanced | Topology::Clustered => 2,
        };
        let proxies: Vec<AgentBridge> = (0..replicas)
            .map(|_| AgentBridge::start(serve_command(&config)))
            .collect();
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

    /// Through the balancer: checks that each replica served at least one request.
    pub fn assert_every_replica_served(&self) {
        let Some(balancer) = &self.balancer else {
            return;
        };
        let replicas: std::collections::BTreeSet<String> =
            self.proxies.iter().map(|p| p.address.clone()).collect();
        let deadline = Instant::now() + WAIT;
        while balancer.served() != replicas {
            assert!(
                Instant::now() < deadline,
                "nginx sent requests to {:?}, not to each of {replicas:?}",
                balancer.served()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn topology(&self) -> Topology {
        self.topology
    }

    /// Kills (SIGKILL) the replica that served the turn before this one.
    pub fn kill_the_last_turns_replica(&mut self) {
        let replicas = self.proxies.len();
        let process = &mut self.proxies[(self.turn + replicas - 1) % replicas].process;
        let _ = process.kill();
        let _ = process.wait();
    }

    /// Kills and restarts the proxy, or moves on to the other replica.
    pub fn between_turns(&mut self) {
        match self.topology {
            Topology::Restarted => {
                let killed = self.proxies.pop();
                // Dropping it kills it (SIGKILL) and reaps it.
                drop(killed);
                self.proxies
                    .push(AgentBridge::start(serve_command(&self.config)));
                assert!(
                    self.folder.path().join(REDB_PATH).exists(),
                    "the redb file is next to the routes file"
                );
            }
            Topology::Replicas | Topology::Clustered => self.turn += 1,
            Topology::Balanced => {}
        }
    }
}
