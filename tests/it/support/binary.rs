//! The `agent-bridge` binary, run as its users run it: a routes file in the temp directory ([`TempConfig`]),
//! and the process ([`AgentBridge`]) with its standard error kept, killed on drop.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

/// A command running the binary built with the tests.
pub fn agent_bridge() -> Command {
    Command::new(env!("CARGO_BIN_EXE_agent-bridge"))
}

/// `agent-bridge serve` with the routes file `config`, listening on `127.0.0.1:0`, its admin listener too.
pub fn serve_command(config: &Path) -> Command {
    let mut command = agent_bridge();
    command.arg("--config").arg(config).args([
        "--listen",
        "127.0.0.1:0",
        "--admin-listen",
        "127.0.0.1:0",
    ]);
    command
}

/// A path under the temp directory, named `agent-bridge-<name>-...`, that no other test uses.
pub fn unique_temp_path(name: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos());
    std::env::temp_dir().join(format!(
        "agent-bridge-{name}-{}-{nanos}",
        std::process::id()
    ))
}

/// A file under the temp directory with a name no other test uses; removed on drop.
pub struct TempConfig(pub PathBuf);

impl TempConfig {
    pub fn new(name: &str, text: &str) -> TempConfig {
        let path = unique_temp_path(name).with_extension("toml");
        std::fs::write(&path, text).expect("write the temp config");
        TempConfig(path)
    }
}

impl Drop for TempConfig {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A running `agent-bridge serve`; killed on drop, so a failing test leaves none behind.
pub struct AgentBridge {
    pub process: Child,
    /// Where it listens, as it logged it (`127.0.0.1:PORT`).
    pub address: String,
    /// Where its admin listener listens, as it logged it.
    pub admin: String,
    log: Arc<Mutex<String>>,
}

impl AgentBridge {
    /// Starts `command` (logging at info unless it sets `RUST_LOG`) and waits up to 10 s for the address
    /// it logs once it listens.
    pub fn start(mut command: Command) -> AgentBridge {
        if !command.get_envs().any(|(name, _)| name == "RUST_LOG") {
            command.env("RUST_LOG", "info");
        }
        let mut process = command
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start agent-bridge");
        let stderr = process.stderr.take().expect("its standard error");
        let log = Arc::new(Mutex::new(String::new()));
        let (found, address) = mpsc::channel();
        let sink = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { return };
                if let Some((_, rest)) = line.split_once("/routes) on http://") {
                    let address = rest.split(['"', ' ']).next().unwrap_or_default();
                    let _ = found.send(("admin", address.to_owned()));
                }
                if let Some((_, rest)) = line.split_once("listening on http://") {
                    let address = rest.split_whitespace().next().unwrap_or_default();
                    let _ = found.send(("traffic", address.to_owned()));
                }
                let mut log = sink.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        let mut running = AgentBridge {
            process,
            address: String::new(),
            admin: String::new(),
            log,
        };
        // The admin address is logged first, then the traffic one.
        while running.address.is_empty() {
            match address.recv_timeout(Duration::from_secs(10)) {
                Ok(("admin", admin)) => running.admin = admin,
                Ok((_, traffic)) => running.address = traffic,
                Err(_) => panic!(
                    "agent-bridge logs its address within 10 s; its log:\n{}",
                    running.log()
                ),
            }
        }
        running
    }

    /// Everything it has logged so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Its log once it holds `text` (read from its standard error as it comes); fails the test after 10 s.
    pub async fn logged(&self, text: &str) -> String {
        super::within(&format!("agent-bridge to log {text:?}"), async {
            loop {
                let log = self.log();
                if log.contains(text) {
                    return log;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
    }

    /// Sends it `signal`.
    #[cfg(unix)]
    pub fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill(2) on the pid of a child this test started and has not reaped.
        let sent = unsafe { libc::kill(self.process.id() as libc::pid_t, signal) };
        assert_eq!(sent, 0, "signal {signal} sent");
    }
}

impl Drop for AgentBridge {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}
