//! The floor of any proxy: a relay that copies bytes both ways between each client connection and a
//! connection of its own to the agent, understanding nothing. Run on the proxy's threads, it shows what one
//! more loopback hop and the threads that carry it cost on this machine, so that what agent-bridge adds
//! beyond forwarding reads apart from what forwarding itself costs.

use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

use crate::upstream::next_connection;

/// Relays every connection accepted on `listener` to `upstream` until `shutdown`.
pub async fn serve(
    listener: TcpListener,
    upstream: SocketAddr,
    mut shutdown: oneshot::Receiver<()>,
) {
    while let Some(mut client) = next_connection(&listener, &mut shutdown, "relay").await {
        tokio::spawn(async move {
            let Ok(mut agent) = TcpStream::connect(upstream).await else {
                return;
            };
            let _ = agent.set_nodelay(true);
            let _ = tokio::io::copy_bidirectional(&mut client, &mut agent).await;
        });
    }
}
