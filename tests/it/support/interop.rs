//! What the interop tests (`tests/it/interop_*.rs`) share: the real peers they start as child processes
//! ([`Process`]), the drivers they run to completion ([`run_driver`]), and the check that what those need is
//! installed ([`require_installed`]), and the routes they serve ([`route`]).

use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, Command};

use super::{within_for, Route};

/// A route at `/<name>` with timeouts that leave real peers room on a busy machine.
pub fn route(name: &str, inbound: &str, outbound: &str) -> Route {
    Route::new(name, &format!("/{name}"), inbound, outbound)
        .timeout("20s")
        .connect_timeout("5s")
}

/// Fails the test unless `path` exists, naming the command that installs it.
pub fn require_installed(path: &Path, what: &str) {
    require_installed_with(path, what, "the Python venv tests/interop/.venv");
}

/// [`require_installed`], naming `venvs` as the Python venvs `bash .ci/run` makes.
pub fn require_installed_with(path: &Path, what: &str, venvs: &str) {
    assert!(
        path.exists(),
        "{what} is not installed ({} is missing): run `bash .ci/run` from the repository root, which \
         installs the interop dependencies (npm ci in tests/interop/*/client-*, {venvs}) and then runs every \
         test",
        path.display()
    );
}

/// A process that printed `{"port": N}` as its first stdout line; killed when dropped. Its stderr is kept.
pub struct Process {
    pub port: u16,
    stderr: Arc<Mutex<String>>,
    _child: Child,
}

impl Process {
    /// Runs `command` in `dir` and waits up to `limit` for its port; fails the test, with the process's
    /// stderr, if it prints none.
    pub async fn start(
        what: &str,
        mut command: Command,
        dir: impl AsRef<Path>,
        limit: Duration,
    ) -> Process {
        command
            .current_dir(dir.as_ref())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut pipe = child.stderr.take().expect("stderr is piped");
        let sink = Arc::clone(&stderr);
        tokio::spawn(async move {
            let mut buf = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let stdout = child.stdout.take().expect("stdout is piped");
        let mut lines = BufReader::new(stdout).lines();
        let first = within_for(
            limit,
            &format!("{what} to print its port"),
            lines.next_line(),
        )
        .await;
        let port = first
            .ok()
            .flatten()
            .and_then(|line| serde_json::from_str::<Value>(&line).ok())
            .and_then(|v| v["port"].as_u64())
            .and_then(|port| u16::try_from(port).ok());
        let Some(port) = port else {
            // Give the process a moment to write why it stopped.
            tokio::time::sleep(Duration::from_millis(200)).await;
            panic!(
                "{what} did not print its port; its stderr:\n{}",
                stderr.lock().unwrap()
            );
        };
        // Keep reading stdout so the process never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Process {
            port,
            stderr,
            _child: child,
        }
    }

    /// The URL of `path` on the process's port.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Everything the process wrote to stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }
}

/// What one driver run printed: its exit code, its last JSON stdout line, its stderr.
pub struct DriverOutput {
    pub code: Option<i32>,
    pub report: Value,
    pub stderr: String,
}

/// Runs the driver `command` to completion within `limit` and parses its report (its last JSON stdout line).
/// Failure messages name `who` and `target`; `cannot_run` is the message when it cannot be spawned, `ran` the
/// one when it cannot be waited for.
pub async fn run_driver(
    mut command: Command,
    limit: Duration,
    who: &str,
    target: &str,
    cannot_run: &str,
    ran: &str,
) -> DriverOutput {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = command
        .spawn()
        .unwrap_or_else(|e| panic!("{cannot_run}: {e}"));
    let output = within_for(
        limit,
        &format!("{who} against {target}"),
        child.wait_with_output(),
    )
    .await
    .expect(ran);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let report = stdout
        .lines()
        .rev()
        .find_map(|line| serde_json::from_str::<Value>(line).ok())
        .unwrap_or_else(|| {
            panic!(
                "{who} printed no report (exit {:?})\nstdout: {stdout}\nstderr: {stderr}",
                output.status.code()
            )
        });
    DriverOutput {
        code: output.status.code(),
        report,
        stderr,
    }
}
