//! Where the proxy may connect when a client hands it a URL (a CMDC callback tool's `callbackUrl`), and the
//! client that connects only there. URLs read from routes.toml are the operator's and do not pass here.
//!
//! By default a URL may lead only back to the client that handed it over: the exact IP its connection came
//! from (the socket peer; `X-Forwarded-*` is not trusted), on a port >= 1024, and only when that IP is not
//! loopback, link-local, unspecified, multicast or broadcast, nor an address of this host (the connection's
//! local address, the listen address and every interface's address, read at each check). Anything else
//! needs an entry of the route's `callback_allow`. The proxy's own listen address is never allowed.
//!
//! A name is resolved once, every address it resolves to is checked, and the connection goes only to those
//! checked addresses: a name that changes its answer between the check and the connect (DNS rebinding)
//! reaches nothing new. Redirects are never followed (hyper does not).

use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use http::header::{ACCEPT, CONTENT_TYPE};
use http::{Method, Request, Response, Uri};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::dns::Name;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use ipnet::IpNet;

use crate::connection::{LocalAddr, PeerAddr};
use crate::error::{Error, Result};

/// The lowest port a callback may use without an allow entry: below it are the host's system services.
const LOWEST_OPEN_PORT: u16 = 1024;

/// One `callback_allow` entry: an IP, a CIDR block or a host name, each with an optional `:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    host: PatternHost,
    port: Option<u16>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum PatternHost {
    Net(IpNet),
    /// Lowercase, without a trailing dot.
    Name(String),
}

impl FromStr for Pattern {
    type Err = String;

    /// `10.0.0.0/8`, `127.0.0.1:8080`, `[::1]:9000`, `fd00::/8`, `tools.internal:443`, ...
    fn from_str(text: &str) -> Result<Self, String> {
        let invalid = || {
            format!(
                "invalid callback_allow entry {text:?} (expected an IP, a CIDR block or a host name, each \
                 with an optional :port, e.g. \"10.0.0.0/8\", \"127.0.0.1:8080\", \"tools.internal:443\")"
            )
        };
        let (host, port) = split_port(text).ok_or_else(invalid)?;
        let port = port
            .map(|port| port.parse::<u16>().ok().filter(|p| *p != 0))
            .map(|port| port.ok_or_else(invalid))
            .transpose()?;
        let host = if let Ok(ip) = host.parse::<IpAddr>() {
            PatternHost::Net(IpNet::from(ip.to_canonical()))
        } else if let Ok(net) = host.parse::<IpNet>() {
            PatternHost::Net(net.trunc())
        } else if is_host_name(host) {
            PatternHost::Name(normalize_name(host))
        } else {
            return Err(invalid());
        };
        Ok(Pattern { host, port })
    }
}

/// The host and port parts of a pattern: `[v6]:port`, a bare v6 address or block, or `host:port`.
fn split_port(text: &str) -> Option<(&str, Option<&str>)> {
    if let Some(rest) = text.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        return match after {
            "" => Some((host, None)),
            after => Some((host, Some(after.strip_prefix(':')?))),
        };
    }
    match text.matches(':').count() {
        0 => Some((text, None)),
        1 => text.split_once(':').map(|(host, port)| (host, Some(port))),
        _ => Some((text, None)),
    }
}

fn is_host_name(text: &str) -> bool {
    let name = text.strip_suffix('.').unwrap_or(text);
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

fn normalize_name(name: &str) -> String {
    name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase()
}

impl Pattern {
    /// Whether the entry lets a URL naming `host` (`None` for an IP literal) reach `address`.
    fn allows(&self, host: Option<&str>, address: SocketAddr) -> bool {
        let host_matches = match (&self.host, host) {
            (PatternHost::Net(net), _) => net.contains(&address.ip()),
            (PatternHost::Name(name), Some(host)) => *name == normalize_name(host),
            (PatternHost::Name(_), None) => false,
        };
        host_matches && self.port.is_none_or(|port| port == address.port())
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.host, self.port) {
            (PatternHost::Net(IpNet::V6(net)), Some(port)) => write!(f, "[{net}]:{port}"),
            (PatternHost::Net(net), Some(port)) => write!(f, "{net}:{port}"),
            (PatternHost::Net(net), None) => write!(f, "{net}"),
            (PatternHost::Name(name), Some(port)) => write!(f, "{name}:{port}"),
            (PatternHost::Name(name), None) => f.write_str(name),
        }
    }
}

/// The client a URL came from: the peer of its connection, and the proxy's address on that connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Requester {
    pub peer: IpAddr,
    pub local: SocketAddr,
}

impl Requester {
    /// The client of a request, from the addresses the server put in its extensions.
    pub fn of<B>(request: &Request<B>) -> Option<Self> {
        let PeerAddr(peer) = request.extensions().get::<PeerAddr>()?;
        let LocalAddr(local) = request.extensions().get::<LocalAddr>()?;
        Some(Self {
            peer: peer.ip(),
            local: *local,
        })
    }
}

/// A route's outbound request policy: its `callback_allow` entries and the address the proxy listens on.
#[derive(Debug, Clone)]
pub struct Policy {
    allow: Vec<Pattern>,
    listen: SocketAddr,
}

impl Policy {
    pub fn new(allow: Vec<Pattern>, listen: SocketAddr) -> Self {
        Self { allow, listen }
    }

    /// Refuses a URL whose literal host and port can already be seen to be refused (an IP literal); a name
    /// passes here and is checked when it is resolved, at each use.
    pub fn check_literal(&self, uri: &Uri, requester: &Requester) -> Result<()> {
        let (host, port) = host_and_port(uri)?;
        match host.parse::<IpAddr>() {
            Ok(ip) => self.check(None, SocketAddr::new(ip, port), requester),
            Err(_) => Ok(()),
        }
    }

    /// The addresses a connection to `uri` may go to: its IP literal, or every address its name resolves
    /// to, once each of them is allowed. One refused address refuses them all.
    pub async fn addresses(
        &self,
        uri: &Uri,
        requester: &Requester,
        resolver: &dyn Resolve,
    ) -> Result<Vec<SocketAddr>> {
        let (host, port) = host_and_port(uri)?;
        if let Ok(ip) = host.parse::<IpAddr>() {
            let address = SocketAddr::new(ip, port);
            self.check(None, address, requester)?;
            return Ok(vec![address]);
        }
        let addresses = resolver.resolve(host, port).await.map_err(|e| {
            Error::upstream_unreachable(format!("callback host {host} could not be resolved: {e}"))
        })?;
        if addresses.is_empty() {
            return Err(Error::upstream_unreachable(format!(
                "callback host {host} has no address"
            )));
        }
        for address in &addresses {
            self.check(Some(host), *address, requester)?;
        }
        Ok(addresses)
    }

    /// Whether a URL naming `host` (`None` for an IP literal) may lead to `address`.
    fn check(&self, host: Option<&str>, address: SocketAddr, requester: &Requester) -> Result<()> {
        let address = SocketAddr::new(address.ip().to_canonical(), address.port());
        let allowed = !self.is_own(address, requester)
            && (self.allow.iter().any(|p| p.allows(host, address))
                || self.is_the_clients_own(address, requester));
        if allowed {
            return Ok(());
        }
        let named = host.map(|host| format!("{host} ({address})"));
        Err(Error::forbidden(format!(
            "callback to {} refused by the route's callback policy",
            named.unwrap_or_else(|| address.to_string())
        )))
    }

    /// Whether `address` is where the proxy itself serves.
    fn is_own(&self, address: SocketAddr, requester: &Requester) -> bool {
        let listen_ip = self.listen.ip().to_canonical();
        let local_ip = requester.local.ip().to_canonical();
        let on_listen_port =
            address.port() == self.listen.port() || address.port() == requester.local.port();
        let ours = address.ip() == listen_ip
            || address.ip() == local_ip
            || (listen_ip.is_unspecified() && is_special(address.ip()));
        on_listen_port && ours
    }

    /// The default: the registering client's own IP, when that is a public-facing address of another host,
    /// on an unprivileged port.
    fn is_the_clients_own(&self, address: SocketAddr, requester: &Requester) -> bool {
        let ip = address.ip();
        ip == requester.peer.to_canonical()
            && address.port() >= LOWEST_OPEN_PORT
            && !is_special(ip)
            && ip != requester.local.ip().to_canonical()
            && ip != self.listen.ip().to_canonical()
            && !is_an_interface_address(ip)
    }
}

/// Whether `ip` is an address of one of this host's interfaces. Read at each check: interfaces come and go,
/// and a callback registration is rare. When they cannot be read, every address counts as this host's, so
/// the default admits nothing.
fn is_an_interface_address(ip: IpAddr) -> bool {
    match if_addrs::get_if_addrs() {
        Ok(interfaces) => interfaces
            .iter()
            .any(|interface| interface.ip().to_canonical() == ip),
        Err(e) => {
            tracing::warn!("this host's interface addresses could not be read ({e}); callbacks need callback_allow");
            true
        }
    }
}

/// Loopback, link-local, unspecified (`0.0.0.0/8`, `::`), multicast or broadcast.
fn is_special(ip: IpAddr) -> bool {
    match ip.to_canonical() {
        IpAddr::V4(ip) => {
            ip.is_loopback()
                || ip.is_link_local()
                || ip.octets()[0] == 0
                || ip.is_multicast()
                || ip.is_broadcast()
        }
        IpAddr::V6(ip) => {
            ip.is_loopback()
                || ip.is_unspecified()
                || ip.is_multicast()
                || (ip.segments()[0] & 0xffc0) == 0xfe80
        }
    }
}

/// The host (without IPv6 brackets) and port of an absolute http(s) URL.
fn host_and_port(uri: &Uri) -> Result<(&str, u16)> {
    let default_port = match uri.scheme_str() {
        Some("http") => 80,
        Some("https") => 443,
        _ => return Err(Error::bad_request("a callback URL must be http(s)")),
    };
    let host = uri
        .host()
        .ok_or_else(|| Error::bad_request("a callback URL needs a host"))?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    Ok((host, uri.port_u16().unwrap_or(default_port)))
}

/// Resolves host names; tests inject their own.
pub trait Resolve: Send + Sync {
    fn resolve<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> BoxFuture<'a, io::Result<Vec<SocketAddr>>>;
}

/// The system's resolver.
pub struct SystemResolver;

impl Resolve for SystemResolver {
    fn resolve<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> BoxFuture<'a, io::Result<Vec<SocketAddr>>> {
        Box::pin(async move { Ok(tokio::net::lookup_host((host, port)).await?.collect()) })
    }
}

/// The client for URLs clients hand over: every request is checked against the route's policy first.
#[derive(Clone)]
pub struct Egress {
    policy: Arc<Policy>,
    resolver: Arc<dyn Resolve>,
    connect_timeout: Duration,
}

impl Egress {
    pub fn new(policy: Policy, connect_timeout: Duration) -> Self {
        Self {
            policy: Arc::new(policy),
            resolver: Arc::new(SystemResolver),
            connect_timeout,
        }
    }

    /// The same client resolving names with `resolver`.
    pub fn with_resolver(mut self, resolver: Arc<dyn Resolve>) -> Self {
        self.resolver = resolver;
        self
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// POSTs a JSON body to `uri`, handed over by the client `requester`, and returns the response whatever its
    /// status. A refused URL is an error before any socket opens.
    pub async fn post_json(
        &self,
        uri: Uri,
        body: Bytes,
        requester: &Requester,
    ) -> Result<Response<Incoming>> {
        let addresses = self
            .policy
            .addresses(&uri, requester, &*self.resolver)
            .await?;
        let target = format!("{}:{}", addresses[0].ip(), addresses[0].port());
        let request = Request::builder()
            .method(Method::POST)
            .uri(uri)
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "application/json")
            .body(Full::new(body))
            .map_err(|e| Error::internal(format!("building the callback request failed: {e}")))?;
        self.client(addresses)
            .request(request)
            .await
            .map_err(|e| Error::upstream_unreachable(format!("callback to {target} failed: {e}")))
    }

    /// A client whose connections go only to `addresses` (an IP-literal URL names its one address itself).
    fn client(
        &self,
        addresses: Vec<SocketAddr>,
    ) -> Client<hyper_rustls::HttpsConnector<HttpConnector<Checked>>, Full<Bytes>> {
        let http = HttpConnector::new_with_resolver(Checked(addresses));
        let connector = crate::upstream::connector(http, self.connect_timeout);
        Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(0)
            .build(connector)
    }
}

/// A resolver that answers every name with the addresses the policy checked.
#[derive(Clone)]
struct Checked(Vec<SocketAddr>);

impl tower_service::Service<Name> for Checked {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = io::Error;
    type Future = std::future::Ready<io::Result<Self::Response>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Name) -> Self::Future {
        std::future::ready(Ok(self.0.clone().into_iter()))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;

    use http_body_util::BodyExt;

    use super::*;

    /// A resolver answering from a table, counting its lookups.
    #[derive(Default)]
    struct Table {
        names: HashMap<&'static str, Vec<IpAddr>>,
        lookups: Mutex<Vec<String>>,
    }

    impl Table {
        fn with(names: &[(&'static str, &[&str])]) -> Arc<Self> {
            let names = names
                .iter()
                .map(|(name, ips)| (*name, ips.iter().map(|ip| ip.parse().unwrap()).collect()))
                .collect();
            Arc::new(Table {
                names,
                lookups: Mutex::default(),
            })
        }

        fn lookups(&self) -> Vec<String> {
            self.lookups.lock().unwrap().clone()
        }
    }

    impl Resolve for Table {
        fn resolve<'a>(
            &'a self,
            host: &'a str,
            port: u16,
        ) -> BoxFuture<'a, io::Result<Vec<SocketAddr>>> {
            self.lookups.lock().unwrap().push(host.to_owned());
            let found = self.names.get(host).map(|ips| {
                ips.iter()
                    .map(|ip| SocketAddr::new(*ip, port))
                    .collect::<Vec<_>>()
            });
            Box::pin(async move { found.ok_or_else(|| io::Error::other("no such name")) })
        }
    }

    const LISTEN: &str = "127.0.0.1:8080";

    fn policy(allow: &[&str]) -> Policy {
        let allow = allow.iter().map(|p| p.parse().unwrap()).collect();
        Policy::new(allow, LISTEN.parse().unwrap())
    }

    /// A client connected from `peer` to the proxy's listen address.
    fn from(peer: &str) -> Requester {
        Requester {
            peer: peer.parse().unwrap(),
            local: LISTEN.parse().unwrap(),
        }
    }

    async fn verdict(
        policy: &Policy,
        url: &str,
        requester: &Requester,
        resolver: &Table,
    ) -> Result<()> {
        policy
            .addresses(&url.parse().unwrap(), requester, resolver)
            .await
            .map(drop)
    }

    #[test]
    fn patterns_parse_ips_blocks_names_and_ports() {
        for (text, shown) in [
            ("127.0.0.1", "127.0.0.1/32"),
            ("127.0.0.1:8080", "127.0.0.1/32:8080"),
            ("10.1.2.3/8", "10.0.0.0/8"),
            ("::1", "::1/128"),
            ("[::1]:9000", "[::1/128]:9000"),
            ("fd00::/8", "fd00::/8"),
            ("[::ffff:10.0.0.1]", "10.0.0.1/32"),
            ("Tools.Internal.:443", "tools.internal:443"),
        ] {
            let pattern: Pattern = text.parse().unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(pattern.to_string(), shown, "{text}");
        }
        for bad in [
            "",
            "*",
            "http://x",
            "a:b",
            "x:0",
            "x:70000",
            "10.0.0.0/33",
            "-x.y",
            "[::1",
            "a b",
        ] {
            assert!(bad.parse::<Pattern>().is_err(), "{bad:?} parsed");
        }
    }

    #[tokio::test]
    async fn internal_targets_are_refused_without_an_allow_entry() {
        let resolver = Table::with(&[]);
        let policy = policy(&[]);
        let client = from("203.0.113.7");
        for url in [
            "http://169.254.169.254/latest/meta-data/",
            "http://10.0.0.5:8080/",
            "http://192.168.1.1:8080/",
            "http://127.0.0.1:9000/",
            "http://[::1]:9000/",
            "http://[::ffff:127.0.0.1]:9000/",
            "http://[::ffff:169.254.169.254]/",
            "http://0.0.0.0:9000/",
            "http://[fe80::1]:9000/",
            "http://224.0.0.1:9000/",
        ] {
            let refused = verdict(&policy, url, &client, &resolver).await.unwrap_err();
            assert!(
                refused
                    .message()
                    .contains("refused by the route's callback policy"),
                "{url}: {refused:?}"
            );
            assert!(refused.is_forbidden());
        }
        assert!(
            resolver.lookups().is_empty(),
            "IP literals are not looked up"
        );
        let refused = verdict(&policy, "http://169.254.169.254/", &client, &resolver)
            .await
            .unwrap_err();
        assert_eq!(
            refused.message(),
            "callback to 169.254.169.254:80 refused by the route's callback policy"
        );
    }

    #[tokio::test]
    async fn the_registering_clients_own_ip_is_allowed_on_unprivileged_ports_only() {
        let resolver = Table::with(&[]);
        let policy = policy(&[]);
        let client = from("203.0.113.7");
        assert!(
            verdict(&policy, "http://203.0.113.7:8443/cb", &client, &resolver)
                .await
                .is_ok()
        );
        assert!(verdict(
            &policy,
            "http://[::ffff:203.0.113.7]:8443/",
            &client,
            &resolver
        )
        .await
        .is_ok());
        for url in [
            "http://203.0.113.7/",
            "https://203.0.113.7/",
            "http://203.0.113.7:22/",
            "http://203.0.113.8:8443/",
        ] {
            assert!(
                verdict(&policy, url, &client, &resolver).await.is_err(),
                "{url}"
            );
        }
        // A client on this very host (loopback, or the address it connected to) gets no default.
        for peer in ["127.0.0.1", "::1"] {
            let url = format!(
                "http://{}:9000/",
                peer.parse::<IpAddr>().unwrap().to_canonical()
            );
            let url = url.replace("http://::1", "http://[::1]");
            assert!(
                verdict(&policy, &url, &from(peer), &resolver)
                    .await
                    .is_err(),
                "{url}"
            );
        }
        let on_this_host = Requester {
            peer: "192.0.2.10".parse().unwrap(),
            local: "192.0.2.10:8080".parse().unwrap(),
        };
        assert!(
            verdict(&policy, "http://192.0.2.10:9000/", &on_this_host, &resolver)
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn a_client_on_another_interface_of_this_host_gets_no_default() {
        let interface = if_addrs::get_if_addrs()
            .expect("this host's interfaces")
            .into_iter()
            .map(|interface| interface.ip())
            .find(|ip| !is_special(*ip))
            .expect("a host with an interface besides loopback");
        // The proxy listens on loopback; the client came from the host's other interface.
        let client = Requester {
            peer: interface,
            local: LISTEN.parse().unwrap(),
        };
        let url = format!("http://{}/", SocketAddr::new(interface, 9000));
        let refused = verdict(&policy(&[]), &url, &client, &Table::with(&[]))
            .await
            .unwrap_err();
        assert!(refused.message().contains("refused"), "{refused}");
    }

    #[tokio::test]
    async fn allow_entries_open_ips_blocks_names_and_ports_but_never_the_proxy_itself() {
        let resolver = Table::with(&[("tools.internal", &["10.1.2.3"])]);
        let client = from("127.0.0.1");
        let open = policy(&["127.0.0.1", "10.0.0.0/8:8443", "tools.internal:443"]);
        for url in [
            "http://127.0.0.1:9000/",
            "http://[::ffff:127.0.0.1]:9000/",
            "http://10.9.9.9:8443/",
            "https://tools.internal/",
        ] {
            assert!(
                verdict(&open, url, &client, &resolver).await.is_ok(),
                "{url}"
            );
        }
        for url in [
            "http://10.9.9.9:8444/",
            "http://tools.internal:8080/",
            "http://127.0.0.1:8080/",
            "http://[::ffff:127.0.0.1]:8080/",
        ] {
            assert!(
                verdict(&open, url, &client, &resolver).await.is_err(),
                "{url}"
            );
        }
        let everything = policy(&["0.0.0.0/0", "::/0"]);
        assert!(
            verdict(&everything, "http://127.0.0.1:8080/", &client, &resolver)
                .await
                .is_err(),
            "the listen address stays closed"
        );
    }

    #[tokio::test]
    async fn every_address_a_name_resolves_to_is_checked() {
        let resolver = Table::with(&[
            ("internal.example", &["10.0.0.7"]),
            ("mixed.example", &["203.0.113.7", "169.254.169.254"]),
            ("mapped.example", &["::ffff:127.0.0.1"]),
            ("client.example", &["203.0.113.7"]),
        ]);
        let policy = policy(&[]);
        let client = from("203.0.113.7");
        for url in [
            "http://internal.example:8443/",
            "http://mixed.example:8443/",
            "http://mapped.example:8443/",
        ] {
            let refused = verdict(&policy, url, &client, &resolver).await.unwrap_err();
            assert!(refused.is_forbidden(), "{url}: {refused:?}");
        }
        assert!(
            verdict(&policy, "http://client.example:8443/", &client, &resolver)
                .await
                .is_ok()
        );
        let unknown = verdict(&policy, "http://nowhere.example:8443/", &client, &resolver)
            .await
            .unwrap_err();
        assert!(
            !unknown.is_forbidden() && unknown.is_upstream(),
            "{unknown:?}"
        );
    }

    #[tokio::test]
    async fn registration_refuses_literal_hosts_and_leaves_names_to_the_call() {
        let policy = policy(&[]);
        let client = from("203.0.113.7");
        let check = |url: &str| policy.check_literal(&url.parse().unwrap(), &client);
        assert!(check("http://169.254.169.254/").is_err());
        assert!(check("http://[::ffff:127.0.0.1]:9000/").is_err());
        assert!(check("http://203.0.113.7:9000/").is_ok());
        assert!(check("http://anything.example/").is_ok());
    }

    /// A server on loopback counting the connections it accepted, answering `{"result":"ok"}`.
    async fn counting_server() -> (SocketAddr, Arc<AtomicUsize>) {
        use hyper::server::conn::http1;
        use hyper::service::service_fn;
        use hyper_util::rt::TokioIo;

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&accepted);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                let answer = service_fn(|_| async {
                    Ok::<_, std::convert::Infallible>(Response::new(Full::new(Bytes::from_static(
                        br#"{"result":"ok"}"#,
                    ))))
                });
                tokio::spawn(http1::Builder::new().serve_connection(TokioIo::new(stream), answer));
            }
        });
        (addr, accepted)
    }

    fn egress(allow: &[&str], resolver: Arc<Table>) -> Egress {
        Egress::new(policy(allow), Duration::from_secs(5)).with_resolver(resolver)
    }

    #[tokio::test]
    async fn a_refused_url_opens_no_socket_and_an_allowed_one_connects_to_the_checked_address() {
        let (server, accepted) = counting_server().await;
        let port = server.port();
        // The name resolves to the server and to an internal address: the internal one refuses both.
        let resolver = Table::with(&[
            ("rebind.example", &["127.0.0.1", "10.0.0.1"]),
            ("local.example", &["127.0.0.1"]),
        ]);
        let client = from("127.0.0.1");
        let closed = egress(&[], Arc::clone(&resolver));
        for url in [
            format!("http://127.0.0.1:{port}/"),
            format!("http://[::ffff:127.0.0.1]:{port}/"),
            format!("http://local.example:{port}/"),
        ] {
            let refused = closed
                .post_json(url.parse().unwrap(), Bytes::new(), &client)
                .await
                .unwrap_err();
            assert!(refused.is_forbidden(), "{url}: {refused:?}");
        }
        let open = egress(&["127.0.0.1"], Arc::clone(&resolver));
        let refused = open
            .post_json(
                format!("http://rebind.example:{port}/").parse().unwrap(),
                Bytes::new(),
                &client,
            )
            .await
            .unwrap_err();
        assert!(refused.message().contains("10.0.0.1"), "{refused:?}");
        assert_eq!(accepted.load(Ordering::SeqCst), 0, "no connection was made");

        let response = open
            .post_json(
                format!("http://local.example:{port}/").parse().unwrap(),
                Bytes::new(),
                &client,
            )
            .await
            .unwrap();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], br#"{"result":"ok"}"#);
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }
}
