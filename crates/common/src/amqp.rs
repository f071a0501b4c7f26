//! RabbitMQ helpers shared by every binary: connecting to a node,
//! publishing with publisher confirms (a returned message is a failure, not an
//! ack), and reading headers back. Dead letters are written and read in
//! `dead_letter`.
//!
//! Connecting goes to one node of the broker's list (`broker_nodes`) at a
//! time, in rotation, so a binary whose node goes away reconnects to another.
//!
//! Recovery model: binaries do not rely on the client's transparent
//! recovery. Each one runs its sessions under the one supervisor
//! (`broker::session`) — connect, declare the topology, work until the
//! connection breaks, back off, reconnect — so after a broker restart
//! everything (channels, confirms, consumers, QoS) is rebuilt from
//! scratch. Acks for deliveries from a dead channel are lost; the broker
//! redelivers and the dedup table absorbs the copy.

use std::time::Duration;

use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{BasicProperties, Channel, Confirmation, Connection, ConnectionProperties};

use crate::broker_nodes::BrokerNodes;

/// Why a publish did not end with the broker holding the message.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error("broker channel error: {0}")]
    Channel(#[from] lapin::Error),
    #[error("broker refused the message (nack)")]
    Nacked,
    #[error(
        "message was returned unroutable (exchange {exchange:?}, routing key {routing_key:?}): {reply}"
    )]
    Returned {
        exchange: String,
        routing_key: String,
        reply: String,
    },
    #[error("no publisher confirm within {0:?}")]
    Timeout(Duration),
    #[error("channel is not in confirm mode")]
    NoConfirm,
    #[error("not connected to the broker")]
    NotConnected,
}

/// How long one connection attempt to one node may take before the next
/// node is tried (a node that went away may not even refuse the connection).
pub const CONNECT_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a connection attempt to one node failed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("node {node}: {source}")]
    Broker {
        node: String,
        #[source]
        source: lapin::Error,
    },
    #[error("node {node}: no answer within {timeout:?}")]
    Timeout { node: String, timeout: Duration },
    #[error("no node of {nodes} accepted a connection: {errors}")]
    NoNode { nodes: String, errors: String },
}

/// Opens one connection (no retry). `name` shows up in the broker's UI.
pub async fn connect(url: &str, name: &str) -> lapin::Result<Connection> {
    let props = ConnectionProperties::default().with_connection_name(name.to_owned().into());
    Connection::connect(url, props).await
}

/// One attempt on the node the rotation gives (see [`BrokerNodes::next`]),
/// bounded by `timeout`: a connection lost with its node is made again on
/// the next one. The session supervisor (`broker::session`) retries it.
pub async fn connect_next(
    nodes: &BrokerNodes,
    name: &str,
    timeout: Duration,
) -> Result<Connection, ConnectError> {
    let (index, node) = nodes.next();
    let attempt = connect(node.url().expose(), name);
    let conn = match tokio::time::timeout(timeout, attempt).await {
        Ok(Ok(conn)) => conn,
        Ok(Err(source)) => {
            return Err(ConnectError::Broker {
                node: node.label().to_owned(),
                source,
            });
        }
        Err(_) => {
            return Err(ConnectError::Timeout {
                node: node.label().to_owned(),
                timeout,
            });
        }
    };
    tracing::info!(
        node = node.label(),
        "connected to RabbitMQ node {} of {}",
        index + 1,
        nodes.len()
    );
    Ok(conn)
}

/// Tries each node once, in rotation order, each for at most `timeout`; the
/// first connection wins. For one-shot tools (`oncehookctl`).
pub async fn connect_any(
    nodes: &BrokerNodes,
    name: &str,
    timeout: Duration,
) -> Result<Connection, ConnectError> {
    let mut errors = Vec::with_capacity(nodes.len());
    for _ in 0..nodes.len() {
        match connect_next(nodes, name, timeout).await {
            Ok(conn) => return Ok(conn),
            Err(err) => errors.push(err.to_string()),
        }
    }
    Err(ConnectError::NoNode {
        nodes: nodes.labels(),
        errors: errors.join("; "),
    })
}

/// A channel in publisher-confirm mode.
pub async fn confirm_channel(conn: &Connection) -> lapin::Result<Channel> {
    let ch = conn.create_channel().await?;
    ch.confirm_select(ConfirmSelectOptions::default()).await?;
    Ok(ch)
}

/// Publishes with `mandatory` and waits for the broker's confirm. Only
/// `Ack` without a returned message counts as success.
pub async fn publish_confirmed(
    ch: &Channel,
    exchange: &str,
    routing_key: &str,
    payload: &[u8],
    properties: BasicProperties,
    timeout: Duration,
) -> Result<(), PublishError> {
    let options = BasicPublishOptions {
        mandatory: true,
        ..BasicPublishOptions::default()
    };
    let confirm = async {
        let pending = ch
            .basic_publish(
                exchange.into(),
                short(routing_key),
                options,
                payload,
                properties,
            )
            .await?;
        pending.await
    };
    match tokio::time::timeout(timeout, confirm).await {
        Err(_) => Err(PublishError::Timeout(timeout)),
        Ok(Err(e)) => Err(PublishError::Channel(e)),
        Ok(Ok(confirmation)) => check(confirmation, exchange, routing_key),
    }
}

/// Publishes every message (same exchange and routing key) without waiting
/// in between, then waits for all the confirms: one round trip for the batch
/// instead of one per message. `Ok` only if every message was acked cleanly.
pub async fn publish_all_confirmed(
    ch: &Channel,
    exchange: &str,
    routing_key: &str,
    messages: Vec<(Vec<u8>, BasicProperties)>,
    timeout: Duration,
) -> Result<(), PublishError> {
    let options = BasicPublishOptions {
        mandatory: true,
        ..BasicPublishOptions::default()
    };
    let all = async {
        let mut pending = Vec::with_capacity(messages.len());
        for (payload, properties) in messages {
            pending.push(
                ch.basic_publish(
                    exchange.into(),
                    short(routing_key),
                    options,
                    &payload,
                    properties,
                )
                .await?,
            );
        }
        let mut confirmations = Vec::with_capacity(pending.len());
        for confirm in pending {
            confirmations.push(confirm.await?);
        }
        Ok::<_, lapin::Error>(confirmations)
    };
    match tokio::time::timeout(timeout, all).await {
        Err(_) => Err(PublishError::Timeout(timeout)),
        Ok(Err(e)) => Err(PublishError::Channel(e)),
        Ok(Ok(confirmations)) => confirmations
            .into_iter()
            .try_for_each(|c| check(c, exchange, routing_key)),
    }
}

/// Only a clean `Ack` (nothing returned) means the broker holds the message.
fn check(
    confirmation: Confirmation,
    exchange: &str,
    routing_key: &str,
) -> Result<(), PublishError> {
    match confirmation {
        Confirmation::Ack(None) => Ok(()),
        Confirmation::Ack(Some(returned)) => Err(PublishError::Returned {
            exchange: exchange.to_owned(),
            routing_key: routing_key.to_owned(),
            reply: format!("{} {}", returned.reply_code, returned.reply_text),
        }),
        Confirmation::Nack(_) => Err(PublishError::Nacked),
        Confirmation::NotRequested => Err(PublishError::NoConfirm),
    }
}

/// A header's value as text (string-like and integer headers).
pub fn header_string(headers: Option<&FieldTable>, name: &str) -> Option<String> {
    let value = headers?.inner().get(name)?;
    match value {
        AMQPValue::LongString(s) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
        AMQPValue::ShortString(s) => Some(s.as_str().to_owned()),
        other => header_int_value(other).map(|n| n.to_string()),
    }
}

/// A header's value as an integer.
pub fn header_int(headers: Option<&FieldTable>, name: &str) -> Option<i64> {
    header_int_value(headers?.inner().get(name)?)
}

fn header_int_value(value: &AMQPValue) -> Option<i64> {
    Some(match value {
        AMQPValue::ShortShortInt(n) => i64::from(*n),
        AMQPValue::ShortShortUInt(n) => i64::from(*n),
        AMQPValue::ShortInt(n) => i64::from(*n),
        AMQPValue::ShortUInt(n) => i64::from(*n),
        AMQPValue::LongInt(n) => i64::from(*n),
        AMQPValue::LongUInt(n) => i64::from(*n),
        AMQPValue::LongLongInt(n) => *n,
        _ => return None,
    })
}

/// A `ShortString` from arbitrary text, truncated to the AMQP limit of 255
/// bytes on a character boundary (the client panics on longer ones).
pub fn short(s: &str) -> ShortString {
    let mut end = s.len().min(255);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    ShortString::try_new(&s[..end]).unwrap_or_else(|_| ShortString::from(""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_truncates_on_char_boundary() {
        let long = "₹".repeat(200);
        let s = short(&long);
        assert!(s.as_str().len() <= 255);
        assert!(s.as_str().chars().all(|c| c == '₹'));
        assert_eq!(short("abc").as_str(), "abc");
    }
}

/// What a passive declare tells about a queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueDepth {
    /// Messages ready (not those delivered and still unacked).
    pub messages: u32,
    /// Consumers attached.
    pub consumers: u32,
}

/// Declares `queue` passively (no side effects) on a channel of its own: a
/// missing queue closes the channel it is declared on, never a caller's.
/// A missing queue is an error (`broker::queues::is_not_found`); see
/// `broker::queues::depth` for `None`.
pub async fn passive_declare(conn: &Connection, queue: &str) -> lapin::Result<QueueDepth> {
    let ch = conn.create_channel().await?;
    let declared = ch
        .queue_declare(
            short(queue),
            QueueDeclareOptions {
                passive: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await;
    if ch.status().connected() {
        let _ = ch.close(200, "queue inspected".into()).await;
    }
    let q = declared?;
    Ok(QueueDepth {
        messages: q.message_count(),
        consumers: q.consumer_count(),
    })
}
