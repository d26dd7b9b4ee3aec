//! When a connection last moved a byte. hyper has no idle timeout of its own: the server wraps each socket
//! in [`Tracked`], and its connection task closes the connection once it has been quiet for `keepalive_idle`.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

/// The last time a connection read or wrote, shared by its socket and its task.
pub struct Activity {
    start: Instant,
    /// Milliseconds from `start`.
    last: AtomicU64,
}

impl Activity {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            start: Instant::now(),
            last: AtomicU64::new(0),
        })
    }

    fn touch(&self) {
        let now = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.store(now, Ordering::Relaxed);
    }

    fn last(&self) -> Instant {
        self.start + Duration::from_millis(self.last.load(Ordering::Relaxed))
    }

    /// Resolves once no byte has moved for `idle`.
    pub async fn quiet_for(&self, idle: Duration) {
        loop {
            let deadline = self.last() + idle;
            if deadline <= Instant::now() {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

pin_project! {
    /// A socket that records in its [`Activity`] every read and write of a byte, except HTTP/2 PING frames:
    /// hyper pings every HTTP/2 connection, idle or not, so counting pings would keep every live client's
    /// connection open forever.
    pub struct Tracked<T> {
        #[pin]
        io: T,
        activity: Arc<Activity>,
    }
}

impl<T> Tracked<T> {
    pub fn new(io: T, activity: Arc<Activity>) -> Self {
        Self { io, activity }
    }

    fn record(activity: &Activity, bytes: &[u8]) {
        if !bytes.is_empty() && !only_pings(bytes) {
            activity.touch();
        }
    }
}

/// Whether `bytes` are whole HTTP/2 PING frames (or acks) and nothing else: 9 bytes of header (length 8,
/// type 6, flags, stream 0) and 8 of payload each.
fn only_pings(bytes: &[u8]) -> bool {
    const PING_FRAME: usize = 17;
    bytes.len().is_multiple_of(PING_FRAME)
        && bytes
            .chunks(PING_FRAME)
            .all(|frame| frame[..4] == [0, 0, 8, 6] && frame[5..9] == [0; 4])
}

impl<T: AsyncRead> AsyncRead for Tracked<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.project();
        let before = buf.filled().len();
        let result = this.io.poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = result {
            Self::record(this.activity, &buf.filled()[before..]);
        }
        result
    }
}

impl<T: AsyncWrite> AsyncWrite for Tracked<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.project();
        let result = this.io.poll_write(cx, buf);
        if let Poll::Ready(Ok(written)) = result {
            Self::record(this.activity, &buf[..written]);
        }
        result
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.project();
        let result = this.io.poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(written)) = result {
            // A ping fits in one slice; bytes across several are more than pings.
            let first = bufs.iter().find(|buf| !buf.is_empty());
            match first.filter(|first| written <= first.len()) {
                Some(first) => Self::record(this.activity, &first[..written]),
                None if written > 0 => this.activity.touch(),
                None => {}
            }
        }
        result
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().io.poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().io.poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PING: [u8; 17] = [0, 0, 8, 6, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8];
    const PING_ACK: [u8; 17] = [0, 0, 8, 6, 1, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8];

    #[test]
    fn pings_and_their_acks_are_not_activity_but_anything_else_is() {
        assert!(only_pings(&PING));
        assert!(only_pings(&[PING, PING_ACK].concat()));
        let settings = [0, 0, 0, 4, 0, 0, 0, 0, 0];
        assert!(!only_pings(&[&PING[..], &settings[..]].concat()));
        assert!(!only_pings(b"GET / HTTP/1.1\r\n"));
        assert!(!only_pings(&PING[..9]));
    }

    #[tokio::test(start_paused = true)]
    async fn quiet_for_waits_from_the_last_byte() {
        let activity = Activity::new();
        let (client, server) = tokio::io::duplex(64);
        let mut tracked = Tracked::new(server, Arc::clone(&activity));
        tokio::time::sleep(Duration::from_secs(5)).await;
        let mut client = client;
        tokio::io::AsyncWriteExt::write_all(&mut client, b"hi")
            .await
            .unwrap();
        let mut buf = [0; 2];
        tokio::io::AsyncReadExt::read_exact(&mut tracked, &mut buf)
            .await
            .unwrap();

        let started = Instant::now();
        activity.quiet_for(Duration::from_secs(10)).await;
        assert_eq!(started.elapsed(), Duration::from_secs(10));
    }
}
