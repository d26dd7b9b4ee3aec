//! The serving threads: each runs a single-threaded tokio runtime of its own. One accept loop, on the first
//! thread, hands each new connection to the thread serving the fewest (as actix-server does), and what the
//! connection starts (its HTTP, its run, its connection to the agent) stays on that thread, so an event
//! crosses no thread on its way through the proxy. For the same reason agent connections are pooled per
//! thread (src/upstream.rs), and a CMDC run is driven on the thread of the connection that streams its
//! events.
//!
//! Why not tokio's multi-threaded runtime: its scheduler wakes idle threads to share out work as soon as a
//! thread has more than it can run at once, and a proxied event makes work for two tasks in a row (the
//! agent's connection, then the client's, which runs the translation). Measured on every pair with 2
//! threads, it woke 2.0–2.7 threads per event of a lone stream (now 1.0–1.1), and the proxy's CPU per event
//! is now a median 28 % lower at 1 and 100 streams, 6 % at 1,000 (benches/RESULTS.md §2).
//!
//! Why one accept loop rather than one per thread on a shared socket: a thread keeps what it accepts, and an
//! agent's stream lives long, so the split has to be even when the streams start. Accepting for themselves,
//! two threads got 58/42 and 45/55 of the proxy's work for 1,000 streams in the load tool (the kernel wakes
//! whichever thread is idle); handed out by count, 50/50. Latency did not measurably change on that VM.

use std::future::Future;
use std::io;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use tokio::net::TcpStream;
use tokio::runtime::{Builder, Handle};
use tokio::sync::oneshot;

/// Threads with a single-threaded runtime each. Dropping them stops every thread and the tasks still on it.
pub struct Workers {
    spawner: Spawner,
    threads: Vec<(oneshot::Sender<()>, JoinHandle<()>)>,
}

/// Hands connections to the serving threads; cloned freely.
#[derive(Clone)]
pub struct Spawner {
    threads: Arc<[Thread]>,
}

struct Thread {
    runtime: Handle,
    /// The connections handed to it that are still open.
    connections: Arc<AtomicUsize>,
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
        let mut runtimes = Vec::with_capacity(count.get());
        let mut threads = Vec::with_capacity(count.get());
        for _ in 0..count.get() {
            let hook = Arc::clone(&on_thread_start);
            let runtime = Builder::new_current_thread()
                .enable_all()
                .thread_name(name)
                .on_thread_start(move || hook())
                .build()?;
            let (stop, stopped) = oneshot::channel::<()>();
            let hook = Arc::clone(&on_thread_start);
            runtimes.push(Thread {
                runtime: runtime.handle().clone(),
                connections: Arc::default(),
            });
            let thread = std::thread::Builder::new()
                .name(name.to_owned())
                .spawn(move || {
                    hook();
                    // A dropped sender stops the thread too.
                    let _ = runtime.block_on(stopped);
                })?;
            threads.push((stop, thread));
        }
        Ok(Self {
            spawner: Spawner {
                threads: runtimes.into(),
            },
            threads,
        })
    }

    pub fn spawner(&self) -> Spawner {
        self.spawner.clone()
    }
}

impl Spawner {
    /// The first thread's runtime: where the accept loop runs.
    pub fn first(&self) -> &Handle {
        &self.threads[0].runtime
    }

    /// Moves `stream` to the thread with the fewest open connections (the first of them on a tie) and
    /// serves it there with `serve`; the connection counts until that ends.
    pub fn serve<F>(
        &self,
        stream: TcpStream,
        serve: impl FnOnce(TcpStream) -> F + Send + 'static,
    ) -> io::Result<()>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let thread = self
            .threads
            .iter()
            .min_by_key(|thread| thread.connections.load(Ordering::Relaxed))
            .expect("at least one thread");
        // Taken off this thread's runtime, to be registered with the chosen one's.
        let stream = stream.into_std()?;
        let open = Open::count(&thread.connections);
        thread.runtime.spawn(async move {
            let _open = open;
            match TcpStream::from_std(stream) {
                Ok(stream) => serve(stream).await,
                Err(error) => tracing::warn!("cannot serve a connection on its thread: {error}"),
            }
        });
        Ok(())
    }
}

/// One open connection of a thread, counted while it lives.
struct Open(Arc<AtomicUsize>);

impl Open {
    fn count(connections: &Arc<AtomicUsize>) -> Self {
        connections.fetch_add(1, Ordering::Relaxed);
        Self(Arc::clone(connections))
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
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

#[cfg(test)]
mod tests {
    use std::thread::ThreadId;
    use std::time::Duration;

    use tokio::net::TcpListener;

    use super::*;

    const LIMIT: Duration = Duration::from_secs(5);

    /// A connection being served: its client end, the thread serving it, and what ends its serving.
    struct Served {
        _client: TcpStream,
        thread: ThreadId,
        end: oneshot::Sender<()>,
    }

    /// Connects to `listener` and hands the accepted connection to `spawner`; served until `end` fires.
    async fn connect(listener: &TcpListener, spawner: &Spawner) -> Served {
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (stream, _) = listener.accept().await.unwrap();
        let (end, ended) = oneshot::channel::<()>();
        let (tell, told) = oneshot::channel();
        spawner
            .serve(stream, move |_stream| async move {
                let _ = tell.send(std::thread::current().id());
                let _ = ended.await;
            })
            .unwrap();
        let thread = tokio::time::timeout(LIMIT, told).await.unwrap().unwrap();
        Served {
            _client: client,
            thread,
            end,
        }
    }

    #[tokio::test]
    async fn each_connection_goes_to_the_thread_serving_the_fewest_and_an_ended_one_no_longer_counts(
    ) {
        let workers = Workers::start(NonZeroUsize::new(2).unwrap(), "test").unwrap();
        let spawner = workers.spawner();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();

        let first = connect(&listener, &spawner).await;
        let second = connect(&listener, &spawner).await;
        assert_ne!(first.thread, second.thread, "one each");
        assert_ne!(first.thread, std::thread::current().id());

        let second_thread = second.thread;
        second.end.send(()).unwrap();
        tokio::time::timeout(LIMIT, async {
            while spawner.threads[1].connections.load(Ordering::Relaxed) > 0 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await
        .expect("the ended connection is no longer counted");

        let third = connect(&listener, &spawner).await;
        assert_eq!(third.thread, second_thread, "to the thread with none");
        let fourth = connect(&listener, &spawner).await;
        assert_eq!(fourth.thread, first.thread, "a tie goes to the first");
        drop((first.end, third.end, fourth.end));
    }
}
