//! routes.toml text for the tests, from a typed builder: a [`Route`] is one `[[routes]]` table, [`Routes`] a
//! whole file (routes and top-level keys). Values go through the `toml` crate, so strings are quoted and
//! escaped as TOML wants. `listen` is left out: [`super::Proxy`] sets it.
//!
//! ```ignore
//! let route = Route::new("pair", "/pair", "ag-ui", "cmdc")
//!     .upstream(&gateway.url())
//!     .upstream_headers(&[("X-API-Key", KEY)])
//!     .translate("model", "m");
//! let proxy = Proxy::start(route).await;
//! ```

use std::fmt;

use toml::{Table, Value};

/// One `[[routes]]` table.
#[derive(Clone, Debug)]
pub struct Route(Table);

impl Route {
    pub fn new(name: &str, path: &str, inbound: &str, outbound: &str) -> Route {
        Route(Table::new())
            .set("name", name)
            .set("path", path)
            .set("inbound", inbound)
            .set("outbound", outbound)
    }

    /// `key = value` on the route itself.
    pub fn set(mut self, key: &str, value: impl Into<Value>) -> Route {
        self.0.insert(key.to_owned(), value.into());
        self
    }

    /// `key = value` in the route's `[routes.<table>]`.
    fn set_in(mut self, table: &str, key: &str, value: impl Into<Value>) -> Route {
        let table = self
            .0
            .entry(table)
            .or_insert_with(|| Value::Table(Table::new()));
        let Value::Table(table) = table else {
            panic!("routes.{table} is set as a value, not a table")
        };
        table.insert(key.to_owned(), value.into());
        self
    }

    pub fn upstream(self, url: &str) -> Route {
        self.set("upstream", url)
    }

    /// `upstream`, when there is one (echo routes have none).
    pub fn upstream_if(self, url: Option<&str>) -> Route {
        match url {
            Some(url) => self.upstream(url),
            None => self,
        }
    }

    pub fn timeout(self, duration: &str) -> Route {
        self.set("timeout", duration)
    }

    pub fn connect_timeout(self, duration: &str) -> Route {
        self.set("connect_timeout", duration)
    }

    pub fn body_timeout(self, duration: &str) -> Route {
        self.set("body_timeout", duration)
    }

    /// A size: bytes as a number, or text such as `"1KiB"`.
    pub fn max_body(self, size: impl Into<Value>) -> Route {
        self.set("max_body", size)
    }

    pub fn ws_idle(self, duration: &str) -> Route {
        self.set("ws_idle", duration)
    }

    pub fn run_buffer(self, size: &str) -> Route {
        self.set("run_buffer", size)
    }

    pub fn rate_limit(self, per_second: i64) -> Route {
        self.set("rate_limit", per_second)
    }

    pub fn rate_limit_ip(self, per_second: i64) -> Route {
        self.set("rate_limit_ip", per_second)
    }

    pub fn callback_allow(self, hosts: &[&str]) -> Route {
        self.set("callback_allow", hosts.to_vec())
    }

    pub fn cors_origins(self, origins: &[&str]) -> Route {
        self.set("cors_origins", origins.to_vec())
    }

    /// An option of `[routes.translate]`.
    pub fn translate(self, key: &str, value: impl Into<Value>) -> Route {
        self.set_in("translate", key, value)
    }

    /// Options of `[routes.translate]`, in order.
    pub fn translate_all<V: Into<Value> + Copy>(self, options: &[(&str, V)]) -> Route {
        options
            .iter()
            .fold(self, |route, (key, value)| route.translate(key, *value))
    }

    /// `[routes.api_keys]`: each key and its tenant.
    pub fn api_keys(self, keys: &[(&str, &str)]) -> Route {
        keys.iter().fold(self, |route, (key, tenant)| {
            route.set_in("api_keys", key, *tenant)
        })
    }

    /// `[routes.upstream_headers]`: each header and its value.
    pub fn upstream_headers(self, headers: &[(&str, &str)]) -> Route {
        headers.iter().fold(self, |route, (name, value)| {
            route.set_in("upstream_headers", name, *value)
        })
    }

    /// A limit of `[routes.quota]` (`sessions`, `conversations`, `streams`).
    pub fn quota(self, what: &str, limit: i64) -> Route {
        self.set_in("quota", what, limit)
    }

    /// A field of the A2A `[routes.card]`.
    pub fn card(self, key: &str, value: impl Into<Value>) -> Route {
        self.set_in("card", key, value)
    }

    /// A field of `[routes.jwt]`.
    pub fn jwt(self, key: &str, value: impl Into<Value>) -> Route {
        self.set_in("jwt", key, value)
    }
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Routes::default().route(self.clone()).fmt(f)
    }
}

/// A whole routes.toml: top-level keys, then the routes in order.
#[derive(Clone, Debug, Default)]
pub struct Routes {
    top: Table,
    routes: Vec<Value>,
}

impl Routes {
    /// A top-level key (`trusted_proxies`, `header_read_timeout`, a `[store]` table, ...).
    pub fn set(mut self, key: &str, value: impl Into<Value>) -> Routes {
        self.top.insert(key.to_owned(), value.into());
        self
    }

    pub fn route(mut self, route: Route) -> Routes {
        self.routes.push(Value::Table(route.0));
        self
    }
}

impl fmt::Display for Routes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut file = self.top.clone();
        if !self.routes.is_empty() {
            file.insert("routes".to_owned(), Value::Array(self.routes.clone()));
        }
        let text = toml::to_string(&file).map_err(|_| fmt::Error)?;
        f.write_str(&text)
    }
}
