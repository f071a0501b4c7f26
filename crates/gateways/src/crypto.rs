//! The cryptographic and header-reading pieces the schemes share: HMAC-SHA256
//! signing and constant-time checking, a constant-time byte compare, unix
//! timestamp parsing and the replay window.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use super::VerifyError;

type HmacSha256 = Hmac<Sha256>;

/// HMAC-SHA256 of the concatenation of `parts` under `key`.
pub(crate) fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    match mac_over(key, parts) {
        Some(mac) => mac.finalize().into_bytes().to_vec(),
        // HMAC accepts keys of any length; this arm is unreachable in practice.
        None => Vec::new(),
    }
}

/// Whether `signature` is the HMAC-SHA256 of `parts` under `key`, compared in
/// constant time.
pub(crate) fn hmac_sha256_matches(key: &[u8], parts: &[&[u8]], signature: &[u8]) -> bool {
    mac_over(key, parts).is_some_and(|mac| mac.verify_slice(signature).is_ok())
}

/// Whether any of `signatures` is the HMAC-SHA256 of `parts` under `key`.
/// The message is hashed once; each candidate is checked in constant time on
/// a copy of the finished state, so many candidates cost little.
pub(crate) fn hmac_sha256_matches_any(key: &[u8], parts: &[&[u8]], signatures: &[Vec<u8>]) -> bool {
    let Some(mac) = mac_over(key, parts) else {
        return false;
    };
    signatures
        .iter()
        .any(|sig| mac.clone().verify_slice(sig).is_ok())
}

fn mac_over(key: &[u8], parts: &[&[u8]]) -> Option<HmacSha256> {
    let mut mac = HmacSha256::new_from_slice(key).ok()?;
    for part in parts {
        mac.update(part);
    }
    Some(mac)
}

/// Constant-time equality of two byte strings (the length is not secret).
pub(crate) fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// Decodes a hex signature (either case) of exactly `len` bytes.
pub(crate) fn decode_hex(
    value: &str,
    len: usize,
    what: &'static str,
) -> Result<Vec<u8>, VerifyError> {
    let bytes = hex::decode(value).map_err(|_| VerifyError::Malformed {
        what,
        reason: "not hexadecimal".into(),
    })?;
    if bytes.len() != len {
        return Err(VerifyError::Malformed {
            what,
            reason: format!("expected {len} bytes, got {}", bytes.len()),
        });
    }
    Ok(bytes)
}

/// Parses a unix timestamp written as ASCII digits only (no sign, no spaces).
pub(crate) fn parse_unix_digits(value: &str, what: &'static str) -> Result<i64, VerifyError> {
    let malformed = |reason: &str| VerifyError::Malformed {
        what,
        reason: reason.into(),
    };
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(malformed("not a decimal unix timestamp"));
    }
    value.parse::<i64>().map_err(|_| malformed("out of range"))
}

/// Checks that `signed_at` is within `tolerance_secs` of `now`, in the past
/// or in the future.
pub(crate) fn check_window(
    signed_at: i64,
    now: i64,
    tolerance_secs: u64,
) -> Result<(), VerifyError> {
    if signed_at.abs_diff(now) > tolerance_secs {
        return Err(VerifyError::OutsideTolerance {
            signed_at,
            now,
            tolerance_secs,
        });
    }
    Ok(())
}

/// Returns the index of the first secret for which `matches` holds.
pub(crate) fn first_match<T>(
    secrets: &[T],
    matches: impl FnMut(&T) -> bool,
) -> Result<usize, VerifyError> {
    if secrets.is_empty() {
        return Err(VerifyError::NoSecrets);
    }
    secrets
        .iter()
        .position(matches)
        .ok_or(VerifyError::Mismatch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_known_answer() {
        // RFC 4231 test case 2.
        let mac = hmac_sha256(b"Jefe", &[b"what do ya want ", b"for nothing?"]);
        assert_eq!(
            hex::encode(&mac),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert!(hmac_sha256_matches(
            b"Jefe",
            &[b"what do ya want for nothing?"],
            &mac
        ));
        assert!(!hmac_sha256_matches(
            b"Jeff",
            &[b"what do ya want for nothing?"],
            &mac
        ));
        assert!(!hmac_sha256_matches(
            b"Jefe",
            &[b"what do ya want for nothing?"],
            &mac[..31]
        ));
    }

    #[test]
    fn constant_time_eq() {
        assert!(ct_eq(b"abc", b"abc"));
        assert!(!ct_eq(b"abc", b"abd"));
        assert!(!ct_eq(b"abc", b"ab"));
        assert!(ct_eq(b"", b""));
    }

    #[test]
    fn window_is_symmetric() {
        assert!(check_window(1000, 1300, 300).is_ok());
        assert!(check_window(1300, 1000, 300).is_ok());
        assert!(check_window(1000, 1301, 300).is_err());
        assert!(check_window(1301, 1000, 300).is_err());
        assert!(check_window(i64::MIN, i64::MAX, u64::MAX).is_ok());
        assert!(check_window(i64::MIN, i64::MAX, 0).is_err());
    }

    #[test]
    fn unix_digits() {
        assert_eq!(parse_unix_digits("1717740003", "t"), Ok(1717740003));
        for bad in ["", "-1", "+1", " 1", "1.5", "99999999999999999999"] {
            assert!(parse_unix_digits(bad, "t").is_err(), "{bad:?}");
        }
    }
}
