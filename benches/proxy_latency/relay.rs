//! The floor of any proxy: a relay that copies bytes both ways between each client connection and a
//! connection of its own to the agent, understanding nothing. Run on the proxy's runtime, it shows what one
//! more loopback hop and the threads that carry it cost on this machine, so that what agent-bridge adds
//! beyond forwarding reads apart from what forwarding itself costs.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

/// Relays every connection accepted on `listener` to `upstream` until `shutdown`.
pub async fn serve(
    listener: TcpListener,
    upstream: SocketAddr,
    mut shutdown: oneshot::Receiver<()>,
) {
    loop {
        let mut client = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    eprintln!("relay: accept failed: {error}");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
            _ = &mut shutdown => return,
        };
        tokio::spawn(async move {
            let Ok(mut agent) = TcpStream::connect(upstream).await else {
                return;
            };
            let _ = client.set_nodelay(true);
            let _ = agent.set_nodelay(true);
            let _ = tokio::io::copy_bidirectional(&mut client, &mut agent).await;
        });
    }
}
