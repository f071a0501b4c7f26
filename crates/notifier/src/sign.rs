//! Standard Webhooks signatures (<https://www.standardwebhooks.com>): the
//! HMAC-SHA256 of `{webhook-id}.{webhook-timestamp}.{body}` with the
//! endpoint's key (the base64 after `whsec_`), written `v1,<base64>`; one
//! per secret, space-separated, during a rotation. Pure: no I/O.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, KeyInit, Mac};
use oncehook_common::config::Secret;
use sha2::Sha256;

pub const HEADER_ID: &str = "webhook-id";
pub const HEADER_TIMESTAMP: &str = "webhook-timestamp";
pub const HEADER_SIGNATURE: &str = "webhook-signature";

/// The `webhook-signature` value for `body` sent as `id` at `timestamp`
/// (unix seconds), one signature per secret. A secret that is not base64
/// (refused when the configuration is read) signs nothing.
pub fn signature(secrets: &[Secret], id: &str, timestamp: i64, body: &[u8]) -> String {
    secrets
        .iter()
        .filter_map(|secret| {
            let key = STANDARD.decode(secret.expose()).ok()?;
            let mut mac = Hmac::<Sha256>::new_from_slice(&key).ok()?;
            mac.update(format!("{id}.{timestamp}.").as_bytes());
            mac.update(body);
            Some(format!(
                "v1,{}",
                STANDARD.encode(mac.finalize().into_bytes())
            ))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of the Standard Webhooks specification.
    #[test]
    fn the_specification_example_signs_as_published() {
        let secret = Secret::new("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
        let sig = signature(
            &[secret],
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1_614_265_330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn a_rotation_signs_with_every_secret() {
        let a = Secret::new("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
        let b = Secret::new("QUJDREVGR0hJSktMTU5PUFFSU1RVVldY");
        let both = signature(&[a.clone(), b.clone()], "evt_1", 1, b"{}");
        let parts: Vec<&str> = both.split(' ').collect();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0], signature(&[a], "evt_1", 1, b"{}"));
        assert_eq!(parts[1], signature(&[b], "evt_1", 1, b"{}"));
        assert_ne!(parts[0], parts[1]);
    }
}
