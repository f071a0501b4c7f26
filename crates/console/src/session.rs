//! Sessions: a signed cookie names a session the console holds in memory.
//!
//! The cookie is `sid.expires.user.signature`, the signature an
//! HMAC-SHA256 over the rest with the session key (`[console]
//! session_key`, random per start when unset). A session counts only while
//! its signature checks, it has not expired, the console still holds it
//! (logout and restarts end it) and its user is still configured; the role
//! is read from the configuration on every request. The CSRF token of a
//! session is an HMAC of its id, so it is tied to it and dies with it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use rand::RngCore as _;
use sha2::Sha256;
use time::OffsetDateTime;

/// The session cookie's name.
pub const COOKIE: &str = "oncehook_console";
/// Never hold more sessions than this (expired ones are dropped first).
const MAX_SESSIONS: usize = 10_000;

/// The key sessions and CSRF tokens are signed with.
pub struct SessionKey(Vec<u8>);

impl SessionKey {
    pub fn new(bytes: &[u8]) -> SessionKey {
        SessionKey(bytes.to_vec())
    }

    /// A random key (sessions end when the console restarts).
    pub fn random() -> SessionKey {
        let mut key = vec![0u8; 32];
        rand::rng().fill_bytes(&mut key);
        SessionKey(key)
    }

    fn mac(&self, parts: &[&str]) -> Hmac<Sha256> {
        // HMAC takes keys of any length.
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC accepts any key length"));
        for p in parts {
            mac.update(p.as_bytes());
            mac.update(b"|");
        }
        mac
    }

    fn sign(&self, parts: &[&str]) -> String {
        hex::encode(self.mac(parts).finalize().into_bytes())
    }

    fn verify(&self, parts: &[&str], signature_hex: &str) -> bool {
        match hex::decode(signature_hex) {
            Ok(sig) => self.mac(parts).verify_slice(&sig).is_ok(),
            Err(_) => false,
        }
    }
}

/// A logged-in user's session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    pub id: String,
    pub user: String,
    pub expires: OffsetDateTime,
}

/// The sessions the console holds, and the key that signs their cookies.
pub struct Sessions {
    key: SessionKey,
    ttl: Duration,
    live: Mutex<HashMap<String, Session>>,
}

impl Sessions {
    pub fn new(key: SessionKey, ttl: Duration) -> Sessions {
        Sessions {
            key,
            ttl,
            live: Mutex::new(HashMap::new()),
        }
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Opens a session for `user`; returns it and its cookie value.
    pub fn open(&self, user: &str) -> (Session, String) {
        let mut id = [0u8; 16];
        rand::rng().fill_bytes(&mut id);
        let now = OffsetDateTime::now_utc();
        let ttl = time::Duration::try_from(self.ttl).unwrap_or(time::Duration::HOUR);
        // Whole seconds: the cookie carries the expiry as a Unix time.
        let expires =
            OffsetDateTime::from_unix_timestamp((now + ttl).unix_timestamp()).unwrap_or(now + ttl);
        let session = Session {
            id: hex::encode(id),
            user: user.to_owned(),
            expires,
        };
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        if live.len() >= MAX_SESSIONS {
            live.retain(|_, s| s.expires > now);
        }
        if live.len() >= MAX_SESSIONS
            && let Some(oldest) = live
                .values()
                .min_by_key(|s| s.expires)
                .map(|s| s.id.clone())
        {
            live.remove(&oldest);
        }
        live.insert(session.id.clone(), session.clone());
        let cookie = self.cookie_value(&session);
        (session, cookie)
    }

    fn cookie_value(&self, s: &Session) -> String {
        let user = URL_SAFE_NO_PAD.encode(s.user.as_bytes());
        let expires = s.expires.unix_timestamp().to_string();
        let sig = self.key.sign(&["session", &s.id, &expires, &user]);
        format!("{}.{expires}.{user}.{sig}", s.id)
    }

    /// The live session a cookie value names, if it is genuine and current.
    pub fn check(&self, cookie: &str) -> Option<Session> {
        let mut parts = cookie.split('.');
        let (id, expires, user, sig) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || !self.key.verify(&["session", id, expires, user], sig) {
            return None;
        }
        let expires = OffsetDateTime::from_unix_timestamp(expires.parse().ok()?).ok()?;
        if expires <= OffsetDateTime::now_utc() {
            return None;
        }
        let user = String::from_utf8(URL_SAFE_NO_PAD.decode(user).ok()?).ok()?;
        let live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        let held = live.get(id)?;
        (held.user == user && held.expires == expires).then(|| held.clone())
    }

    /// Ends a session (logout).
    pub fn close(&self, id: &str) {
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        live.remove(id);
    }

    /// The CSRF token of a session.
    pub fn csrf_token(&self, s: &Session) -> String {
        self.key.sign(&["csrf", &s.id])
    }

    /// Whether `token` is the CSRF token of `s` (constant-time compare).
    pub fn csrf_ok(&self, s: &Session, token: &str) -> bool {
        self.key.verify(&["csrf", &s.id], token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sessions() -> Sessions {
        Sessions::new(
            SessionKey::new(b"k".repeat(32).as_slice()),
            Duration::from_secs(60),
        )
    }

    #[test]
    fn a_cookie_names_its_session_until_it_is_closed() {
        let s = sessions();
        let (session, cookie) = s.open("ana");
        assert_eq!(s.check(&cookie), Some(session.clone()));
        s.close(&session.id);
        assert_eq!(s.check(&cookie), None);
    }

    #[test]
    fn forged_and_foreign_cookies_are_refused() {
        let s = sessions();
        let (_, cookie) = s.open("ana");
        let forged = cookie.replacen(
            &URL_SAFE_NO_PAD.encode("ana"),
            &URL_SAFE_NO_PAD.encode("bob"),
            1,
        );
        assert_eq!(s.check(&forged), None);
        let other = Sessions::new(SessionKey::random(), Duration::from_secs(60));
        assert_eq!(other.check(&cookie), None);
        assert_eq!(s.check("garbage"), None);
    }

    #[test]
    fn csrf_tokens_belong_to_one_session() {
        let s = sessions();
        let (a, _) = s.open("ana");
        let (b, _) = s.open("ana");
        let token = s.csrf_token(&a);
        assert!(s.csrf_ok(&a, &token));
        assert!(!s.csrf_ok(&b, &token));
        assert!(!s.csrf_ok(&a, ""));
    }
}
