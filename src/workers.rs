//! The serving threads: each runs a single-threaded tokio runtime of its own, and all of them accept from one
//! listening socket. What a connection starts (its HTTP, its run, its connection to the agent) stays on the
//! thread that accepted it, so an event crosses no thread on its way through the proxy. For the same reason
//! agent connections are pooled per thread (src/upstream.rs), and a CMDC run is driven on the thread of the
//! connection that streams its events. What a thread accepts, it keeps: nothing is stolen, so a burst of
//! connections can load one thread more than another.
//!
//! Why not tokio's multi-threaded runtime: its scheduler wakes idle threads to share out work as soon as a
//! thread has more than it can run at once, and a proxied event makes work for two tasks in a row (the
//! agent's connection, then the client's, which runs the translation). Measured on every pair with 2
//! threads, it woke 2.0–2.7 threads per event of a lone stream (now 1.0–1.1), and the proxy's CPU per event
//! is now a median 28 % lower at 1 and 100 streams, 6 % at 1,000 (benches/RESULTS.md §4).
//!
//! Why each thread accepts for itself rather than one accept loop handing connections to the thread serving
//! the fewest (actix-server's way): tried and measured in the load tool (A2A → A2A and AG-UI → AgentScope,
//! 1,000 streams). The kernel's split left the threads 58/42 of the work at worst (50/50 by count), per-event
//! latency moved only within the VM's spread, and A2A → A2A's first event took twice as long in the connect
//! burst (p50 23–24 ms → 49–57 ms): one thread accepted every connection and moved each to another runtime
//! (benches/RESULTS.md §3).

use std::future::Future;
use std::io;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::thread::JoinHandle;

use tokio::net::TcpListener;
use tokio::runtime::{Builder, Handle};
use tokio::sync::oneshot;

/// Threads with a single-threaded runtime each. Dropping them stops every thread and the tasks still on it.
pub struct Workers {
    handles: Vec<Handle>,
    threads: Vec<(oneshot::Sender<()>, JoinHandle<()>)>,
}

impl Workers {
    /// Starts `count` threads named `name`.
    pub fn start(count: NonZeroUsize, name: &str) -> io::Result<Self> {
        Self::start_with(count, name, || {})
    }

    /// Starts `count` threads named `name`; `on_thread_start` runs first on each of them, and on every
    /// thread their runtimes start for blocking work.
    pub fn start_with(
        count: NonZeroUsize,
        name: &str,
        on_thread_start: impl Fn() + Send + Sync + 'static,
    ) -> io::Result<Self> {
        let on_thread_start = Arc::new(on_thread_start);
        let mut workers = Self {
            handles: Vec::with_capacity(count.get()),
            threads: Vec::with_capacity(count.get()),
        };
        for _ in 0..count.get() {
            let hook = Arc::clone(&on_thread_start);
            let runtime = Builder::new_current_thread()
                .enable_all()
                .thread_name(name)
                .on_thread_start(move || hook())
                .build()?;
            let (stop, stopped) = oneshot::channel::<()>();
            let hook = Arc::clone(&on_thread_start);
            workers.handles.push(runtime.handle().clone());
            let thread = std::thread::Builder::new()
                .name(name.to_owned())
                .spawn(move || {
                    hook();
                    // A dropped sender stops the thread too.
                    let _ = runtime.block_on(stopped);
                })?;
            workers.threads.push((stop, thread));
        }
        Ok(workers)
    }

    /// Serves `listener` on every thread: each registers a handle of its own on the socket and runs
    /// `serve` with it. The kernel hands each new connection to one of them.
    pub fn serve_each<F>(
        &self,
        listener: std::net::TcpListener,
        mut serve: impl FnMut(TcpListener) -> F,
    ) -> io::Result<()>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        for handle in &self.handles {
            // Registered with this thread's runtime, not the caller's.
            let _runtime = handle.enter();
            let listener = TcpListener::from_std(listener.try_clone()?)?;
            handle.spawn(serve(listener));
        }
        Ok(())
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for (stop, thread) in self.threads.drain(..) {
            let _ = stop.send(());
            let _ = thread.join();
        }
    }
}
