//! Who is calling: `Authorization: Bearer <key>`. The SHA-256 of the
//! presented key is compared with every configured hash in constant time
//! (all of them, whatever matched), so neither the answer nor its timing
//! says which keys exist. No key or an unknown one → 401, a key without the
//! scope → 403; both are counted in `oncehook_api_auth_failures_total{key}`
//! (the key's name, `issued` for a key issued at runtime, or `unknown`),
//! and a client address that fails too often is answered 429 before its
//! key is even looked at. Keys are never logged. Platform admin keys
//! (`[[api.admin_key]]`) are checked apart ([`Admin`]): an admin key is no
//! tenant's key and a tenant's key no admin key.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use actix_web::HttpRequest;
use actix_web::http::StatusCode;
use actix_web::http::header::AUTHORIZATION;
use oncehook_common::config::{AdminKey, AdminScope, ApiKey, ApiScope};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::disabled::Disabled;
use crate::error::ApiError;
use crate::issued::Issued;
use oncehook_common::store::scope::Scope;
use oncehook_common::tenant::TenantId;

/// The authenticated caller.
#[derive(Debug, Clone)]
pub struct Caller {
    pub name: String,
    /// The key's tenant: every statement the request runs is in its scope
    /// (docs/tenants.md), so the key reaches no other tenant's rows.
    pub tenant: TenantId,
}

impl Caller {
    /// The scope of the request's transactions.
    pub fn scope(&self) -> Scope {
        Scope::tenant(self.tenant.clone())
    }
}

/// A platform admin, authenticated (docs/tenants.md).
#[derive(Debug, Clone)]
pub struct AdminCaller {
    pub name: String,
}

/// Configured keys, the issued ones, the admin keys and the failure
/// throttle.
pub struct Auth {
    keys: Vec<ApiKey>,
    /// Tenants' keys issued at runtime ([`crate::issued`]).
    issued: Issued,
    admin_keys: Vec<AdminKey>,
    throttle: Throttle,
    /// The tenants whose keys are refused ([`crate::disabled`]).
    disabled: Disabled,
}

impl Auth {
    pub fn new(keys: Vec<ApiKey>, failures_per_minute: u32, disabled: Disabled) -> Auth {
        Auth::with_issued(
            keys,
            Vec::new(),
            Issued::default(),
            failures_per_minute,
            disabled,
        )
    }

    /// As [`Auth::new`], with the admin keys and the issued keys' registry.
    pub fn with_issued(
        keys: Vec<ApiKey>,
        admin_keys: Vec<AdminKey>,
        issued: Issued,
        failures_per_minute: u32,
        disabled: Disabled,
    ) -> Auth {
        for name in keys
            .iter()
            .map(|k| &k.name)
            .chain(admin_keys.iter().map(|k| &k.name))
        {
            metrics::counter!("oncehook_api_auth_failures_total", "key" => name.clone())
                .absolute(0);
        }
        metrics::counter!("oncehook_api_auth_failures_total", "key" => "unknown").absolute(0);
        metrics::counter!("oncehook_api_auth_failures_total", "key" => "issued").absolute(0);
        Auth {
            keys,
            issued,
            admin_keys,
            throttle: Throttle::new(failures_per_minute, Duration::from_secs(60)),
            disabled,
        }
    }

    /// The caller of `req` if its key has `scope`.
    pub fn check(&self, req: &HttpRequest, scope: ApiScope) -> Result<Caller, ApiError> {
        self.check_any(req, &[scope])
    }

    /// The caller of `req` if its key has one of `scopes`.
    pub fn check_any(&self, req: &HttpRequest, scopes: &[ApiScope]) -> Result<Caller, ApiError> {
        let client = req.peer_addr().map(|a| a.ip());
        let presented = self.presented(req, client)?;
        let Some((key, label)) = presented.and_then(|p| self.find(p)) else {
            self.failed(client, "unknown");
            return Err(unauthorized());
        };
        if self.disabled.contains(key.tenant.as_str()) {
            metrics::counter!("oncehook_api_auth_failures_total", "key" => label.clone())
                .increment(1);
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "tenant_disabled",
                format!("tenant {} is disabled: its keys are refused", key.tenant),
            ));
        }
        if !scopes.iter().any(|s| key.scopes.contains(s)) {
            metrics::counter!("oncehook_api_auth_failures_total", "key" => label).increment(1);
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!(
                    "this key lacks the scope {}",
                    scopes
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(" or ")
                ),
            ));
        }
        Ok(Caller {
            name: key.name,
            tenant: key.tenant,
        })
    }

    /// The platform admin calling `req` if its admin key has `scope`. A
    /// tenant's key is no admin key: 401 as for an unknown one.
    pub fn check_admin(
        &self,
        req: &HttpRequest,
        scope: AdminScope,
    ) -> Result<AdminCaller, ApiError> {
        let client = req.peer_addr().map(|a| a.ip());
        let presented = self.presented(req, client)?;
        let Some(key) = presented.and_then(|p| self.find_admin(p)) else {
            self.failed(client, "unknown");
            return Err(unauthorized());
        };
        if !key.scopes.contains(&scope) {
            metrics::counter!("oncehook_api_auth_failures_total", "key" => key.name.clone())
                .increment(1);
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!("this admin key lacks the scope {}", scope.as_str()),
            ));
        }
        Ok(AdminCaller {
            name: key.name.clone(),
        })
    }

    /// The bearer key of `req`, unless its client is throttled.
    fn presented<'r>(
        &self,
        req: &'r HttpRequest,
        client: Option<IpAddr>,
    ) -> Result<Option<&'r str>, ApiError> {
        if let Some(ip) = client
            && let Some(wait) = self.throttle.blocked(ip)
        {
            return Err(ApiError::throttled(wait.as_secs().max(1)));
        }
        Ok(req
            .headers()
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|k| !k.is_empty()))
    }

    /// The key whose hash is the presented key's, and the name its
    /// failures are counted under: the file's keys compared in constant
    /// time (every hash), then the issued ones (found by their hash, which
    /// is of a random 256-bit key: `issued` on the metric, so issuing keys
    /// never mints label values).
    fn find(&self, presented: &str) -> Option<(ApiKey, String)> {
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        let mut found = None;
        for key in &self.keys {
            if bool::from(key.hash.ct_eq(&digest)) {
                found = Some(key);
            }
        }
        match found {
            Some(key) => Some((key.clone(), key.name.clone())),
            None => self
                .issued
                .find(&digest)
                .map(|key| (key, "issued".to_owned())),
        }
    }

    /// The admin key whose hash is the presented key's, comparing every
    /// hash.
    fn find_admin(&self, presented: &str) -> Option<&AdminKey> {
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        let mut found = None;
        for key in &self.admin_keys {
            if bool::from(key.hash.ct_eq(&digest)) {
                found = Some(key);
            }
        }
        found
    }

    fn failed(&self, client: Option<IpAddr>, name: &str) {
        metrics::counter!("oncehook_api_auth_failures_total", "key" => name.to_owned())
            .increment(1);
        if let Some(ip) = client {
            self.throttle.fail(ip);
        }
    }
}

fn unauthorized() -> ApiError {
    ApiError::new(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        "an API key is needed: Authorization: Bearer <key>",
    )
}

/// Failed authentications per client address in a fixed window.
struct Throttle {
    limit: u32,
    window: Duration,
    by_client: Mutex<HashMap<IpAddr, (Instant, u32)>>,
}

/// Addresses remembered at most; older windows are dropped beyond it.
const MAX_CLIENTS: usize = 10_000;

impl Throttle {
    fn new(limit: u32, window: Duration) -> Throttle {
        Throttle {
            limit,
            window,
            by_client: Mutex::new(HashMap::new()),
        }
    }

    /// How long `ip` must wait, if it failed too often.
    fn blocked(&self, ip: IpAddr) -> Option<Duration> {
        let map = self.by_client.lock().unwrap_or_else(|p| p.into_inner());
        let (start, count) = map.get(&ip)?;
        let left = self.window.checked_sub(start.elapsed())?;
        (*count >= self.limit).then_some(left)
    }

    fn fail(&self, ip: IpAddr) {
        let mut map = self.by_client.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= MAX_CLIENTS {
            let window = self.window;
            map.retain(|_, (start, _)| start.elapsed() < window);
        }
        let entry = map.entry(ip).or_insert((Instant::now(), 0));
        if entry.0.elapsed() >= self.window {
            *entry = (Instant::now(), 0);
        }
        entry.1 = entry.1.saturating_add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_is_blocked_after_its_limit_until_the_window_ends() {
        let t = Throttle::new(2, Duration::from_millis(200));
        let ip: IpAddr = "127.0.0.1".parse().expect("ip");
        assert!(t.blocked(ip).is_none());
        t.fail(ip);
        assert!(t.blocked(ip).is_none());
        t.fail(ip);
        assert!(t.blocked(ip).is_some());
        std::thread::sleep(Duration::from_millis(250));
        assert!(t.blocked(ip).is_none());
    }

    #[test]
    fn keys_are_found_by_their_hash() {
        let hash: [u8; 32] = Sha256::digest(b"ohk_secret").into();
        let auth = Auth::new(
            vec![ApiKey {
                name: "shop".into(),
                hash,
                scopes: vec![ApiScope::OrdersRead],
                tenant: TenantId::default_tenant(),
            }],
            5,
            Disabled::default(),
        );
        assert_eq!(
            auth.find("ohk_secret").map(|(k, _)| k.name),
            Some("shop".to_owned())
        );
        assert!(auth.find("ohk_other").is_none());
    }
}

/// The scopes a route needs, as a type (so the check runs as the handler's
/// first extractor, before its body is read: a caller without a key gets
/// 401, never a body error).
pub trait Needs {
    const SCOPES: &'static [ApiScope];
}

macro_rules! needs {
    ($($name:ident => [$($scope:ident),+];)+) => {$(
        pub struct $name;
        impl Needs for $name {
            const SCOPES: &'static [ApiScope] = &[$(ApiScope::$scope),+];
        }
    )+};
}

needs! {
    OrdersWrite => [OrdersWrite];
    OrdersRead => [OrdersRead];
    ProductsWrite => [ProductsWrite];
    ProductsRead => [ProductsWrite, OrdersRead];
    EventsRead => [EventsRead];
}

/// The caller, checked for `N`'s scopes.
pub struct Authed<N: Needs> {
    pub caller: Caller,
    needs: std::marker::PhantomData<N>,
}

impl<N: Needs> actix_web::FromRequest for Authed<N> {
    type Error = ApiError;
    type Future = std::future::Ready<Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut actix_web::dev::Payload) -> Self::Future {
        with_auth(req, |auth| {
            auth.check_any(req, N::SCOPES).map(|caller| Authed {
                caller,
                needs: std::marker::PhantomData,
            })
        })
    }
}

/// `check` run with the API's [`Auth`], as an extractor's ready answer.
fn with_auth<T>(
    req: &HttpRequest,
    check: impl FnOnce(&Auth) -> Result<T, ApiError>,
) -> std::future::Ready<Result<T, ApiError>> {
    std::future::ready(
        match req.app_data::<actix_web::web::Data<crate::state::State>>() {
            Some(state) => check(&state.auth),
            None => Err(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "the API is not configured",
            )),
        },
    )
}

/// The admin scope a route needs, as a type (checked before the body is
/// read, as [`Needs`]).
pub trait NeedsAdmin {
    const SCOPE: AdminScope;
}

/// Platform administration: tenants, sources, keys.
pub struct Administers;
impl NeedsAdmin for Administers {
    const SCOPE: AdminScope = AdminScope::Admin;
}

/// Reading the sources feed (ingest).
pub struct ReadsFeed;
impl NeedsAdmin for ReadsFeed {
    const SCOPE: AdminScope = AdminScope::SourcesFeed;
}

/// The platform admin, checked for `N`'s scope.
pub struct Admin<N: NeedsAdmin> {
    pub caller: AdminCaller,
    needs: std::marker::PhantomData<N>,
}

impl<N: NeedsAdmin> actix_web::FromRequest for Admin<N> {
    type Error = ApiError;
    type Future = std::future::Ready<Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut actix_web::dev::Payload) -> Self::Future {
        with_auth(req, |auth| {
            auth.check_admin(req, N::SCOPE).map(|caller| Admin {
                caller,
                needs: std::marker::PhantomData,
            })
        })
    }
}
