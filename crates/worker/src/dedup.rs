//! Delivery identity: the [`DeliveryKey`] a delivery is deduplicated on —
//! its source, the gateway's event id and a digest of the signed body bytes.
//! The claim conflicts on the source and the digest, so an unsigned
//! event-id header can neither make a different body look like a duplicate
//! nor the same body look like a new delivery. The table itself belongs to
//! `oncehook_common::store::dedup`.

use sha2::{Digest, Sha256};

pub use oncehook_common::store::dedup::DeliveryKey;

/// The key of a delivery of `body` from `source` with `event_id`.
pub fn key(source: &str, event_id: &str, body: &[u8]) -> DeliveryKey {
    let digest = Sha256::digest(body);
    DeliveryKey {
        source: source.to_owned(),
        event_id: event_id.to_owned(),
        body_sha256: hex::encode(digest.get(..16).unwrap_or_default()),
    }
}
