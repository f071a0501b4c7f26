//! Secrets at rest: tenants' signing secrets, gateway API credentials and
//! notify secrets are stored in Postgres sealed — encrypted and
//! authenticated with XChaCha20-Poly1305 under a key-encryption key of a
//! [`KeyRing`] — never in the clear.
//!
//! A ring is configured as `kid:base64key[,kid:base64key…]`
//! (`secrets.keys`): each key is 32 random bytes in standard base64, named
//! by a kid of 1 to 32 characters of `a-z 0-9 _ -`. The first key is the
//! active one, which seals; every key of the ring opens. A sealed value is
//! text, `v1.<kid>.<base64url of nonce ‖ ciphertext ‖ tag>`, with a fresh
//! random 24-byte nonce each time.
//!
//! Every value is sealed for one place, its associated data (`aad`, e.g.
//! `source:acme-razorpay:signing:1`): it opens only with the same text, so
//! a value copied into another row or another purpose does not open. The
//! version and kid of the value are authenticated with it.
//!
//! Rotating keys: put the new key first and keep the old ones after it;
//! [`KeyRing::needs_reseal`] finds values under an older key and
//! [`KeyRing::reseal`] moves them to the active one; once none is left, the
//! old key can leave the ring. No error and no `Debug` output shows a key
//! or a plaintext.

use std::fmt;
use std::str::FromStr;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use chacha20poly1305::aead::inout::InOutBuf;
use chacha20poly1305::{AeadInOut, KeyInit, Tag, XChaCha20Poly1305, XNonce};
use rand::TryRngCore;
use rand::rngs::OsRng;
use secrecy::zeroize::Zeroizing;
use secrecy::{ExposeSecret, ExposeSecretMut, SecretSlice};

/// The format of sealed values this release writes (and the only one it
/// reads).
const VERSION: &str = "v1";
const KEY_LEN: usize = 32;
const NONCE_LEN: usize = 24;
const TAG_LEN: usize = 16;
const MAX_KID_LEN: usize = 32;

/// Key-encryption keys: the first seals, every one opens (see the module
/// documentation). `Debug` shows the kids only.
#[derive(Clone)]
pub struct KeyRing {
    /// Never empty; no kid twice.
    keys: Vec<RingKey>,
}

#[derive(Clone)]
struct RingKey {
    kid: String,
    /// Zeroizes its key when dropped.
    cipher: XChaCha20Poly1305,
}

/// Why a sealed value was not opened. No message shows a key or a
/// plaintext.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    #[error("not a sealed value: expected `v1.<kid>.<base64url>` of at least 40 bytes")]
    Malformed,
    #[error(
        "sealed under key {kid:?}, which is not in the key ring: add that key back to the ring \
         (secrets.keys) to open it"
    )]
    UnknownKey { kid: String },
    #[error(
        "the sealed value did not authenticate: a wrong key, sealed for another place (its \
         associated data differs), or altered"
    )]
    Tampered,
}

/// Why a key ring (or a kid) was refused. Names the entry by its position
/// (1 for the first) and, once it is known to be well formed, its kid;
/// never a key, nor a kid that is not well formed (it may be a key pasted
/// in the wrong place).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RingError {
    #[error("the key ring is empty: expected `kid:base64key[,kid:base64key…]`")]
    Empty,
    #[error("entry {position} of the key ring is empty (a stray comma?)")]
    EmptyEntry { position: usize },
    #[error("entry {position} of the key ring has no `kid:` before its key")]
    NoKid { position: usize },
    #[error("entry {position} of the key ring: its kid {reason} (1 to 32 of a-z 0-9 _ -)")]
    BadKid {
        position: usize,
        reason: &'static str,
    },
    #[error(
        "entry {position} of the key ring (kid {kid:?}): its key {reason}; expected 32 random \
         bytes in standard base64"
    )]
    BadKey {
        position: usize,
        kid: String,
        reason: String,
    },
    #[error("entry {position} of the key ring: kid {kid:?} is already used by an earlier entry")]
    DuplicateKid { position: usize, kid: String },
    #[error("the kid {reason} (1 to 32 of a-z 0-9 _ -)")]
    Kid { reason: &'static str },
}

/// An opened secret: zeroized when dropped; `Debug` shows `[redacted]`.
pub struct Plaintext(SecretSlice<u8>);

impl Plaintext {
    /// The bytes, for the one place that needs them.
    pub fn expose(&self) -> &[u8] {
        self.0.expose_secret()
    }

    /// The bytes as text, if they are UTF-8.
    pub fn expose_str(&self) -> Option<&str> {
        std::str::from_utf8(self.expose()).ok()
    }
}

impl fmt::Debug for Plaintext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl KeyRing {
    /// The kid of the key that seals.
    pub fn active_kid(&self) -> &str {
        &self.active().kid
    }

    /// Every kid, the active one first.
    pub fn kids(&self) -> impl Iterator<Item = &str> {
        self.keys.iter().map(|k| k.kid.as_str())
    }

    /// `plaintext` sealed under the active key for the place `aad`.
    ///
    /// # Panics
    ///
    /// If the operating system gives no random bytes, or the plaintext is
    /// over 256 GiB (the cipher's limit).
    pub fn seal(&self, plaintext: &[u8], aad: &str) -> String {
        let key = self.active();
        let mut nonce = XNonce::default();
        OsRng
            .try_fill_bytes(&mut nonce[..])
            .expect("the operating system's random number generator failed");
        // Exactly the capacity needed: the buffer never moves, so no copy
        // of the plaintext is left behind.
        let mut data = Vec::with_capacity(NONCE_LEN + plaintext.len() + TAG_LEN);
        data.extend_from_slice(&nonce);
        data.extend_from_slice(plaintext);
        let tag = key
            .cipher
            .encrypt_inout_detached(
                &nonce,
                &associated_data(&key.kid, aad),
                InOutBuf::from(&mut data[NONCE_LEN..]),
            )
            .expect("a plaintext under the cipher's limit of 256 GiB");
        data.extend_from_slice(&tag);
        format!("{VERSION}.{}.{}", key.kid, URL_SAFE_NO_PAD.encode(&data))
    }

    /// The plaintext of `sealed`, if it was sealed by a key of this ring for
    /// the place `aad` and not altered since.
    pub fn open(&self, sealed: &str, aad: &str) -> Result<Plaintext, SealError> {
        let parsed = Parsed::parse(sealed)?;
        let key = self
            .keys
            .iter()
            .find(|k| k.kid == parsed.kid)
            .ok_or_else(|| SealError::UnknownKey {
                kid: parsed.kid.to_owned(),
            })?;
        let (nonce, rest) = parsed.data.split_at(NONCE_LEN);
        let (ciphertext, tag) = rest.split_at(rest.len() - TAG_LEN);
        let nonce = XNonce::try_from(nonce).map_err(|_| SealError::Malformed)?;
        let tag = Tag::try_from(tag).map_err(|_| SealError::Malformed)?;
        // Decrypted straight into a buffer of the plaintext's size that is
        // zeroized when dropped (nothing is decrypted unless the tag is
        // right).
        let mut plaintext = SecretSlice::from(vec![0u8; ciphertext.len()]);
        let buffer = InOutBuf::new(ciphertext, plaintext.expose_secret_mut())
            .map_err(|_| SealError::Malformed)?;
        key.cipher
            .decrypt_inout_detached(&nonce, &associated_data(&key.kid, aad), buffer, &tag)
            .map_err(|_| SealError::Tampered)?;
        Ok(Plaintext(plaintext))
    }

    /// Whether `sealed` is under a key other than the active one (rotation
    /// left it behind: [`KeyRing::reseal`] it). A value that is not a sealed
    /// value at all is not: resealing cannot mend it.
    pub fn needs_reseal(&self, sealed: &str) -> bool {
        Parsed::parse(sealed).is_ok_and(|p| p.kid != self.active_kid())
    }

    /// `sealed` opened and sealed afresh under the active key, for the same
    /// place `aad`.
    pub fn reseal(&self, sealed: &str, aad: &str) -> Result<String, SealError> {
        let plaintext = self.open(sealed, aad)?;
        Ok(self.seal(plaintext.expose(), aad))
    }

    /// A new ring entry, `kid:base64key`, with a fresh random key: the line
    /// an operator puts first in the ring to rotate to a new key.
    pub fn generate_key_line(kid: &str) -> Result<String, RingError> {
        check_kid(kid).map_err(|reason| RingError::Kid { reason })?;
        let mut key = Zeroizing::new([0u8; KEY_LEN]);
        OsRng
            .try_fill_bytes(&mut key[..])
            .expect("the operating system's random number generator failed");
        Ok(format!("{kid}:{}", STANDARD.encode(&key[..])))
    }

    fn active(&self) -> &RingKey {
        // Parsing refuses an empty ring.
        &self.keys[0]
    }
}

impl FromStr for KeyRing {
    type Err = RingError;

    /// Reads `kid:base64key[,kid:base64key…]`; blanks around entries, kids
    /// and keys are ignored.
    fn from_str(text: &str) -> Result<Self, RingError> {
        if text.trim().is_empty() {
            return Err(RingError::Empty);
        }
        let mut keys: Vec<RingKey> = Vec::new();
        for (index, entry) in text.split(',').enumerate() {
            let position = index + 1;
            let key = parse_entry(position, entry.trim())?;
            if keys.iter().any(|k| k.kid == key.kid) {
                return Err(RingError::DuplicateKid {
                    position,
                    kid: key.kid,
                });
            }
            keys.push(key);
        }
        Ok(KeyRing { keys })
    }
}

impl fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyRing")
            .field("kids", &self.kids().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// One `kid:base64key` entry of a ring.
fn parse_entry(position: usize, entry: &str) -> Result<RingKey, RingError> {
    if entry.is_empty() {
        return Err(RingError::EmptyEntry { position });
    }
    let (kid, key) = entry.split_once(':').ok_or(RingError::NoKid { position })?;
    let kid = kid.trim();
    check_kid(kid).map_err(|reason| RingError::BadKid { position, reason })?;
    let bad_key = |reason: String| RingError::BadKey {
        position,
        kid: kid.to_owned(),
        reason,
    };
    // The decoder's own message may quote a character of the key: not used.
    let bytes = Zeroizing::new(
        STANDARD
            .decode(key.trim())
            .map_err(|_| bad_key("is not standard base64".to_owned()))?,
    );
    if bytes.len() != KEY_LEN {
        return Err(bad_key(format!(
            "is {} bytes long, not {KEY_LEN}",
            bytes.len()
        )));
    }
    let cipher = XChaCha20Poly1305::new_from_slice(&bytes)
        .map_err(|_| bad_key(format!("is not {KEY_LEN} bytes long")))?;
    Ok(RingKey {
        kid: kid.to_owned(),
        cipher,
    })
}

/// Whether `kid` is 1 to 32 of `a-z 0-9 _ -`; if not, what is wrong.
fn check_kid(kid: &str) -> Result<(), &'static str> {
    if kid.is_empty() {
        return Err("is empty");
    }
    if kid.len() > MAX_KID_LEN {
        return Err("is longer than 32 characters");
    }
    let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-';
    if !kid.chars().all(allowed) {
        return Err("has a character other than a-z 0-9 _ -");
    }
    Ok(())
}

/// What the tag authenticates besides the ciphertext: the value's version
/// and kid, then the caller's `aad` (a kid holds no `.`, so the split is
/// unambiguous).
fn associated_data(kid: &str, aad: &str) -> Vec<u8> {
    format!("{VERSION}.{kid}.{aad}").into_bytes()
}

/// A sealed value taken apart, before any key is tried.
struct Parsed<'a> {
    kid: &'a str,
    /// The nonce, the ciphertext and the tag; at least a nonce and a tag.
    data: Vec<u8>,
}

impl<'a> Parsed<'a> {
    fn parse(sealed: &'a str) -> Result<Self, SealError> {
        let (version, rest) = sealed.split_once('.').ok_or(SealError::Malformed)?;
        let (kid, payload) = rest.split_once('.').ok_or(SealError::Malformed)?;
        if version != VERSION || check_kid(kid).is_err() {
            return Err(SealError::Malformed);
        }
        let data = URL_SAFE_NO_PAD
            .decode(payload)
            .map_err(|_| SealError::Malformed)?;
        if data.len() < NONCE_LEN + TAG_LEN {
            return Err(SealError::Malformed);
        }
        Ok(Parsed { kid, data })
    }
}

#[cfg(test)]
#[path = "sealed_tests.rs"]
mod tests;
