//! The admin listener (`admin_listen`, default `127.0.0.1:9091`): `GET /metrics`, `GET /readyz` and
//! `GET /routes`, on a port of its own so that they are never served on the traffic port by accident. It
//! knows no protocol.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{header, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::LiveRoutes;
use crate::body::{full, json_response, Body};
use crate::error::{Error, Result};
use crate::metrics::{self, Metrics};
use crate::store::Store;

/// How long `/readyz` waits for the store to answer.
const STORE_CHECK: Duration = Duration::from_secs(2);
/// How long an admin connection may take to send a request's headers.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// What the admin endpoints read: the server's metrics, its store, and whether it is draining.
#[derive(Clone)]
pub struct AdminState {
    pub(super) metrics: Arc<Metrics>,
    pub(super) store: Arc<dyn Store>,
    /// True from the moment the server starts to stop.
    pub(super) draining: watch::Receiver<bool>,
    /// The routes serving, whose view `GET /routes` answers.
    pub(super) routes: LiveRoutes,
}

/// The admin listener, bound.
pub struct Admin {
    listener: TcpListener,
    state: AdminState,
}

impl Admin {
    /// Binds `address`; a clear error names it when it cannot be.
    pub async fn bind(address: SocketAddr, state: AdminState) -> Result<Admin> {
        let listener = TcpListener::bind(address)
            .await
            .map_err(|e| Error::config(format!("cannot listen on admin_listen {address}: {e}")))?;
        Ok(Admin { listener, state })
    }

    pub fn local_addr(&self) -> SocketAddr {
        // A bound listener always has an address.
        self.listener
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)))
    }

    /// Serves on the current runtime, each connection on a task of its own, until dropped with its task.
    pub async fn serve(self) {
        let mut http = http1::Builder::new();
        http.timer(TokioTimer::new())
            .header_read_timeout(HEADER_READ_TIMEOUT);
        loop {
            let Ok((stream, _)) = self.listener.accept().await else {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            let state = self.state.clone();
            let service = service_fn(move |request: Request<Incoming>| {
                let state = state.clone();
                async move { Ok::<_, std::convert::Infallible>(answer(&state, &request).await) }
            });
            let connection = http.serve_connection(TokioIo::new(stream), service);
            tokio::spawn(async move {
                if let Err(error) = connection.await {
                    tracing::debug!("an admin connection ended with an error: {error}");
                }
            });
        }
    }
}

async fn answer(state: &AdminState, request: &Request<Incoming>) -> Response<Body> {
    if request.method() != Method::GET {
        return plain(StatusCode::METHOD_NOT_ALLOWED, "only GET here\n".into());
    }
    match request.uri().path() {
        "/metrics" => {
            let mut response = plain(StatusCode::OK, state.metrics.encode());
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static(metrics::CONTENT_TYPE),
            );
            response
        }
        "/readyz" => ready(state).await,
        "/routes" => json_response(StatusCode::OK, state.routes.load().view.to_vec()),
        _ => plain(
            StatusCode::NOT_FOUND,
            "not found: GET /metrics, /readyz or /routes\n".into(),
        ),
    }
}

/// `200` while the proxy takes new work: `503` once it drains, or while its store does not answer.
async fn ready(state: &AdminState) -> Response<Body> {
    if *state.draining.borrow() {
        return not_ready("draining: the proxy is shutting down");
    }
    match tokio::time::timeout(STORE_CHECK, state.store.check()).await {
        Ok(Ok(())) => json_response(StatusCode::OK, br#"{"status":"ready"}"#.to_vec()),
        Ok(Err(error)) => not_ready(error.message()),
        Err(_) => not_ready("the conversation store did not answer"),
    }
}

fn not_ready(reason: &str) -> Response<Body> {
    let body = serde_json::json!({"status": "not ready", "reason": reason}).to_string();
    json_response(StatusCode::SERVICE_UNAVAILABLE, body.into())
}

fn plain(status: StatusCode, text: String) -> Response<Body> {
    let mut response = Response::new(full(text));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
