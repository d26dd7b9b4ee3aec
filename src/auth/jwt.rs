//! `[routes.jwt]`: a bearer token signed by the route's identity provider admits its client, whose tenant is
//! the token's `tenant_claim`. Checked: the signature (an allowed asymmetric algorithm, the key of the token's
//! `kid`), `exp` and `nbf` with [`LEEWAY_SECONDS`] of clock skew, `iss` and `aud`.
//!
//! Keys come from `public_key` or from `jwks_url`, fetched on first use with the client the outbounds use
//! (src/upstream.rs) and again when a token names a `kid` the cached set lacks, at most once per
//! `jwks_refresh`. A key set that cannot be fetched refuses with 503 (the token could be good), never admits.

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use http::Uri;
use http_body_util::{BodyExt, Limited};
use jsonwebtoken::jwk::{AlgorithmParameters, JwkSet, PublicKeyUse};
use jsonwebtoken::{DecodingKey, Validation};
use serde_json::{Map, Value};

use crate::config::{decoding_key, JwtConfig};
use crate::error::{Error, Result};
use crate::upstream::Upstream;

/// Clock skew allowed between the identity provider and the proxy on `exp` and `nbf`.
pub const LEEWAY_SECONDS: u64 = 60;
/// A key set larger than this is not one.
const MAX_JWKS_BYTES: usize = 256 * 1024;
/// One JWKS fetch, connection and body.
const JWKS_TIMEOUT: Duration = Duration::from_secs(10);

/// A route's token checker.
pub struct Verifier {
    /// The algorithms, issuer, audience and leeway; `algorithms` narrowed to the token's own per check.
    validation: Validation,
    tenant_claim: String,
    keys: Keys,
}

enum Keys {
    Pem(DecodingKey),
    Jwks(Box<Jwks>),
}

/// A key set's keys, each with its `kid`.
type KeySet = Vec<(Option<String>, DecodingKey)>;

impl Verifier {
    pub fn new(config: &JwtConfig, connect_timeout: Duration) -> Self {
        let mut validation = Validation::new(config.algorithms[0]);
        validation.algorithms = config.algorithms.clone();
        validation.leeway = LEEWAY_SECONDS;
        validation.validate_nbf = true;
        validation.set_issuer(&[&config.issuer]);
        validation.set_audience(&[&config.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        let keys = match (&config.public_key, &config.jwks_url) {
            // The config check parsed the key with every listed algorithm.
            (Some(pem), _) => Keys::Pem(
                decoding_key(pem, config.algorithms[0])
                    .unwrap_or_else(|| DecodingKey::from_secret(&[])),
            ),
            (None, url) => Keys::Jwks(Box::new(Jwks::new(
                url.clone().unwrap_or_default(),
                connect_timeout,
                config.jwks_refresh,
            ))),
        };
        Self {
            validation,
            tenant_claim: config.tenant_claim.clone(),
            keys,
        }
    }

    /// The tenant of a valid `token`: 401 for a bad one, 503 when the key set cannot be had.
    pub async fn tenant(&self, token: &str) -> Result<String> {
        let refused = || Error::unauthorized(true);
        // An `alg` outside jsonwebtoken's list (`none`) fails here.
        let header = jsonwebtoken::decode_header(token).map_err(|_| refused())?;
        if !self.validation.algorithms.contains(&header.alg) {
            return Err(refused());
        }
        let key = match &self.keys {
            Keys::Pem(key) => key.clone(),
            Keys::Jwks(jwks) => jwks.key(header.kid.as_deref()).await?,
        };
        // jsonwebtoken wants every listed algorithm to fit the key: the token's own is the one that must.
        let mut validation = self.validation.clone();
        validation.algorithms = vec![header.alg];
        let claims = jsonwebtoken::decode::<Map<String, Value>>(token, &key, &validation)
            .map_err(|_| refused())?
            .claims;
        claims
            .get(&self.tenant_claim)
            .and_then(Value::as_str)
            .filter(|tenant| !tenant.trim().is_empty())
            .map(str::to_owned)
            .ok_or_else(refused)
    }
}

/// A fetched key set and when it may be fetched again.
struct Jwks {
    url: Uri,
    client: Upstream,
    refresh: Duration,
    keys: RwLock<Arc<KeySet>>,
    /// The last fetch: when, and whether it worked. Held while fetching, so that one fetch serves everyone
    /// waiting for it.
    last_fetch: tokio::sync::Mutex<Option<(Instant, bool)>>,
}

impl Jwks {
    fn new(url: Uri, connect_timeout: Duration, refresh: Duration) -> Self {
        Self {
            client: Upstream::new(url.clone(), Vec::new(), connect_timeout),
            url,
            refresh,
            keys: RwLock::new(Arc::new(Vec::new())),
            last_fetch: tokio::sync::Mutex::new(None),
        }
    }

    /// The key named `kid` (a token without one: the set's only key), fetching the set when it lacks it.
    async fn key(&self, kid: Option<&str>) -> Result<DecodingKey> {
        if let Some(key) = self.cached(kid) {
            return Ok(key);
        }
        let mut last_fetch = self.last_fetch.lock().await;
        // Another request may have fetched it while this one waited.
        if let Some(key) = self.cached(kid) {
            return Ok(key);
        }
        if let Some((at, worked)) = *last_fetch {
            if at.elapsed() < self.refresh {
                return Err(if worked {
                    Error::unauthorized(true)
                } else {
                    unavailable("the identity provider's key set could not be fetched")
                });
            }
        }
        let fetched = self.fetch().await;
        *last_fetch = Some((Instant::now(), fetched.is_ok()));
        let keys = fetched?;
        *self.keys.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(keys);
        self.cached(kid).ok_or_else(|| Error::unauthorized(true))
    }

    fn cached(&self, kid: Option<&str>) -> Option<DecodingKey> {
        let keys = Arc::clone(&self.keys.read().unwrap_or_else(|e| e.into_inner()));
        match kid {
            Some(kid) => keys
                .iter()
                .find(|(named, _)| named.as_deref() == Some(kid))
                .map(|(_, key)| key.clone()),
            None if keys.len() == 1 => Some(keys[0].1.clone()),
            None => None,
        }
    }

    async fn fetch(&self) -> Result<KeySet> {
        let failed = |why: String| {
            tracing::warn!(jwks_url = %crate::upstream::redacted(&self.url), "{why}");
            unavailable("the identity provider's key set could not be fetched")
        };
        let bytes = tokio::time::timeout(JWKS_TIMEOUT, async {
            let response = self
                .client
                .get(self.url.clone(), "application/json")
                .await?;
            Limited::new(response.into_body(), MAX_JWKS_BYTES)
                .collect()
                .await
                .map(|body| body.to_bytes())
                .map_err(|e| Error::upstream_malformed(format!("reading the key set: {e}")))
        })
        .await
        .map_err(|_| failed("the JWKS fetch timed out".to_owned()))?
        .map_err(|e| failed(e.to_string()))?;
        let set: JwkSet = serde_json::from_slice(&bytes)
            .map_err(|e| failed(format!("the JWKS is not a key set: {e}")))?;
        Ok(set
            .keys
            .iter()
            // A shared secret (`oct`) in a public set would let anyone sign; encryption keys do not sign.
            .filter(|jwk| !matches!(jwk.algorithm, AlgorithmParameters::OctetKey(_)))
            .filter(|jwk| jwk.common.public_key_use != Some(PublicKeyUse::Encryption))
            .filter_map(|jwk| Some((jwk.common.key_id.clone(), DecodingKey::from_jwk(jwk).ok()?)))
            .collect())
    }
}

fn unavailable(message: &str) -> Error {
    Error::auth_unavailable(message)
}
