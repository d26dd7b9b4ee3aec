//! The stores the proxy under test keeps its conversations in (`BENCH_STORE`, a list): `memory` (the
//! default), `redb` (a file in the temp directory, removed after), or `redis` (Debian's redis-server, started
//! for the pair on a free port and stopped after). With more than one, the pair runs one proxy per store and
//! measures them at every level side by side, at once, so they can be compared as ratios of one run.
//!
//! Every stream is a turn of a conversation of its own: one load before the run and one save after it. The
//! runs that can be read again (A2A tasks, CMDC runs) also append their events to a log, in gathered
//! batches.

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct BenchStore {
    pub name: &'static str,
    /// The `[store]` table, for the top of the routes file.
    pub toml: String,
    redis: Option<Child>,
    file: Option<PathBuf>,
}

impl BenchStore {
    /// The stores `BENCH_STORE` names, comma-separated (memory when unset), each started.
    pub fn all_from_env() -> Result<Vec<Self>, String> {
        let names = std::env::var("BENCH_STORE").unwrap_or_else(|_| "memory".into());
        let names: Vec<&str> = names.split(',').map(str::trim).collect();
        if let Some(twice) = names
            .iter()
            .find(|name| names.iter().filter(|n| n == name).count() > 1)
        {
            return Err(format!("BENCH_STORE: {twice} named twice"));
        }
        names.into_iter().map(Self::start).collect()
    }

    fn start(backend: &str) -> Result<Self, String> {
        match backend {
            "memory" => Ok(Self {
                name: "memory",
                toml: String::new(),
                redis: None,
                file: None,
            }),
            "redb" => {
                let file = std::env::temp_dir()
                    .join(format!("agent-bridge-bench-{}.redb", std::process::id()));
                Ok(Self {
                    name: "redb",
                    toml: format!(
                        "[store]\nbackend = \"redb\"\npath = \"{}\"\n",
                        file.display()
                    ),
                    redis: None,
                    file: Some(file),
                })
            }
            "redis" => {
                let port = TcpListener::bind("127.0.0.1:0")
                    .and_then(|listener| listener.local_addr())
                    .map_err(|e| format!("a free port for redis-server: {e}"))?
                    .port();
                let redis = Command::new("redis-server")
                    .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
                    .args(["--save", "", "--appendonly", "no"])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .map_err(|e| format!("start redis-server (Debian's package): {e}"))?;
                let deadline = Instant::now() + Duration::from_secs(10);
                while TcpStream::connect(("127.0.0.1", port)).is_err() {
                    if Instant::now() > deadline {
                        return Err("redis-server did not listen within 10 s".into());
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                Ok(Self {
                    name: "redis",
                    toml: format!(
                        "[store]\nbackend = \"redis\"\nurl = \"redis://127.0.0.1:{port}\"\n"
                    ),
                    redis: Some(redis),
                    file: None,
                })
            }
            other => Err(format!("BENCH_STORE: {other}; use memory, redb or redis")),
        }
    }
}

impl Drop for BenchStore {
    fn drop(&mut self) {
        if let Some(redis) = &mut self.redis {
            let _ = redis.kill();
            let _ = redis.wait();
        }
        if let Some(file) = &self.file {
            let _ = std::fs::remove_file(file);
        }
    }
}
