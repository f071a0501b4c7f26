//! `[broker]`: RabbitMQ — the node (or the nodes of a cluster) every binary
//! connects to, the prefix of the exchange and queue names, the publisher
//! confirm timeout and the arguments the quorum queues are declared with.
//! The URLs may carry a password: they are read as a secret and checked by
//! [`BrokerNodes::parse`], whose messages name an entry by position, never
//! by its text.

use std::time::Duration;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::keys::Key;
use super::values::{AtLeast, NonEmpty};
use crate::broker_nodes::BrokerNodes;

pub const DEFAULT_AMQP_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

pub const ENV_AMQP_URL: &str = "ONCEHOOK_AMQP_URL";
pub const ENV_AMQP_PREFIX: &str = "ONCEHOOK_AMQP_PREFIX";
pub const ENV_PUBLISH_TIMEOUT_MS: &str = "ONCEHOOK_PUBLISH_TIMEOUT_MS";
pub const ENV_DELIVERY_LIMIT: &str = "ONCEHOOK_DELIVERY_LIMIT";
pub const ENV_QUORUM_INITIAL_GROUP_SIZE: &str = "ONCEHOOK_QUORUM_INITIAL_GROUP_SIZE";

pub(super) const KEYS: &[Key] = &[
    Key::new(ENV_AMQP_URL, "broker.url")
        .legacy("amqp_url")
        .secret(),
    Key::new(ENV_AMQP_PREFIX, "broker.prefix").legacy("amqp_prefix"),
    Key::new(ENV_PUBLISH_TIMEOUT_MS, "broker.publish_timeout_ms").legacy("publish_timeout_ms"),
    Key::new(ENV_DELIVERY_LIMIT, "broker.delivery_limit").legacy("delivery_limit"),
    Key::new(
        ENV_QUORUM_INITIAL_GROUP_SIZE,
        "broker.quorum_initial_group_size",
    ),
];

/// `[broker]`: RabbitMQ.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// The node (or the cluster's nodes) to connect to, from the AMQP URL
    /// list; the URLs may carry a password and are never printed.
    pub nodes: BrokerNodes,
    /// Prefix of every exchange and queue name.
    pub prefix: String,
    pub publish_timeout: Duration,
    /// `x-delivery-limit` of the quorum queues (set explicitly: brokers before 4.0 have none).
    pub delivery_limit: u32,
    /// `x-quorum-initial-group-size`: replicas of each queue when it is
    /// created (the broker caps it at the number of cluster nodes).
    pub quorum_initial_group_size: u32,
}

impl BrokerConfig {
    /// The arguments the topology declares its queues with.
    pub fn queue_settings(&self) -> QueueSettings {
        QueueSettings {
            delivery_limit: self.delivery_limit,
            initial_group_size: self.quorum_initial_group_size,
        }
    }
}

/// `[broker]` as written.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct BrokerSection {
    url: AmqpUrls,
    prefix: NonEmpty,
    publish_timeout_ms: u64,
    delivery_limit: u32,
    quorum_initial_group_size: AtLeast<u32, 1>,
}

impl Default for BrokerSection {
    fn default() -> Self {
        BrokerSection {
            url: AmqpUrls(BrokerNodes::parse(DEFAULT_AMQP_URL).expect("the default URL is valid")),
            prefix: NonEmpty("oncehook".into()),
            publish_timeout_ms: 3_000,
            delivery_limit: 5,
            quorum_initial_group_size: AtLeast(3),
        }
    }
}

impl From<BrokerSection> for BrokerConfig {
    fn from(s: BrokerSection) -> Self {
        BrokerConfig {
            nodes: s.url.0,
            prefix: s.prefix.0,
            publish_timeout: Duration::from_millis(s.publish_timeout_ms),
            delivery_limit: s.delivery_limit,
            quorum_initial_group_size: s.quorum_initial_group_size.0,
        }
    }
}

/// `broker.url`: one AMQP URL or a comma-separated list, one per node.
#[derive(Debug, Clone)]
struct AmqpUrls(BrokerNodes);

impl<'de> Deserialize<'de> for AmqpUrls {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let list = String::deserialize(d)?;
        BrokerNodes::parse(&list)
            .map(AmqpUrls)
            .map_err(D::Error::custom)
    }
}

impl Serialize for AmqpUrls {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let urls: Vec<&str> = self.0.all().iter().map(|n| n.url().expose()).collect();
        s.serialize_str(&urls.join(","))
    }
}

#[cfg(test)]
#[path = "broker_tests.rs"]
mod tests;

/// The arguments the topology's quorum queues are declared with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueSettings {
    /// `x-delivery-limit` of the work queues.
    pub delivery_limit: u32,
    /// `x-quorum-initial-group-size` of every queue: replicas at creation
    /// (the broker caps it at the number of nodes, so 3 works on one node).
    pub initial_group_size: u32,
}
