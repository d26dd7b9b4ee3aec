//! The answer to a connection beyond `max_connections` (counted in [`crate::gauges::Gauges`]), and how the
//! accept loop waits after a failed accept.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// How long a refused connection may take to receive its answer.
const REFUSAL_LINGER: Duration = Duration::from_secs(1);

/// Answers a connection beyond `max_connections` with a 503 and closes it. No route is known yet, so the
/// answer has the server's plain JSON error shape.
pub async fn refuse(mut stream: TcpStream) {
    const BODY: &str = r#"{"error":{"code":"TOO_MANY_CONNECTIONS","message":"the proxy has as many connections open as it serves; try again later"}}"#;
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n{BODY}",
        BODY.len()
    );
    let _ = tokio::time::timeout(REFUSAL_LINGER, async {
        stream.write_all(answer.as_bytes()).await?;
        stream.shutdown().await?;
        // Read what the client sent: a socket closed with unread bytes is reset, and the reset can discard
        // the answer before the client has read it.
        let mut sink = [0; 1024];
        while stream.read(&mut sink).await? > 0 {}
        Ok::<_, std::io::Error>(())
    })
    .await;
}

/// Failed accepts (EMFILE and ENFILE above all) fail again at once while their cause lasts: the accept loop
/// backs off, from [`Self::FIRST_PAUSE`] doubling to [`Self::LAST_PAUSE`], and logs at most one line per
/// [`Self::LOG_EVERY`].
pub struct AcceptFailures {
    pause: Duration,
    /// Failures since the last line logged.
    unlogged: u64,
    logged_at: Option<Instant>,
}

impl AcceptFailures {
    const FIRST_PAUSE: Duration = Duration::from_millis(10);
    const LAST_PAUSE: Duration = Duration::from_secs(1);
    const LOG_EVERY: Duration = Duration::from_secs(10);

    pub fn new() -> Self {
        Self {
            pause: Self::FIRST_PAUSE,
            unlogged: 0,
            logged_at: None,
        }
    }

    pub fn accepted(&mut self) {
        self.pause = Self::FIRST_PAUSE;
    }

    /// Records a failure, and returns how long to wait before accepting again.
    pub fn failed(&mut self, error: &std::io::Error) -> Duration {
        self.unlogged += 1;
        if self
            .logged_at
            .is_none_or(|at| at.elapsed() >= Self::LOG_EVERY)
        {
            tracing::warn!(
                "accept failed: {error} ({} failures since the last report); backing off up to {:?}",
                self.unlogged,
                Self::LAST_PAUSE
            );
            self.unlogged = 0;
            self.logged_at = Some(Instant::now());
        }
        let pause = self.pause;
        self.pause = (self.pause * 2).min(Self::LAST_PAUSE);
        pause
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn accept_failures_back_off_doubling_and_reset_on_success() {
        let mut failures = AcceptFailures::new();
        let error = std::io::Error::from_raw_os_error(24);
        let pauses: Vec<_> = (0..9).map(|_| failures.failed(&error)).collect();
        let millis: Vec<_> = pauses.iter().map(Duration::as_millis).collect();
        assert_eq!(millis, [10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
        failures.accepted();
        assert_eq!(failures.failed(&error), Duration::from_millis(10));
    }
}
