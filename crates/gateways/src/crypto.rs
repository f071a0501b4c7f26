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

/// Constant-time equality of two byte strings (the length is not secret):
/// every byte pair is read, in lockstep, and folded into one accumulator
/// whatever the first difference, and only the final accumulator is branched
/// on. Generic over the byte iterators (callers pass slices) so that its test
/// can watch the reads.
pub(crate) fn ct_eq<'a, A, B>(a: A, b: B) -> bool
where
    A: IntoIterator<Item = &'a u8>,
    A::IntoIter: ExactSizeIterator,
    B: IntoIterator<Item = &'a u8>,
    B::IntoIter: ExactSizeIterator,
{
    let (a, b) = (a.into_iter(), b.into_iter());
    if a.len() != b.len() {
        return false;
    }
    let diff = a.zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
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
    use std::cell::RefCell;

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

    /// A byte iterator that logs each read (`side`, index) into a shared log.
    struct Watched<'a> {
        bytes: std::iter::Enumerate<std::slice::Iter<'a, u8>>,
        side: char,
        log: &'a RefCell<Vec<(char, usize)>>,
    }

    impl<'a> Iterator for Watched<'a> {
        type Item = &'a u8;
        fn next(&mut self) -> Option<&'a u8> {
            let (i, b) = self.bytes.next()?;
            self.log.borrow_mut().push((self.side, i));
            Some(b)
        }
        fn size_hint(&self) -> (usize, Option<usize>) {
            self.bytes.size_hint()
        }
    }

    impl ExactSizeIterator for Watched<'_> {}

    fn watched<'a>(
        bytes: &'a [u8],
        side: char,
        log: &'a RefCell<Vec<(char, usize)>>,
    ) -> Watched<'a> {
        Watched {
            bytes: bytes.iter().enumerate(),
            side,
            log,
        }
    }

    /// Timing cannot be asserted in a unit test, so this checks the property
    /// that makes `ct_eq` constant time and that the usual wrong versions
    /// lack: whatever the position of the first difference (or none), every
    /// byte of both inputs is read, once, in lockstep (`a[i]` next to
    /// `b[i]`). An early exit (`==` on slices, `Iterator::eq`, `zip().all()`,
    /// a `return false` in the loop) reads fewer bytes when the difference
    /// comes first and fails; so does buffering one side to compare later,
    /// which breaks the lockstep. (What it cannot see is a branch on each
    /// pair *after* reading it; the fold into one accumulator is there for
    /// that.) Unequal lengths return early by design: the length is public.
    #[test]
    fn constant_time_eq_reads_every_byte_pair_whatever_differs() {
        for len in [1usize, 2, 7, 32, 64] {
            let a: Vec<u8> = (0..len).map(|i| i as u8).collect();
            for differ_at in [None, Some(0), Some(len / 2), Some(len - 1)] {
                let mut b = a.clone();
                if let Some(i) = differ_at {
                    b[i] ^= 0x80;
                }
                let log = RefCell::new(Vec::new());
                let equal = ct_eq(watched(&a, 'a', &log), watched(&b, 'b', &log));
                assert_eq!(
                    equal,
                    differ_at.is_none(),
                    "len {len}, differ at {differ_at:?}"
                );
                let lockstep: Vec<(char, usize)> =
                    (0..len).flat_map(|i| [('a', i), ('b', i)]).collect();
                assert_eq!(
                    log.into_inner(),
                    lockstep,
                    "len {len}, differ at {differ_at:?}: every pair read, in lockstep"
                );
            }
        }
        let log = RefCell::new(Vec::new());
        assert!(!ct_eq(
            watched(b"abc", 'a', &log),
            watched(b"ab", 'b', &log)
        ));
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
