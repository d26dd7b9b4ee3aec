//! The stores the proxy keeps conversations in, started for real: Debian's `redis-server` on a free port
//! ([`RedisServer`], stopped on drop; `.ci/run` installs it), and a folder of the test's own for redb files
//! ([`TempDir`], removed on drop).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::WAIT;

/// A folder under the temp directory that no other test uses; removed with what it holds on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_nanos());
        let path = std::env::temp_dir().join(format!(
            "agent-bridge-{name}-{}-{nanos}",
            std::process::id()
        ));
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
}

impl RedisServer {
    pub fn start() -> RedisServer {
        Self::start_with(&[])
    }

    /// A server with extra settings (`("maxmemory-policy", "allkeys-lru")`).
    pub fn start_with(settings: &[(&str, &str)]) -> RedisServer {
        let settings = settings
            .iter()
            .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
            .collect();
        let mut server = RedisServer {
            process: None,
            port: 0,
            settings,
        };
        // A port found free may be taken before redis binds it: another one is tried.
        for _ in 0..5 {
            server.port = free_port();
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

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("its address").port()
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
