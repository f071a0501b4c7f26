//! The broker's nodes: `ONCEHOOK_AMQP_URL` (`[broker] url`) is one AMQP URL
//! or a comma-separated list of them, one per node of a RabbitMQ cluster.
//! Each entry is validated when the configuration loads (a bad one is named
//! by its position and host, never by its text, which may hold a password),
//! and every connection picks its node here: in turn, starting from the one
//! after the node used last, so a binary whose node went away fails over to
//! the next one on its next connection attempt.
//!
//! Where in the list a process starts is random, which spreads the client
//! connections of many processes over the nodes.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::secret::Secret;

/// One node: its URL (secret: it may carry a password) and a label fit for
/// logs (`host:port`, no user name or password).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerNode {
    url: Secret,
    label: String,
}

impl BrokerNode {
    /// The URL, for the one place that connects.
    pub fn url(&self) -> &Secret {
        &self.url
    }

    /// `host:port` (and the vhost unless it is `/`), for logs and messages.
    pub fn label(&self) -> &str {
        &self.label
    }
}

impl fmt::Display for BrokerNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label)
    }
}

/// The nodes of the broker and the rotation between them. Clones share the
/// rotation, so every session of one process moves on together.
#[derive(Debug, Clone)]
pub struct BrokerNodes {
    nodes: Arc<[BrokerNode]>,
    /// Index (modulo the number of nodes) of the node to try next.
    cursor: Arc<AtomicUsize>,
}

impl PartialEq for BrokerNodes {
    fn eq(&self, other: &Self) -> bool {
        self.nodes == other.nodes
    }
}

impl BrokerNodes {
    /// Parses and validates a comma-separated list of AMQP URLs. The error
    /// names the bad entry by position (and host, when it has one) and never
    /// quotes it.
    pub fn parse(list: &str) -> Result<Self, String> {
        let entries: Vec<&str> = list.split(',').map(str::trim).collect();
        let total = entries.len();
        let mut nodes = Vec::with_capacity(total);
        for (i, entry) in entries.iter().enumerate() {
            let node = parse_node(entry).map_err(|reason| {
                if total == 1 {
                    reason
                } else {
                    format!("entry {} of {total}: {reason}", i + 1)
                }
            })?;
            nodes.push(node);
        }
        let start = random_index(nodes.len());
        Ok(Self::from_nodes(nodes, start))
    }

    fn from_nodes(nodes: Vec<BrokerNode>, start: usize) -> Self {
        Self {
            nodes: nodes.into(),
            cursor: Arc::new(AtomicUsize::new(start)),
        }
    }

    /// The same nodes, trying `index` (modulo their number) first (tests).
    #[must_use]
    pub fn starting_at(&self, index: usize) -> Self {
        Self::from_nodes(self.nodes.to_vec(), index)
    }

    /// How many nodes there are (at least one).
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Never true: a list has at least one node.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Every node, in the configured order.
    pub fn all(&self) -> &[BrokerNode] {
        &self.nodes
    }

    /// The labels of every node, comma-separated (for messages).
    pub fn labels(&self) -> String {
        self.nodes
            .iter()
            .map(BrokerNode::label)
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The node to try now, with its position in the list, and moves the
    /// rotation on: the following call gives the next node in the list. A
    /// connection that succeeds therefore leaves the rotation at the node
    /// after it, which is where the next connection (after a loss) starts.
    pub fn next(&self) -> (usize, &BrokerNode) {
        let index = self.cursor.fetch_add(1, Ordering::Relaxed) % self.nodes.len();
        (index, &self.nodes[index])
    }
}

/// A random position in `0..len` (`len` ≥ 1).
fn random_index(len: usize) -> usize {
    (uuid::Uuid::new_v4().as_u128() % len.max(1) as u128) as usize
}

/// One entry: an `amqp://` or `amqps://` URL with a host, that the client
/// accepts. Reasons never include the entry's text.
fn parse_node(entry: &str) -> Result<BrokerNode, String> {
    if entry.is_empty() {
        return Err("empty (a stray comma?)".to_owned());
    }
    let parsed = url::Url::parse(entry).map_err(|e| format!("not a URL ({e})"))?;
    if !matches!(parsed.scheme(), "amqp" | "amqps") {
        return Err("expected a URL starting with amqp:// or amqps://".to_owned());
    }
    let Some(host) = parsed.host_str().filter(|h| !h.is_empty()) else {
        return Err("the URL names no host".to_owned());
    };
    let port = parsed.port().unwrap_or(if parsed.scheme() == "amqps" {
        5671
    } else {
        5672
    });
    // `amqp://u:12/x@host` is the host `u`, the port 12 and the vhost
    // `x@host`: an `@` after the host is a password that needs %-encoding.
    if parsed.path().contains('@') || parsed.fragment().is_some() {
        return Err(
            "has an @ or a # after its host: a password's / ? # or @ must be %-encoded (%2F %3F %23 %40)"
                .to_owned(),
        );
    }
    let mut label = format!("{host}:{port}");
    let vhost = parsed.path().trim_start_matches('/');
    if !vhost.is_empty() && vhost != "%2f" && vhost != "%2F" {
        label.push('/');
        label.push_str(vhost);
    }
    // What the client itself will parse (query parameters such as heartbeat).
    // Its messages may quote a value (`Invalid SASL mechanism: …`): not shown.
    lapin::uri::AMQPUri::from_str(entry).map_err(|_| {
        format!(
            "{label}: not a valid AMQP URL (check the %-escapes and the query parameters: \
             heartbeat, frame_max, channel_max, connection_timeout, auth_mechanism)"
        )
    })?;
    Ok(BrokerNode {
        url: Secret::new(entry),
        label,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const THREE: &str = "amqp://guest:guest@127.0.0.1:5681/%2f, amqp://guest:guest@127.0.0.1:5682/%2f,amqp://guest:guest@127.0.0.1:5683/%2f";

    #[test]
    fn one_url_or_a_list() {
        let one = BrokerNodes::parse("amqp://guest:guest@127.0.0.1:5672/%2f").expect("one");
        assert_eq!(one.len(), 1);
        assert_eq!(one.labels(), "127.0.0.1:5672");
        let three = BrokerNodes::parse(THREE).expect("three");
        assert_eq!(three.len(), 3);
        assert_eq!(
            three.labels(),
            "127.0.0.1:5681, 127.0.0.1:5682, 127.0.0.1:5683"
        );
        assert_eq!(
            three.all()[1].url().expose(),
            "amqp://guest:guest@127.0.0.1:5682/%2f",
            "entries are trimmed"
        );
        let tls = BrokerNodes::parse("amqps://u:p@rabbit-0.example/shop").expect("tls");
        assert_eq!(tls.labels(), "rabbit-0.example:5671/shop");
    }

    #[test]
    fn a_bad_entry_is_named_by_position_and_never_quoted() {
        for (list, expected) in [
            (
                "amqp://u:s3cret@a:5672/%2f,http://u:s3cret@b:5672/",
                "entry 2 of 2: expected a URL starting with amqp://",
            ),
            ("amqp://u:s3cret@a:5672/%2f,", "entry 2 of 2: empty"),
            (
                ",amqp://u:s3cret@a:5672/%2f,amqp://u:s3cret@b/",
                "entry 1 of 3: empty",
            ),
            (
                "amqp://u:s3cret@a/,u:s3cret@b:5672",
                "entry 2 of 2: expected a URL starting with amqp://",
            ),
            ("amqp://u:s3cret@a/,not a url", "entry 2 of 2: not a URL"),
            (
                "amqp://u:s3cret@a/,amqp://u:s3cret@b:5672/%2f?heartbeat=often",
                "entry 2 of 2: b:5672: not a valid AMQP URL",
            ),
            ("amqp:///%2f", "names no host"),
        ] {
            let err = BrokerNodes::parse(list).expect_err(list);
            assert!(err.contains(expected), "{list}: {err}");
            assert!(!err.contains("s3cret"), "{list}: {err}");
        }
    }

    #[test]
    fn the_rotation_goes_round_from_the_node_after_the_last_used() {
        let nodes = BrokerNodes::parse(THREE).expect("three").starting_at(0);
        let order: Vec<usize> = (0..7).map(|_| nodes.next().0).collect();
        assert_eq!(order, [0, 1, 2, 0, 1, 2, 0]);

        // Connected to the second node: after losing it, the next attempt
        // goes to the third, then round to the first.
        let nodes = nodes.starting_at(1);
        let (used, node) = nodes.next();
        assert_eq!((used, node.label()), (1, "127.0.0.1:5682"));
        let after_loss: Vec<&str> = (0..3).map(|_| nodes.next().1.label()).collect();
        assert_eq!(
            after_loss,
            ["127.0.0.1:5683", "127.0.0.1:5681", "127.0.0.1:5682"]
        );

        // Clones share the rotation; a single node is always itself.
        let shared = nodes.clone();
        assert_eq!(shared.next().0, 2);
        assert_eq!(nodes.next().0, 0);
        let one = BrokerNodes::parse("amqp://a/").expect("one");
        assert!((0..3).all(|_| one.next().0 == 0));
    }

    #[test]
    fn the_first_node_is_random_but_in_range() {
        for _ in 0..50 {
            let nodes = BrokerNodes::parse(THREE).expect("three");
            assert!(nodes.next().0 < 3);
        }
    }

    #[test]
    fn debug_never_shows_a_password() {
        let nodes = BrokerNodes::parse(THREE).expect("three");
        let shown = format!("{nodes:?}");
        assert!(!shown.contains("guest:guest"), "{shown}");
        assert!(shown.contains("127.0.0.1:5682"), "{shown}");
    }
}
