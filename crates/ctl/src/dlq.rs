//! `oncehookctl dlq`: inspect, replay and purge dead letters.
//!
//! Peeking never loses or reorders messages: a channel takes every message
//! with `basic.get` (manual ack), the tool looks at them, and closing the
//! channel without acking hands them all back to the queue in their order.
//! Replay republishes a message to the exchange of the queue it came from
//! (with a publisher confirm, `mandatory`) and acks it in the dead-letter
//! queue only after a clean confirm; everything else goes back untouched.
//!
//! Every dead letter has an ID: its `x-oncehook-dead-id` header when it has
//! one, else a hash of its identity (message id, correlation id, failure time
//! and body). Identical copies of one message share an ID; `show`, `replay`
//! and `purge` act on every copy.

use std::collections::{BTreeMap, BTreeSet};
use std::io::IsTerminal as _;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use base64::Engine as _;
use clap::{Args, Subcommand};
use lapin::message::Delivery;
use lapin::options::{BasicAckOptions, BasicGetOptions, QueueDeclareOptions, QueuePurgeOptions};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{BasicProperties, Channel, Connection};
use oncehook_common::amqp::{self, header_int, header_string, short};
use oncehook_common::email::EmailMessage;
use oncehook_common::topology::{
    HEADER_ATTEMPTS, HEADER_DEAD_ID, HEADER_DELIVERY_COUNT, HEADER_ERROR, HEADER_ERROR_KIND,
    HEADER_FAILED_AT, HEADER_ORIGIN, HEADER_REPLAYS, HEADER_ROUTING_KEY, HEADER_SOURCE,
};
use oncehook_common::{Envelope, Settings, Topology, db};
use serde_json::{Map, Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::output::{Output, confirm, parse_duration, short_time, table, truncate};

/// Never hold more than this many messages in one peek.
pub const PEEK_LIMIT: usize = 100_000;
/// How long to wait for the broker to accept a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Replays at most this many are listed one by one in text output.
const LIST_EACH_UP_TO: usize = 50;

#[derive(Subcommand)]
pub enum DlqCommand {
    /// List dead letters without consuming them (queue order, oldest first).
    List(ListArgs),
    /// Everything about one dead letter: headers, error, envelope, payload.
    Show {
        /// The ID `dlq list` prints.
        id: String,
    },
    /// Republish dead letters to the exchange they came from, then remove them from the DLQ.
    Replay(ReplayArgs),
    /// Delete dead letters for good.
    Purge(PurgeArgs),
}

#[derive(Args, Default, Clone)]
pub struct Filter {
    /// Only dead letters of this gateway (`razorpay`, …, or `email`).
    #[arg(long)]
    pub gateway: Option<String>,
    /// Only dead letters of this kind (`unknown_order`, `unparseable`, `delivery_limit`, …).
    #[arg(long = "error-kind")]
    pub error_kind: Option<String>,
    /// Only dead letters that failed within this window (e.g. 30m, 2h, 7d).
    #[arg(long, value_parser = parse_duration)]
    pub since: Option<Duration>,
}

impl Filter {
    fn is_empty(&self) -> bool {
        self.gateway.is_none() && self.error_kind.is_none() && self.since.is_none()
    }

    fn matches(&self, letter: &Letter, now: OffsetDateTime) -> bool {
        if let Some(g) = &self.gateway
            && !letter.gateway.eq_ignore_ascii_case(g)
        {
            return false;
        }
        if let Some(k) = &self.error_kind
            && !letter.kind.eq_ignore_ascii_case(k)
        {
            return false;
        }
        if let Some(window) = self.since {
            let Some(at) = letter.failed_at else {
                return false;
            };
            let cutoff = time::Duration::try_from(window)
                .ok()
                .and_then(|d| now.checked_sub(d));
            if let Some(cutoff) = cutoff
                && at < cutoff
            {
                return false;
            }
        }
        true
    }
}

#[derive(Args)]
pub struct ListArgs {
    /// Show at most this many.
    #[arg(long, default_value_t = 50)]
    pub limit: usize,
    #[command(flatten)]
    pub filter: Filter,
}

#[derive(Args)]
pub struct ReplayArgs {
    /// IDs from `dlq list`.
    #[arg(conflicts_with_all = ["all", "gateway", "error_kind", "since"])]
    pub ids: Vec<String>,
    /// Every dead letter (narrowed by --gateway / --error-kind / --since if given).
    #[arg(long)]
    pub all: bool,
    #[command(flatten)]
    pub filter: Filter,
    /// Show what would be replayed; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Do not ask for confirmation (only asked on a terminal, for --all and filters).
    #[arg(long)]
    pub yes: bool,
}

#[derive(Args)]
pub struct PurgeArgs {
    /// IDs from `dlq list`.
    #[arg(conflicts_with = "all")]
    pub ids: Vec<String>,
    /// Every dead letter in the queue.
    #[arg(long)]
    pub all: bool,
    /// Do not ask for confirmation (required when stdin is not a terminal).
    #[arg(long)]
    pub yes: bool,
}

pub async fn run(
    settings: &Settings,
    command: DlqCommand,
    out: &Output,
) -> anyhow::Result<ExitCode> {
    let topology = Topology::new(settings.amqp_prefix.clone());
    let conn = connect(settings).await?;
    let result = match command {
        DlqCommand::List(args) => list(&conn, &topology, args, out).await,
        DlqCommand::Show { id } => show(&conn, &topology, &id, out).await,
        DlqCommand::Replay(args) => replay(settings, &conn, &topology, args, out).await,
        DlqCommand::Purge(args) => purge(&conn, &topology, args, out).await,
    };
    let _ = conn.close(200, "oncehookctl done".into()).await;
    result
}

/// Connects to the broker (one attempt, bounded in time).
pub async fn connect(settings: &Settings) -> anyhow::Result<Connection> {
    match tokio::time::timeout(
        CONNECT_TIMEOUT,
        amqp::connect(&settings.amqp_url, "oncehookctl"),
    )
    .await
    {
        Ok(Ok(conn)) => Ok(conn),
        Ok(Err(err)) => Err(anyhow::Error::new(err).context(format!(
            "connecting to RabbitMQ at {}",
            crate::redact(&settings.amqp_url)
        ))),
        Err(_) => bail!(
            "connecting to RabbitMQ at {}: no answer within {CONNECT_TIMEOUT:?}",
            crate::redact(&settings.amqp_url)
        ),
    }
}

/// (ready messages, consumers) of `queue`, `None` if it does not exist.
/// Uses a throwaway channel: a failed passive declare closes it.
pub async fn queue_info(conn: &Connection, queue: &str) -> anyhow::Result<Option<(u32, u32)>> {
    let ch = conn.create_channel().await.context("opening a channel")?;
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
    match declared {
        Ok(q) => {
            let _ = ch.close(200, "bye".into()).await;
            Ok(Some((q.message_count(), q.consumer_count())))
        }
        Err(err) if is_not_found(&err) => Ok(None),
        Err(err) => Err(anyhow::Error::new(err).context(format!("inspecting queue {queue}"))),
    }
}

fn is_not_found(err: &lapin::Error) -> bool {
    let text = err.to_string();
    text.contains("NOT_FOUND") || text.contains("404") || text.contains("no queue")
}

/// One dead letter as read from `P.dead`.
#[derive(Debug, Clone)]
pub struct Letter {
    pub id: String,
    /// Delivery tag on the channel that peeked it.
    pub tag: u64,
    pub properties: BasicProperties,
    /// The message body (emptied by peeks that do not need it).
    pub body: Vec<u8>,
    pub body_len: usize,
    pub gateway: String,
    pub source: Option<String>,
    pub event_id: Option<String>,
    pub event_type: Option<String>,
    pub kind: String,
    pub error: String,
    pub failed_at: Option<OffsetDateTime>,
    pub attempts: Option<i64>,
    pub origin: Option<String>,
    pub routing_key: Option<String>,
    pub replays: i64,
    /// `oncehook` (the worker or mailer gave up) or `broker` (x-death, e.g. the delivery limit).
    pub dead_lettered_by: &'static str,
    pub envelope: Option<Envelope>,
    pub email: Option<EmailMessage>,
}

/// The first (most recent) entry of the `x-death` header, if any.
fn x_death(headers: Option<&FieldTable>) -> Option<&FieldTable> {
    match headers?.inner().get("x-death")? {
        AMQPValue::FieldArray(entries) => entries.as_slice().iter().find_map(|v| match v {
            AMQPValue::FieldTable(t) => Some(t),
            _ => None,
        }),
        _ => None,
    }
}

fn table_timestamp(table: Option<&FieldTable>, name: &str) -> Option<OffsetDateTime> {
    match table?.inner().get(name)? {
        AMQPValue::Timestamp(secs) => {
            OffsetDateTime::from_unix_timestamp(i64::try_from(*secs).ok()?).ok()
        }
        other => {
            let n = match other {
                AMQPValue::LongLongInt(n) => *n,
                AMQPValue::LongInt(n) => i64::from(*n),
                _ => return None,
            };
            OffsetDateTime::from_unix_timestamp(n).ok()
        }
    }
}

fn first_string_in_array(table: Option<&FieldTable>, name: &str) -> Option<String> {
    match table?.inner().get(name)? {
        AMQPValue::FieldArray(items) => items.as_slice().iter().find_map(value_string),
        other => value_string(other),
    }
}

fn value_string(v: &AMQPValue) -> Option<String> {
    match v {
        AMQPValue::LongString(s) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
        AMQPValue::ShortString(s) => Some(s.as_str().to_owned()),
        _ => None,
    }
}

fn non_empty(s: Option<String>) -> Option<String> {
    s.filter(|v| !v.trim().is_empty())
}

impl Letter {
    pub fn from_delivery(delivery: Delivery, topology: &Topology) -> Letter {
        let props = delivery.properties.clone();
        let headers = props.headers().as_ref();
        let death = x_death(headers);
        let message_id = props.message_id().as_ref().map(|m| m.as_str().to_owned());
        let correlation_id = props
            .correlation_id()
            .as_ref()
            .map(|m| m.as_str().to_owned());
        let body = delivery.data;

        let oncehook_kind = non_empty(header_string(headers, HEADER_ERROR_KIND));
        let by_oncehook = oncehook_kind.is_some() || header_string(headers, HEADER_ERROR).is_some();
        let death_reason = non_empty(header_string(death, "reason"))
            .or_else(|| non_empty(header_string(headers, "x-first-death-reason")));
        let death_queue = non_empty(header_string(death, "queue"))
            .or_else(|| non_empty(header_string(headers, "x-first-death-queue")));
        let kind = oncehook_kind
            .or_else(|| death_reason.clone())
            .unwrap_or_else(|| "unknown".to_owned());

        let failed_at_text = non_empty(header_string(headers, HEADER_FAILED_AT));
        let failed_at = failed_at_text
            .as_deref()
            .and_then(|t| OffsetDateTime::parse(t, &Rfc3339).ok())
            .or_else(|| table_timestamp(death, "time"));
        let origin = non_empty(header_string(headers, HEADER_ORIGIN)).or(death_queue.clone());
        let routing_key = non_empty(header_string(headers, HEADER_ROUTING_KEY))
            .or_else(|| first_string_in_array(death, "routing-keys"))
            .or_else(|| {
                (origin.as_deref() == Some(topology.emails().as_str()))
                    .then(|| topology.email_routing_key().to_owned())
            });
        let error = non_empty(header_string(headers, HEADER_ERROR)).unwrap_or_else(|| {
            match (death_reason.as_deref(), death_queue.as_deref()) {
                (Some("delivery_limit"), Some(q)) => format!(
                    "the broker dead-lettered it from {q}: it reached the delivery limit (a consumer crashed or stalled on every delivery)"
                ),
                (Some(reason), Some(q)) => {
                    format!("the broker dead-lettered it from {q} ({reason})")
                }
                (Some(reason), None) => format!("the broker dead-lettered it ({reason})"),
                _ => "no error recorded".to_owned(),
            }
        });

        let envelope = Envelope::from_bytes(&body).ok();
        let email = if envelope.is_none() {
            EmailMessage::from_bytes(&body).ok()
        } else {
            None
        };
        let gateway = match (&envelope, &email) {
            (Some(env), _) => env.gateway.to_string(),
            (None, Some(_)) => "email".to_owned(),
            _ => message_id
                .as_deref()
                .and_then(|m| m.split_once(':'))
                .map(|(g, _)| g.to_owned())
                .filter(|g| !g.is_empty())
                .unwrap_or_else(|| "unknown".to_owned()),
        };
        let (event_id, event_type) = match (&envelope, &email) {
            (Some(env), _) => (env.event_id.clone(), env.event_type.clone()),
            (None, Some(m)) => (Some(m.outbox_id.to_string()), Some("email".to_owned())),
            _ => (
                message_id
                    .as_deref()
                    .and_then(|m| m.split_once(':'))
                    .map(|(_, e)| e.to_owned()),
                None,
            ),
        };
        let source = envelope
            .as_ref()
            .map(|e| e.source.clone())
            .or_else(|| header_string(headers, HEADER_SOURCE));

        let id = non_empty(header_string(headers, HEADER_DEAD_ID))
            .map(|s| s.to_ascii_lowercase())
            .unwrap_or_else(|| {
                let mid = message_id.as_deref().unwrap_or("").as_bytes();
                let cid = correlation_id.as_deref().unwrap_or("").as_bytes();
                if by_oncehook {
                    let at = failed_at_text.as_deref().unwrap_or("").as_bytes();
                    amqp::stable_id(&[b"oncehook", mid, cid, at, &body])
                } else {
                    amqp::stable_id(&[mid, cid, &body])
                }
            });

        Letter {
            id,
            tag: delivery.delivery_tag,
            attempts: header_int(headers, HEADER_ATTEMPTS),
            replays: header_int(headers, HEADER_REPLAYS).unwrap_or(0),
            dead_lettered_by: if by_oncehook { "oncehook" } else { "broker" },
            body_len: body.len(),
            properties: props,
            body,
            gateway,
            source,
            event_id,
            event_type,
            kind,
            error,
            failed_at,
            origin,
            routing_key,
            envelope,
            email,
        }
    }

    /// Drops the payload (keeps the parsed fields): peeks of a large queue
    /// keep only what they need.
    fn forget_body(&mut self) {
        self.body = Vec::new();
        if let Some(env) = &mut self.envelope {
            env.body_b64 = String::new();
        }
    }

    fn message_id(&self) -> Option<String> {
        self.properties
            .message_id()
            .as_ref()
            .map(|m| m.as_str().to_owned())
    }

    fn correlation_id(&self) -> Option<String> {
        self.properties
            .correlation_id()
            .as_ref()
            .map(|m| m.as_str().to_owned())
    }

    fn failed_at_rfc3339(&self) -> Option<String> {
        self.failed_at.and_then(|t| t.format(&Rfc3339).ok())
    }

    /// Sorted headers as JSON.
    pub fn headers_json(&self) -> Map<String, Value> {
        let mut map = Map::new();
        if let Some(headers) = self.properties.headers() {
            for (k, v) in headers {
                map.insert(k.as_str().to_owned(), amqp_to_json(v));
            }
        }
        map
    }

    /// The summary fields (`dlq list --json`).
    pub fn summary_json(&self) -> Value {
        json!({
            "id": self.id,
            "gateway": self.gateway,
            "source": self.source,
            "event_id": self.event_id,
            "event_type": self.event_type,
            "kind": self.kind,
            "error": self.error,
            "failed_at": self.failed_at_rfc3339(),
            "attempts": self.attempts,
            "origin": self.origin,
            "routing_key": self.routing_key,
            "message_id": self.message_id(),
            "receipt_id": self.correlation_id(),
            "replays": self.replays,
            "dead_lettered_by": self.dead_lettered_by,
            "body_bytes": self.body_len,
            "headers": Value::Object(self.headers_json()),
        })
    }

    fn row(&self) -> Vec<String> {
        vec![
            self.id.clone(),
            self.gateway.clone(),
            self.event_id.clone().unwrap_or_else(|| "-".into()),
            self.event_type.clone().unwrap_or_else(|| "-".into()),
            self.kind.clone(),
            truncate(&self.error, 60),
            self.failed_at.map(short_time).unwrap_or_else(|| "-".into()),
            self.attempts
                .map(|n| n.to_string())
                .unwrap_or_else(|| "-".into()),
        ]
    }
}

const LIST_HEADERS: [&str; 8] = [
    "ID",
    "GATEWAY",
    "EVENT",
    "TYPE",
    "KIND",
    "ERROR",
    "FAILED AT",
    "ATTEMPTS",
];

/// Converts a header value to JSON (timestamps as RFC 3339, bytes as base64).
pub fn amqp_to_json(v: &AMQPValue) -> Value {
    match v {
        AMQPValue::Boolean(b) => json!(b),
        AMQPValue::ShortShortInt(n) => json!(n),
        AMQPValue::ShortShortUInt(n) => json!(n),
        AMQPValue::ShortInt(n) => json!(n),
        AMQPValue::ShortUInt(n) => json!(n),
        AMQPValue::LongInt(n) => json!(n),
        AMQPValue::LongUInt(n) => json!(n),
        AMQPValue::LongLongInt(n) => json!(n),
        AMQPValue::Float(f) => json!(f),
        AMQPValue::Double(f) => json!(f),
        AMQPValue::DecimalValue(d) => {
            let value = f64::from(d.value) / 10f64.powi(i32::from(d.scale));
            json!(value)
        }
        AMQPValue::ShortString(s) => json!(s.as_str()),
        AMQPValue::LongString(s) => json!(String::from_utf8_lossy(s.as_bytes())),
        AMQPValue::FieldArray(items) => {
            Value::Array(items.as_slice().iter().map(amqp_to_json).collect())
        }
        AMQPValue::Timestamp(secs) => i64::try_from(*secs)
            .ok()
            .and_then(|s| OffsetDateTime::from_unix_timestamp(s).ok())
            .and_then(|t| t.format(&Rfc3339).ok())
            .map_or_else(|| json!(secs), Value::String),
        AMQPValue::FieldTable(t) => Value::Object(
            t.into_iter()
                .map(|(k, v)| (k.as_str().to_owned(), amqp_to_json(v)))
                .collect(),
        ),
        AMQPValue::ByteArray(b) => {
            json!(base64::engine::general_purpose::STANDARD.encode(b.as_slice()))
        }
        AMQPValue::Void => Value::Null,
    }
}

/// A header value for humans: strings bare, everything else as compact JSON.
fn header_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Every message of `queue`, taken with `basic.get` and held unacked on
/// the returned channel (closing it hands them all back in order). Bodies
/// are kept only where `keep_body` says so. The bool is true when the peek
/// stopped at [`PEEK_LIMIT`].
pub async fn peek(
    conn: &Connection,
    topology: &Topology,
    keep_body: impl Fn(&Letter) -> bool,
) -> anyhow::Result<(Channel, Vec<Letter>, bool)> {
    let queue = topology.dead();
    if queue_info(conn, &queue).await?.is_none() {
        bail!(
            "queue {queue} does not exist: is ONCEHOOK_AMQP_PREFIX right (it is {:?}), and has a worker ever started?",
            topology.prefix()
        );
    }
    let ch = conn.create_channel().await.context("opening a channel")?;
    let mut letters = Vec::new();
    let mut truncated = false;
    loop {
        if letters.len() >= PEEK_LIMIT {
            truncated = true;
            break;
        }
        let got = ch
            .basic_get(short(&queue), BasicGetOptions { no_ack: false })
            .await
            .with_context(|| format!("reading {queue}"))?;
        let Some(msg) = got else { break };
        let remaining = msg.message_count;
        let mut letter = Letter::from_delivery(msg.delivery, topology);
        if !keep_body(&letter) {
            letter.forget_body();
        }
        letters.push(letter);
        if remaining == 0 {
            break;
        }
    }
    Ok((ch, letters, truncated))
}

/// Hands every peeked message back to the queue.
pub async fn release(ch: Channel) {
    let _ = ch.close(200, "peek done".into()).await;
}

async fn list(
    conn: &Connection,
    topology: &Topology,
    args: ListArgs,
    out: &Output,
) -> anyhow::Result<ExitCode> {
    let (ch, letters, truncated) = peek(conn, topology, |_| false).await?;
    release(ch).await;
    let now = OffsetDateTime::now_utc();
    let matching: Vec<&Letter> = letters
        .iter()
        .filter(|l| args.filter.matches(l, now))
        .collect();
    let shown: Vec<&Letter> = matching.iter().copied().take(args.limit).collect();
    if out.json {
        out.done(
            "",
            Value::Array(shown.iter().map(|l| l.summary_json()).collect()),
        );
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Vec<String>> = shown.iter().map(|l| l.row()).collect();
    let mut text = String::new();
    if !rows.is_empty() {
        text.push_str(&table(&LIST_HEADERS, &rows));
        text.push('\n');
    }
    text.push_str(&format!(
        "{}{} dead letter(s) in {} (showing {})",
        if truncated { "at least " } else { "" },
        letters.len(),
        topology.dead(),
        shown.len()
    ));
    if !args.filter.is_empty() {
        text.push_str(&format!("; {} match the filter", matching.len()));
    }
    if matching.len() > shown.len() {
        text.push_str("; raise --limit to see more");
    }
    out.done(&text, Value::Null);
    Ok(ExitCode::SUCCESS)
}

/// IDs as users type them.
fn normalise_ids(ids: &[String]) -> Vec<String> {
    let mut seen = BTreeSet::new();
    ids.iter()
        .map(|i| i.trim().to_ascii_lowercase())
        .filter(|i| !i.is_empty() && seen.insert(i.clone()))
        .collect()
}

async fn show(
    conn: &Connection,
    topology: &Topology,
    id: &str,
    out: &Output,
) -> anyhow::Result<ExitCode> {
    let wanted = id.trim().to_ascii_lowercase();
    let (ch, letters, _) = peek(conn, topology, |l| l.id == wanted).await?;
    release(ch).await;
    let copies = letters.iter().filter(|l| l.id == wanted).count();
    let Some(letter) = letters.into_iter().find(|l| l.id == wanted) else {
        bail!(
            "no dead letter with ID {id:?} in {} (IDs come from `oncehookctl dlq list`)",
            topology.dead()
        );
    };
    let payload = letter
        .envelope
        .as_ref()
        .map(|e| e.body())
        .transpose()
        .ok()
        .flatten();
    let form = payload.as_deref().and_then(|p| {
        let looks_form = letter.gateway == "payu"
            || letter
                .envelope
                .as_ref()
                .and_then(|e| e.headers.get("content-type"))
                .is_some_and(|ct| ct.contains("x-www-form-urlencoded"));
        if looks_form && serde_json::from_slice::<Value>(p).is_err() {
            decode_form(p)
        } else {
            None
        }
    });
    let payload_json = payload
        .as_deref()
        .and_then(|p| serde_json::from_slice::<Value>(p).ok());

    if out.json {
        let mut v = letter.summary_json();
        if let Value::Object(map) = &mut v {
            map.insert("copies".into(), json!(copies));
            map.insert("envelope".into(), envelope_json(&letter));
            map.insert(
                "email".into(),
                letter
                    .email
                    .map_or(Value::Null, |m| json!({ "outbox_id": m.outbox_id })),
            );
            map.insert(
                "payload".into(),
                match (&payload_json, &form) {
                    (Some(j), _) => j.clone(),
                    (None, Some(pairs)) => Value::Object(
                        pairs
                            .iter()
                            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                            .collect(),
                    ),
                    _ => Value::Null,
                },
            );
            map.insert(
                "payload_raw".into(),
                payload
                    .as_deref()
                    .map_or(Value::Null, |p| json!(String::from_utf8_lossy(p))),
            );
            map.insert(
                "message_body_b64".into(),
                json!(base64::engine::general_purpose::STANDARD.encode(&letter.body)),
            );
        }
        out.done("", v);
        return Ok(ExitCode::SUCCESS);
    }

    let mut text = format!("Dead letter {} in {}", letter.id, topology.dead());
    if copies > 1 {
        text.push_str(&format!(" ({copies} identical copies)"));
    }
    text.push('\n');
    let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".to_owned());
    let mut fields: Vec<(&str, String)> = vec![
        ("gateway", letter.gateway.clone()),
        ("source", opt(&letter.source)),
        ("event", opt(&letter.event_id)),
        ("type", opt(&letter.event_type)),
        ("kind", letter.kind.clone()),
        ("error", letter.error.clone()),
        (
            "failed at",
            letter.failed_at_rfc3339().unwrap_or_else(|| "-".to_owned()),
        ),
        (
            "attempts",
            letter
                .attempts
                .map_or_else(|| "-".to_owned(), |n| n.to_string()),
        ),
        ("dead-lettered by", letter.dead_lettered_by.to_owned()),
        ("origin", opt(&letter.origin)),
        ("routing key", opt(&letter.routing_key)),
        ("message id", opt(&letter.message_id())),
        ("receipt", opt(&letter.correlation_id())),
        ("replays", letter.replays.to_string()),
    ];
    if let Some(env) = &letter.envelope {
        let t = |t: OffsetDateTime| t.format(&Rfc3339).unwrap_or_default();
        fields.push(("received at", t(env.received_at)));
        fields.push(("verified at", t(env.verified_at)));
        if let Some(s) = env.signed_at {
            fields.push(("signed at", s.to_string()));
        }
    }
    if let Some(m) = &letter.email {
        fields.push(("outbox id", m.outbox_id.to_string()));
    }
    for (k, v) in &fields {
        text.push_str(&format!("  {k:<17} {v}\n"));
    }

    text.push_str("\nHeaders:\n");
    for (k, v) in letter.headers_json() {
        text.push_str(&format!("  {k}: {}\n", header_text(&v)));
    }
    if let Some(env) = &letter.envelope {
        text.push_str("\nGateway request headers:\n");
        for (k, v) in env.headers.iter() {
            text.push_str(&format!("  {k}: {v}\n"));
        }
    }

    match (&payload, &payload_json, &form) {
        (Some(raw), Some(j), _) => {
            text.push_str(&format!("\nPayload (JSON, {} bytes):\n", raw.len()));
            text.push_str(&serde_json::to_string_pretty(j).unwrap_or_default());
            text.push('\n');
        }
        (Some(raw), None, Some(pairs)) => {
            text.push_str(&format!(
                "\nPayload (form, {} bytes), decoded:\n",
                raw.len()
            ));
            for (k, v) in pairs {
                text.push_str(&format!("  {k}={v}\n"));
            }
            text.push_str("Raw:\n");
            text.push_str(&String::from_utf8_lossy(raw));
            text.push('\n');
        }
        (Some(raw), None, None) => {
            text.push_str(&format!("\nPayload (text, {} bytes):\n", raw.len()));
            text.push_str(&String::from_utf8_lossy(raw));
            text.push('\n');
        }
        (None, _, _) => {
            text.push_str(&format!("\nMessage body ({} bytes):\n", letter.body.len()));
            match serde_json::from_slice::<Value>(&letter.body) {
                Ok(j) => text.push_str(&serde_json::to_string_pretty(&j).unwrap_or_default()),
                Err(_) => text.push_str(&String::from_utf8_lossy(&letter.body)),
            }
            text.push('\n');
        }
    }
    out.done(text.trim_end(), Value::Null);
    Ok(ExitCode::SUCCESS)
}

fn envelope_json(letter: &Letter) -> Value {
    let Some(env) = &letter.envelope else {
        return Value::Null;
    };
    let t = |t: OffsetDateTime| t.format(&Rfc3339).ok();
    let headers: Map<String, Value> = env
        .headers
        .iter()
        .map(|(k, v)| (k.to_owned(), Value::String(v.to_owned())))
        .collect();
    json!({
        "version": env.version,
        "receipt_id": env.receipt_id,
        "source": env.source,
        "gateway": env.gateway,
        "event_id": env.event_id,
        "event_type": env.event_type,
        "received_at": t(env.received_at),
        "verified_at": t(env.verified_at),
        "signed_at": env.signed_at,
        "headers": headers,
    })
}

/// Decodes an `application/x-www-form-urlencoded` body into pairs; `None`
/// if it does not look like one.
fn decode_form(raw: &[u8]) -> Option<Vec<(String, String)>> {
    let text = std::str::from_utf8(raw).ok()?.trim();
    if text.is_empty() || text.contains(char::is_whitespace) || !text.contains('=') {
        return None;
    }
    text.split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            Some((percent_decode(k)?, percent_decode(v)?))
        })
        .collect()
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = s.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    Some(String::from_utf8_lossy(&out).into_owned())
}

/// Headers of a replayed copy: the dead-letter bookkeeping removed, the
/// replay counter incremented.
fn replay_headers(headers: Option<&FieldTable>) -> FieldTable {
    let replays = header_int(headers, HEADER_REPLAYS).unwrap_or(0) + 1;
    let strip = |k: &str| {
        k.starts_with(HEADER_ERROR) // x-oncehook-error and x-oncehook-error-kind
            || [
                HEADER_FAILED_AT,
                HEADER_ORIGIN,
                HEADER_ROUTING_KEY,
                HEADER_ATTEMPTS,
                HEADER_DEAD_ID,
                HEADER_DELIVERY_COUNT,
                HEADER_REPLAYS,
                "x-death",
            ]
            .contains(&k)
            || k.starts_with("x-first-death-")
            || k.starts_with("x-last-death-")
    };
    let mut kept: BTreeMap<ShortString, AMQPValue> = headers
        .map(|h| {
            h.into_iter()
                .filter(|(k, _)| !strip(k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default();
    kept.insert(HEADER_REPLAYS.into(), AMQPValue::LongLongInt(replays));
    FieldTable::from(kept)
}

/// Outcome of replaying one dead letter.
struct Replayed {
    id: String,
    gateway: String,
    event: String,
    exchange: String,
    routing_key: String,
    error: Option<String>,
}

async fn replay(
    settings: &Settings,
    conn: &Connection,
    topology: &Topology,
    args: ReplayArgs,
    out: &Output,
) -> anyhow::Result<ExitCode> {
    let ids = normalise_ids(&args.ids);
    if ids.is_empty() && !args.all && args.filter.is_empty() {
        bail!(
            "say what to replay: IDs from `oncehookctl dlq list`, --all, --gateway G, --error-kind K or --since D (try --dry-run first)"
        );
    }
    let now = OffsetDateTime::now_utc();
    let selected = |l: &Letter| {
        if ids.is_empty() {
            args.filter.matches(l, now)
        } else {
            ids.contains(&l.id)
        }
    };
    let keep = |l: &Letter| !args.dry_run && selected(l);
    let (get_ch, letters, truncated) = peek(conn, topology, keep).await?;
    let chosen: Vec<&Letter> = letters.iter().filter(|l| selected(l)).collect();
    let found: BTreeSet<&str> = chosen.iter().map(|l| l.id.as_str()).collect();
    let not_found: Vec<&String> = ids.iter().filter(|i| !found.contains(i.as_str())).collect();
    for id in &not_found {
        eprintln!("error: no dead letter with ID {id} in {}", topology.dead());
    }
    if truncated {
        eprintln!(
            "warning: only the first {PEEK_LIMIT} dead letters were read; run the replay again for the rest"
        );
    }

    if args.dry_run {
        release(get_ch).await;
        let rows: Vec<Vec<String>> = chosen.iter().map(|l| l.row()).collect();
        let text = format!(
            "{}{}would replay {} dead letter(s) from {} (dry run: nothing was changed)",
            if rows.is_empty() {
                String::new()
            } else {
                table(&LIST_HEADERS, &rows)
            },
            if rows.is_empty() { "" } else { "\n" },
            chosen.len(),
            topology.dead(),
        );
        out.done(
            &text,
            json!({
                "dry_run": true,
                "would_replay": chosen.len(),
                "ids": chosen.iter().map(|l| l.id.clone()).collect::<Vec<_>>(),
                "dead_letters": chosen.iter().map(|l| l.summary_json()).collect::<Vec<_>>(),
                "not_found": not_found,
            }),
        );
        return Ok(if not_found.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        });
    }

    if ids.is_empty() && !chosen.is_empty() && !args.yes && std::io::stdin().is_terminal() {
        let question = format!(
            "Type 'yes' to replay {} dead letter(s) from {}: ",
            chosen.len(),
            topology.dead()
        );
        if !confirm(question).await? {
            release(get_ch).await;
            out.done(
                "nothing replayed",
                json!({ "replayed": 0, "failed": 0, "aborted": true }),
            );
            return Ok(ExitCode::FAILURE);
        }
    }

    let total = chosen.len();
    let mut results: Vec<Replayed> = Vec::with_capacity(total);
    let mut pub_ch: Option<Channel> = None;
    let mut pool: Option<sqlx::PgPool> = None;
    for (i, letter) in chosen.iter().enumerate() {
        let mut result = Replayed {
            id: letter.id.clone(),
            gateway: letter.gateway.clone(),
            event: letter.event_id.clone().unwrap_or_else(|| "-".into()),
            exchange: letter.origin.clone().unwrap_or_default(),
            routing_key: letter.routing_key.clone().unwrap_or_default(),
            error: None,
        };
        if let Err(err) = replay_one(
            settings,
            conn,
            topology,
            &get_ch,
            &mut pub_ch,
            &mut pool,
            letter,
        )
        .await
        {
            result.error = Some(format!("{err:#}"));
        }
        results.push(result);
        if total > 100 && (i + 1) % 100 == 0 {
            out.progress(&format!("replayed {} of {total} …", i + 1));
        }
    }
    if let Some(ch) = pub_ch {
        let _ = ch.close(200, "replay done".into()).await;
    }
    release(get_ch).await;
    if let Some(pool) = pool {
        pool.close().await;
    }

    let failed = results.iter().filter(|r| r.error.is_some()).count();
    let replayed = results.len() - failed;
    let mut text = String::new();
    for r in &results {
        match &r.error {
            Some(err) => eprintln!("failed {} ({} {}): {err}", r.id, r.gateway, r.event),
            None if total <= LIST_EACH_UP_TO => text.push_str(&format!(
                "replayed {} ({} {}) to {} with routing key {}\n",
                r.id, r.gateway, r.event, r.exchange, r.routing_key
            )),
            None => {}
        }
    }
    text.push_str(&format!("replayed {replayed}, failed {failed}"));
    if !not_found.is_empty() {
        text.push_str(&format!(", not found {}", not_found.len()));
    }
    out.done(
        &text,
        json!({
            "replayed": replayed,
            "failed": failed,
            "not_found": not_found,
            "results": results.iter().map(|r| json!({
                "id": r.id,
                "gateway": r.gateway,
                "event_id": r.event,
                "exchange": r.exchange,
                "routing_key": r.routing_key,
                "status": if r.error.is_some() { "failed" } else { "replayed" },
                "error": r.error,
            })).collect::<Vec<_>>(),
        }),
    );
    Ok(if failed == 0 && not_found.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Republishes one dead letter with a confirm, then acks it on `get_ch`.
async fn replay_one(
    settings: &Settings,
    conn: &Connection,
    topology: &Topology,
    get_ch: &Channel,
    pub_ch: &mut Option<Channel>,
    pool: &mut Option<sqlx::PgPool>,
    letter: &Letter,
) -> anyhow::Result<()> {
    let (events, emails) = (topology.events(), topology.emails());
    let Some(origin) = letter.origin.as_deref() else {
        bail!("cannot tell which queue it came from (no x-oncehook-origin or x-death header)");
    };
    if origin != events && origin != emails {
        bail!("it came from {origin:?}, which is not {events} or {emails} of this deployment");
    }
    let routing_key = match letter.routing_key.as_deref() {
        Some(rk) => rk.to_owned(),
        None if origin == emails => topology.email_routing_key().to_owned(),
        None => bail!("its original routing key is unknown"),
    };

    if origin == emails
        && let Some(msg) = &letter.email
    {
        if pool.is_none() {
            *pool = Some(
                db::connect(&settings.database_url, 1, 1)
                    .await
                    .context("connecting to the database to clear the email's failure mark")?,
            );
        }
        if let Some(pool) = pool.as_ref() {
            sqlx::query(
                "UPDATE email_outbox SET failed_at = NULL, claimed_until = NULL WHERE id = $1 AND sent_at IS NULL",
            )
            .bind(msg.outbox_id)
            .execute(pool)
            .await
            .with_context(|| format!("clearing the failure mark of outbox row {}", msg.outbox_id))?;
        }
    }

    let ch = match pub_ch {
        Some(ch) if ch.status().connected() => ch.clone(),
        _ => {
            let ch = amqp::confirm_channel(conn)
                .await
                .context("opening a confirm channel")?;
            *pub_ch = Some(ch.clone());
            ch
        }
    };
    let properties = letter
        .properties
        .clone()
        .with_headers(replay_headers(letter.properties.headers().as_ref()))
        .with_delivery_mode(2);
    amqp::publish_confirmed(
        &ch,
        origin,
        &routing_key,
        &letter.body,
        properties,
        settings.publish_timeout,
    )
    .await
    .with_context(|| format!("republishing to {origin} with routing key {routing_key}"))?;
    get_ch
        .basic_ack(letter.tag, BasicAckOptions::default())
        .await
        .context(
            "republished, but removing it from the dead-letter queue failed; it stays there and replaying it again is absorbed as a duplicate",
        )?;
    Ok(())
}

async fn purge(
    conn: &Connection,
    topology: &Topology,
    args: PurgeArgs,
    out: &Output,
) -> anyhow::Result<ExitCode> {
    let dead = topology.dead();
    let interactive = std::io::stdin().is_terminal();
    if args.all {
        let Some((depth, _)) = queue_info(conn, &dead).await? else {
            bail!("queue {dead} does not exist: is ONCEHOOK_AMQP_PREFIX right?");
        };
        if !args.yes {
            println!("would purge all {depth} dead letter(s) in {dead}");
            ask(interactive, depth as usize)
                .await?
                .then_some(())
                .context("nothing purged")?;
        }
        let ch = conn.create_channel().await.context("opening a channel")?;
        let purged = ch
            .queue_purge(short(&dead), QueuePurgeOptions::default())
            .await
            .with_context(|| format!("purging {dead}"))?;
        let _ = ch.close(200, "bye".into()).await;
        out.done(
            &format!("purged {purged} dead letter(s) from {dead}"),
            json!({ "purged": purged, "all": true }),
        );
        return Ok(ExitCode::SUCCESS);
    }

    let ids = normalise_ids(&args.ids);
    if ids.is_empty() {
        bail!("say what to purge: IDs from `oncehookctl dlq list`, or --all");
    }
    // Look first (and hand everything back) so nothing is held while a person decides.
    let (ch, letters, _) = peek(conn, topology, |_| false).await?;
    release(ch).await;
    let chosen: Vec<&Letter> = letters.iter().filter(|l| ids.contains(&l.id)).collect();
    let found: BTreeSet<&str> = chosen.iter().map(|l| l.id.as_str()).collect();
    let not_found: Vec<&String> = ids.iter().filter(|i| !found.contains(i.as_str())).collect();
    for id in &not_found {
        eprintln!("error: no dead letter with ID {id} in {dead}");
    }
    if chosen.is_empty() {
        out.done(
            "purged 0 dead letter(s)",
            json!({ "purged": 0, "not_found": not_found }),
        );
        return Ok(ExitCode::FAILURE);
    }
    if !args.yes {
        let rows: Vec<Vec<String>> = chosen.iter().map(|l| l.row()).collect();
        println!("would purge:\n{}", table(&LIST_HEADERS, &rows));
        ask(interactive, chosen.len())
            .await?
            .then_some(())
            .context("nothing purged")?;
    }

    let (ch, letters, _) = peek(conn, topology, |_| false).await?;
    let mut purged = Vec::new();
    let mut ack_error = None;
    for letter in letters.iter().filter(|l| ids.contains(&l.id)) {
        match ch.basic_ack(letter.tag, BasicAckOptions::default()).await {
            Ok(()) => purged.push(letter.id.clone()),
            Err(err) => {
                ack_error = Some(err);
                break;
            }
        }
    }
    release(ch).await;
    if let Some(err) = ack_error {
        return Err(anyhow::Error::new(err).context(format!(
            "purging stopped after {} dead letter(s)",
            purged.len()
        )));
    }
    let mut text = purged
        .iter()
        .map(|id| format!("purged {id}\n"))
        .collect::<String>();
    text.push_str(&format!(
        "purged {} dead letter(s) from {dead}",
        purged.len()
    ));
    out.done(
        &text,
        json!({ "purged": purged.len(), "ids": purged, "not_found": not_found }),
    );
    Ok(if not_found.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Asks to confirm purging `n` dead letters; refuses outright without a terminal.
async fn ask(interactive: bool, n: usize) -> anyhow::Result<bool> {
    if !interactive {
        bail!(
            "refusing to purge {n} dead letter(s) without confirmation: stdin is not a terminal; pass --yes"
        );
    }
    confirm(format!("Type 'yes' to purge {n} dead letter(s): ")).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_bodies_decode() {
        let pairs = decode_form(b"txnid=order_1&status=failure&field9=Transaction+declined%21")
            .expect("form");
        assert_eq!(pairs[0], ("txnid".into(), "order_1".into()));
        assert_eq!(pairs[2], ("field9".into(), "Transaction declined!".into()));
        assert!(decode_form(b"{\"a\": 1}").is_none());
        assert!(decode_form(b"a=%zz").is_none());
    }

    #[test]
    fn replay_strips_bookkeeping_and_counts_replays() {
        let mut h = FieldTable::default();
        for k in [
            HEADER_ERROR,
            HEADER_ERROR_KIND,
            HEADER_FAILED_AT,
            HEADER_ORIGIN,
            HEADER_ROUTING_KEY,
            HEADER_DEAD_ID,
            "x-first-death-queue",
            "x-last-death-reason",
        ] {
            h.insert(k.into(), AMQPValue::LongString("x".into()));
        }
        h.insert(HEADER_ATTEMPTS.into(), AMQPValue::LongLongInt(3));
        h.insert(HEADER_DELIVERY_COUNT.into(), AMQPValue::LongLongInt(7));
        h.insert("x-death".into(), AMQPValue::FieldArray(Vec::new().into()));
        h.insert(HEADER_SOURCE.into(), AMQPValue::LongString("rzp".into()));
        h.insert(HEADER_REPLAYS.into(), AMQPValue::LongLongInt(1));
        let out = replay_headers(Some(&h));
        let keys: Vec<&str> = out.inner().keys().map(|k| k.as_str()).collect();
        assert_eq!(keys, vec![HEADER_REPLAYS, HEADER_SOURCE]);
        assert_eq!(header_int(Some(&out), HEADER_REPLAYS), Some(2));
    }
}
