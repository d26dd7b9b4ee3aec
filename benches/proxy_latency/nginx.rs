//! nginx as a pass-through proxy: the floor a production proxy sets. Debian's `nginx` package, started on a
//! free port in front of the scripted agent with `proxy_buffering off` (each event leaves as it arrives, as
//! through agent-bridge), one process, keep-alive to the agent, and no access log; the steps read its CPU
//! time by its pid. Absent nginx, the path is skipped with a note.

use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running nginx, stopped on drop.
pub struct Nginx {
    process: Child,
    pub addr: SocketAddr,
    folder: PathBuf,
}

/// Debian installs nginx in /usr/sbin, which is not on every PATH.
fn program() -> Option<PathBuf> {
    let sbin = PathBuf::from("/usr/sbin/nginx");
    if sbin.exists() {
        return Some(sbin);
    }
    let found = Command::new("nginx")
        .arg("-v")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    found.is_ok().then(|| PathBuf::from("nginx"))
}

fn config(listen: SocketAddr, upstream: SocketAddr, folder: &Path) -> String {
    format!(
        "daemon off;\nmaster_process off;\nworker_processes 1;\nworker_rlimit_nofile 65536;\n\
         pid {pid};\nerror_log {folder}/error.log warn;\n\
         events {{ worker_connections 20000; }}\n\
         http {{\n  access_log off;\n  client_body_temp_path {folder}/body;\n  proxy_temp_path {folder}/proxy;\n\
         fastcgi_temp_path {folder}/fastcgi;\n  uwsgi_temp_path {folder}/uwsgi;\n  scgi_temp_path {folder}/scgi;\n\
         upstream agent {{ server {upstream}; keepalive 1024; }}\n\
         server {{\n    listen {listen} backlog=4096;\n    location / {{\n      proxy_pass http://agent;\n\
         proxy_http_version 1.1;\n      proxy_set_header Connection \"\";\n      proxy_buffering off;\n\
         proxy_request_buffering off;\n      proxy_read_timeout 300s;\n    }}\n  }}\n}}\n",
        pid = folder.join("nginx.pid").display(),
        folder = folder.display(),
    )
}

impl Nginx {
    /// nginx in front of `upstream`, or why not.
    pub fn start(upstream: SocketAddr) -> Result<Nginx, String> {
        let program = program().ok_or("nginx is not installed (Debian's `nginx` package)")?;
        for attempt in 0..5 {
            let listen = free_port()?;
            let folder =
                std::env::temp_dir().join(format!("bench-nginx-{}-{attempt}", std::process::id()));
            std::fs::create_dir_all(&folder).map_err(|e| format!("nginx's folder: {e}"))?;
            let file = folder.join("nginx.conf");
            std::fs::write(&file, config(listen, upstream, &folder))
                .map_err(|e| format!("nginx.conf: {e}"))?;
            let mut command = Command::new(&program);
            // nginx (no master, no daemon) goes with the bench, even when the bench's time limit ends it.
            // SAFETY: prctl only sets this child's parent-death signal between fork and exec.
            unsafe {
                command.pre_exec(|| {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                    Ok(())
                });
            }
            let mut process = command
                .arg("-p")
                .arg(&folder)
                .arg("-c")
                .arg(&file)
                .arg("-e")
                .arg(folder.join("error.log"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| format!("starting nginx: {e}"))?;
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if matches!(process.try_wait(), Ok(Some(_))) {
                    // Refused its configuration, or lost its port to another listener: its log says which.
                    let log = std::fs::read_to_string(folder.join("error.log")).unwrap_or_default();
                    let _ = std::fs::remove_dir_all(&folder);
                    if !log.contains("Address already in use") {
                        return Err(format!("nginx exited at start: {}", log.trim()));
                    }
                    break;
                }
                if answers(listen) {
                    return Ok(Nginx {
                        process,
                        addr: listen,
                        folder,
                    });
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = process.kill();
            let _ = process.wait();
            let _ = std::fs::remove_dir_all(&folder);
        }
        Err("nginx did not start on any of five free ports".into())
    }

    pub fn pid(&self) -> u32 {
        self.process.id()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
        let _ = std::fs::remove_dir_all(&self.folder);
    }
}

fn free_port() -> Result<SocketAddr, String> {
    let listener =
        std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("a free port: {e}"))?;
    listener
        .local_addr()
        .map_err(|e| format!("a free port: {e}"))
}

/// Whether nginx (not another listener that took the port meanwhile) answers at `addr`.
fn answers(addr: SocketAddr) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(addr) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    // A request nginx answers itself (the agent would need a body): a malformed one gets nginx's 400.
    if stream.write_all(b"BAD\r\n\r\n").is_err() {
        return false;
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.to_ascii_lowercase().contains("server: nginx")
}
