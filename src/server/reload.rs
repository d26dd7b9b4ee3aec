//! Live reload of the routes file. The file's folder is watched (an editor's rename-on-save, a write in
//! place and a Kubernetes ConfigMap's symlink swap all show there), the file's content hash is polled as well
//! (a single-file bind mount may see no event at all), and SIGHUP reloads at once. A valid file's
//! `[[routes]]` serve new requests from then on, each route keeping its state; an invalid one is logged and
//! counted, and the running routes stay.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;

use super::{LiveRoutes, Routes};
use crate::config::Config;
use crate::error::Result;
use crate::store::Store;
use crate::translate::Runs;

/// How often the file's content is checked without an event.
const POLL: Duration = Duration::from_secs(2);
/// How long after a change in the folder the file is read: an editor's save is several events.
const SETTLE: Duration = Duration::from_millis(100);

/// Applies a reloaded routes file to the running server.
#[derive(Clone)]
pub struct Reloader {
    pub(super) routes: LiveRoutes,
    pub(super) store: Arc<dyn Store>,
    pub(super) local: SocketAddr,
    pub(super) runs: Runs,
}

impl Reloader {
    /// Builds the routes of `config`, checked as `agent-bridge check` checks them, each keeping the state
    /// of the running route of its name; they serve new requests at once, while requests in flight finish
    /// on the routes they started on. On an error the running routes stay. Only the one [`Reload`] task
    /// calls it: two at once would both build on the same running routes.
    fn apply(&self, config: &Config) -> Result<()> {
        let earlier = self.routes.load_full();
        let routes = Routes::from_config(
            config,
            Arc::clone(&self.store),
            self.local,
            &self.runs,
            Some(&earlier),
        )?;
        self.routes.store(Arc::new(routes));
        Ok(())
    }
}

/// The routes file's watch: run it with [`Reload::run`].
pub struct Reload {
    reloader: Reloader,
    file: Option<WatchedFile>,
    hangup: Hangup,
}

#[cfg(unix)]
type Hangup = Option<tokio::signal::unix::Signal>;
#[cfg(not(unix))]
type Hangup = ();

struct WatchedFile {
    path: PathBuf,
    /// As last applied, before the command line's overrides: what a reload compares its keys with.
    applied: Config,
    /// The hash of the text last read.
    hash: u64,
    /// Cues from the folder's watcher; `None` when the folder cannot be watched (the poll still runs).
    changes: Option<(RecommendedWatcher, mpsc::Receiver<()>)>,
}

impl Reload {
    /// Starts watching `file`, the routes file and what was loaded from it (`None`: the built-in routes,
    /// nothing to watch), and installs the SIGHUP handler at once.
    pub fn start(reloader: Reloader, file: Option<(PathBuf, Config)>) -> Self {
        let file = file.map(|(path, applied)| {
            let changes = match watch_folder(&path) {
                Ok(changes) => Some(changes),
                Err(error) => {
                    tracing::warn!(
                        "cannot watch the folder of {}: {error}; its content is checked every {POLL:?}",
                        path.display()
                    );
                    None
                }
            };
            WatchedFile {
                hash: Config::read(&path).map_or(0, |text| hash(&text)),
                path,
                applied,
                changes,
            }
        });
        #[cfg(unix)]
        let hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
        #[cfg(not(unix))]
        let hangup = ();
        Self {
            reloader,
            file,
            hangup,
        }
    }

    /// Reloads whenever the file changes or SIGHUP arrives, until dropped with its task.
    pub async fn run(self) {
        let Self {
            reloader,
            mut file,
            mut hangup,
        } = self;
        let mut poll = tokio::time::interval(POLL);
        loop {
            let asked = tokio::select! {
                () = changed(file.as_mut()) => false,
                _ = poll.tick() => false,
                () = hung_up(&mut hangup) => true,
            };
            match &mut file {
                Some(file) => file.reload(&reloader, asked).await,
                None if asked => {
                    tracing::info!(
                        "SIGHUP: serving the built-in routes; there is no file to reload"
                    )
                }
                None => {}
            }
        }
    }
}

/// Resolves when SIGHUP arrives; never where there is none.
async fn hung_up(hangup: &mut Hangup) {
    #[cfg(unix)]
    if let Some(hangup) = hangup {
        if hangup.recv().await.is_some() {
            return;
        }
    }
    #[cfg(not(unix))]
    let () = hangup;
    std::future::pending().await
}

impl WatchedFile {
    /// Reads the file; reloads it when its content changed, or when `asked` (SIGHUP).
    async fn reload(&mut self, reloader: &Reloader, asked: bool) {
        let file = self.path.display();
        let Some(text) = self.read() else { return };
        let read = hash(&text);
        if read == self.hash && !asked {
            return;
        }
        // A file written in place is empty, then partly written, for a moment: what reads the same twice, a
        // moment apart, is whole. Anything else waits for the next cue or poll.
        tokio::time::sleep(SETTLE).await;
        if self.read().map(|again| hash(&again)) != Some(read) {
            return;
        }
        self.hash = read;
        let config = match Config::parse_file(&self.path, &text) {
            Ok(config) => config,
            Err(error) => return refused(reloader, &error.to_string()),
        };
        if let Err(error) = reloader.apply(&config) {
            return refused(reloader, &format!("{file}: {error}"));
        }
        reloader.runs.metrics().reloaded("applied");
        tracing::info!("{file}: reloaded ({} routes)", config.routes.len());
        let restart = self.applied.restart_keys(&config);
        if !restart.is_empty() {
            tracing::warn!(
                "{file}: {} changed; that takes a restart, the running values stay",
                restart.join(", ")
            );
        }
        self.applied.routes = config.routes;
    }

    /// The file's text; `None` while it is missing (between a swap's steps) or empty (being written).
    fn read(&self) -> Option<String> {
        match Config::read(&self.path) {
            Ok(text) if text.trim().is_empty() => None,
            Ok(text) => Some(text),
            Err(error) => {
                tracing::debug!("{error}");
                None
            }
        }
    }
}

fn refused(reloader: &Reloader, error: &str) {
    reloader.runs.metrics().reloaded("failed");
    tracing::error!("not reloaded, the running routes stay: {error}");
}

/// Resolves when something in the file's folder changed, once the change settled; never without a watcher.
async fn changed(file: Option<&mut WatchedFile>) {
    let Some((_, changes)) = file.and_then(|file| file.changes.as_mut()) else {
        return std::future::pending().await;
    };
    if changes.recv().await.is_none() {
        return std::future::pending().await;
    }
    tokio::time::sleep(SETTLE).await;
    while changes.try_recv().is_ok() {}
}

/// Watches the folder of `path` (not the file: a rename-on-save or a symlink swap replaces the file).
fn watch_folder(path: &Path) -> notify::Result<(RecommendedWatcher, mpsc::Receiver<()>)> {
    let folder = match path.parent() {
        Some(folder) if !folder.as_os_str().is_empty() => folder,
        _ => Path::new("."),
    };
    let (cue, changes) = mpsc::channel(1);
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if event.is_ok() {
            // A cue already waiting says the same.
            let _ = cue.try_send(());
        }
    })?;
    watcher.watch(folder, RecursiveMode::NonRecursive)?;
    Ok((watcher, changes))
}

fn hash(text: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    text.hash(&mut hasher);
    hasher.finish()
}
