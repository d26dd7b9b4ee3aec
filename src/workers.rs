//! The serving threads: each runs a single-threaded tokio runtime of its own, and all of them accept from one
//! listening socket. What a connection starts (its HTTP, its run, a new connection to the agent) stays on
//! the thread that accepted it, so an event crosses no thread on its way through the proxy. (A pooled
//! agent connection opened by another thread is the exception: its bytes cross once.)
//!
//! Why not tokio's multi-threaded runtime: its scheduler wakes idle threads to share out work as soon as a
//! thread has more than it can run at once, and a proxied event makes work for two tasks in a row (the
//! agent's connection, then the client's, which runs the translation). Measured with one stream (AG-UI →
//! AG-UI, 2 threads), that woke a second thread for every event: 2.1 thread wake-ups per event instead of
//! 1.0, and 15–25 % more CPU per event. Under load, when the threads are busy anyway, the two measure the
//! same (benches/RESULTS.md §2).

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
