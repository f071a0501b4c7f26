//! RabbitMQ helpers for tests and the bench: connecting (with a confirm
//! channel for publishing, as ingest publishes), queue depths, peeking at
//! the dead-letter queue without consuming it (each letter's headers read
//! back as oncehook reads them), putting a hand-made dead letter there, and
//! deleting a test's
//! topology — on the system broker, or (the `_on` variants) on the first
//! reachable node of a comma-separated URL list such as the local cluster's.

use std::collections::BTreeMap;
use std::time::Duration;

use lapin::options::{
    BasicGetOptions, BasicPublishOptions, ExchangeDeleteOptions, QueueDeleteOptions,
};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use oncehook_common::Topology;
use oncehook_common::amqp::{self, header_string};
use oncehook_common::broker::queues;
use oncehook_common::dead_letter::{DeadLetter, DeadLetterKind, Record};
use time::OffsetDateTime;

/// The system broker, where every test's topology lives unless it says otherwise.
pub const AMQP_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

pub async fn connect() -> Connection {
    Connection::connect(AMQP_URL, ConnectionProperties::default())
        .await
        .expect("connect to RabbitMQ on 127.0.0.1:5672 (is it running? `make services`)")
}

/// The first node of the comma-separated `urls` that accepts a connection
/// (each tried for at most 5 s).
pub async fn try_connect_on(urls: &str) -> Option<Connection> {
    for url in urls.split(',').map(str::trim) {
        let attempt = Connection::connect(url, ConnectionProperties::default());
        if let Ok(Ok(conn)) = tokio::time::timeout(Duration::from_secs(5), attempt).await {
            return Some(conn);
        }
    }
    None
}

/// Like [`connect`], on the first reachable node of `urls`.
pub async fn connect_on(urls: &str) -> Connection {
    try_connect_on(urls)
        .await
        .expect("connect to a RabbitMQ node of the test's URL list")
}

/// A connection to the first reachable node of `urls` and a channel on it
/// in confirm mode (opened as ingest opens its own), for publishing with
/// confirms or declaring queues.
pub async fn confirm_channel_on(urls: &str) -> (Connection, Channel) {
    let conn = connect_on(urls).await;
    let ch = amqp::confirm_channel(&conn)
        .await
        .expect("open a confirm channel");
    (conn, ch)
}

/// Messages ready in `queue` (`None` if the queue does not exist).
pub async fn depth(queue: &str) -> Option<u32> {
    depth_on(AMQP_URL, queue).await
}

/// The webhooks waiting under `prefix`: the main lane's and every bulk
/// lane's (`None` if a queue is missing).
pub async fn events_depth(prefix: &str) -> Option<u32> {
    events_depth_on(AMQP_URL, prefix).await
}

/// [`events_depth`] on the first reachable node of `urls`.
pub async fn events_depth_on(urls: &str, prefix: &str) -> Option<u32> {
    let t = Topology::new(prefix);
    let mut total = depth_on(urls, &t.events()).await?;
    for lane in t.bulk_lanes() {
        total += depth_on(urls, &lane).await?;
    }
    Some(total)
}

/// [`depth`] on the first reachable node of `urls`.
pub async fn depth_on(urls: &str, queue: &str) -> Option<u32> {
    let conn = connect_on(urls).await;
    let depth = queues::depth(&conn, queue).await.ok().flatten();
    let _ = conn.close(200, "bye".into()).await;
    depth.map(|d| d.messages)
}

/// A dead letter as seen by a test.
#[derive(Clone)]
pub struct Dead {
    /// Its headers as read back by `oncehook_common::dead_letter`.
    pub record: Record,
    /// Its ID, as `oncehook_common::dead_letter` derives it for `oncehookctl
    /// dlq` and the console.
    pub id: String,
    pub headers: BTreeMap<String, String>,
    pub message_id: Option<String>,
    pub body: Vec<u8>,
}

impl Dead {
    /// Its kind.
    pub fn kind(&self) -> &DeadLetterKind {
        &self.record.kind
    }
}

impl std::fmt::Debug for Dead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dead")
            .field("id", &self.id)
            .field("kind", self.kind())
            .field("headers", &self.headers)
            .field("message_id", &self.message_id)
            .field("body_len", &self.body.len())
            .finish()
    }
}

/// Reads every message of `queue` without acking (they return to the queue
/// when the channel closes).
pub async fn peek(queue: &str) -> Vec<Dead> {
    peek_on(AMQP_URL, queue).await
}

/// [`peek`] on the first reachable node of `urls`.
pub async fn peek_on(urls: &str, queue: &str) -> Vec<Dead> {
    let conn = connect_on(urls).await;
    let ch = conn.create_channel().await.expect("channel");
    let mut out = Vec::new();
    while let Ok(Some(msg)) = ch
        .basic_get(queue.into(), BasicGetOptions { no_ack: false })
        .await
    {
        let props = &msg.delivery.properties;
        let mut headers = BTreeMap::new();
        if let Some(table) = props.headers() {
            for key in table.inner().keys() {
                if let Some(v) = header_string(Some(table), key.as_str()) {
                    headers.insert(key.as_str().to_owned(), v);
                }
            }
        }
        let record = Record::read(props.headers().as_ref());
        out.push(Dead {
            id: record.letter_id(props, &msg.delivery.data),
            record,
            headers,
            message_id: props.message_id().as_ref().map(|m| m.as_str().to_owned()),
            body: msg.delivery.data.clone(),
        });
        if out.len() > 10_000 {
            break;
        }
    }
    let _ = ch.close(200, "peek done".into()).await;
    let _ = conn.close(200, "bye".into()).await;
    out
}

/// Publishes `body` straight into `queue` as a dead letter oncehook wrote
/// (the headers of `why`, failed `at`, with routing key `routing_key`), on
/// `ch`, and waits for the broker's confirm if `ch` is in confirm mode.
pub async fn put_dead_letter(
    ch: &Channel,
    queue: &str,
    why: &DeadLetter,
    routing_key: &str,
    at: OffsetDateTime,
    properties: BasicProperties,
    body: &[u8],
) {
    let headers = why.headers(properties.headers().as_ref(), routing_key, at);
    ch.basic_publish(
        "".into(),
        queue.into(),
        BasicPublishOptions::default(),
        body,
        properties.with_headers(headers),
    )
    .await
    .expect("publish")
    .await
    .expect("confirm");
}

/// Deletes the queues and exchanges of `prefix`.
pub async fn delete_topology(prefix: &str) {
    delete_topology_on(AMQP_URL, prefix).await;
}

/// [`delete_topology`] on the first reachable node of `urls`.
pub async fn delete_topology_on(urls: &str, prefix: &str) {
    let Some(conn) = try_connect_on(urls).await else {
        return;
    };
    let t = Topology::new(prefix);
    for name in t.all_names() {
        if let Ok(ch) = conn.create_channel().await {
            let _ = ch
                .queue_delete(name.as_str().into(), QueueDeleteOptions::default())
                .await;
        }
        if let Ok(ch) = conn.create_channel().await {
            let _ = ch
                .exchange_delete(name.as_str().into(), ExchangeDeleteOptions::default())
                .await;
        }
    }
    let _ = conn.close(200, "bye".into()).await;
}
