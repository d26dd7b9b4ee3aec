//! What the server knows of the connection a request came in on, handed to the routes in the request's
//! extensions. A leaf: the server writes these, and inbounds, auth and the egress policy read them without
//! reaching up into the server.

use std::net::SocketAddr;

/// The local address of the connection a request came in on, in the request's extensions (an inbound that
/// must name the proxy, such as an A2A agent card, falls back to it when the request has no `Host`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalAddr(pub SocketAddr);

/// The client's address, in the request's extensions: the socket's peer, or, behind one of `trusted_proxies`,
/// the client it forwarded for (src/auth.rs, `TrustedProxies`). Rate limits count by it, and a URL the
/// client hands over may lead there by default (src/egress.rs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerAddr(pub SocketAddr);
