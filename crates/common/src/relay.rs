//! The one outbox relay: takes rows a transaction committed for the broker
//! (the worker's `email_outbox`, the ledger's `order_events`), publishes
//! them with publisher confirms and marks them published — all in one
//! transaction that holds the rows (`FOR UPDATE SKIP LOCKED`, so it is safe
//! in every copy of a service). A crash between publish and mark publishes
//! a row twice; the consumers absorb that (the mailer's `sent_at`, the
//! notifier's fan-out keyed on the event id).
//!
//! What differs between relays is a [`Source`]: how to lock a batch, what
//! message each row becomes (with its routing key and the trace it belongs
//! to), how to mark rows published, and the names of its log lines and
//! counter. The relay groups a batch's messages by routing key (one
//! confirmed round trip per key), gives each message a producer span in
//! the trace of the row, runs on a [`Periodic`] cadence (a full batch goes
//! again at once) and stops when its channel closes (the broker session
//! starts a new relay). The transaction and the broker sit behind
//! [`Store`] and [`Publish`], so the relay is tested without either.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use lapin::{BasicProperties, Channel};
use sqlx::{Postgres, Transaction};

use crate::amqp::{self, PublishError};
use crate::otel;
use crate::periodic::{Next, Periodic};
use crate::shutdown::Shutdown;
use crate::store::Pooled;

/// Rows locked per transaction.
pub const BATCH: usize = 100;

/// Where the rows live: a transaction begun and committed.
pub trait Store: Send + Sync {
    type Tx: Send;
    fn begin(&self) -> impl Future<Output = Result<Self::Tx, sqlx::Error>> + Send;
    fn commit(tx: Self::Tx) -> impl Future<Output = Result<(), sqlx::Error>> + Send;
}

impl Store for Pooled {
    type Tx = Transaction<'static, Postgres>;

    async fn begin(&self) -> Result<Self::Tx, sqlx::Error> {
        Pooled::begin(self).await
    }

    async fn commit(tx: Self::Tx) -> Result<(), sqlx::Error> {
        tx.commit().await
    }
}

/// One kind of row to relay (emails, order events).
pub trait Source<S: Store = Pooled>: Send + Sync {
    type Row: Send + Sync;
    /// The warning of a spell of failed passes (`outbox relay pass failed; will retry`).
    const FAILING: &'static str;
    /// The line of the first pass that works after such a spell.
    const RECOVERED: &'static str;
    /// Counts `n` rows published, on the source's own counter
    /// (`oncehook_outbox_published_total`).
    fn count_published(n: u64);

    /// Locks up to `limit` unpublished rows, oldest first.
    fn lock(
        &self,
        tx: &mut S::Tx,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<Self::Row>, sqlx::Error>> + Send;

    /// The message `row` becomes; `None` when there is nothing to publish
    /// any more (the row is marked all the same).
    fn message(
        &self,
        tx: &mut S::Tx,
        row: &Self::Row,
    ) -> impl Future<Output = Result<Option<Outgoing>, sqlx::Error>> + Send;

    /// Marks `rows` published.
    fn mark(
        &self,
        tx: &mut S::Tx,
        rows: &[Self::Row],
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;
}

/// One message to publish.
#[derive(Debug, Clone)]
pub struct Outgoing {
    pub routing_key: String,
    /// The row's id, named by the message's producer span.
    pub id: String,
    pub body: Vec<u8>,
    pub properties: BasicProperties,
    /// The trace of the transaction that wrote the row, if it was traced.
    pub trace_parent: Option<String>,
}

/// Where the messages go: one exchange, confirmed publishes.
pub trait Publish: Send + Sync {
    fn exchange(&self) -> &str;
    /// Publishes `messages` with `routing_key`, every confirm awaited.
    fn publish(
        &self,
        routing_key: &str,
        messages: Vec<(Vec<u8>, BasicProperties)>,
    ) -> impl Future<Output = Result<(), PublishError>> + Send;
    /// Whether publishing can still work (the channel is open).
    fn is_open(&self) -> bool;
}

/// Publishing on a confirm channel of a broker session.
#[derive(Debug, Clone)]
pub struct Confirmed {
    pub channel: Channel,
    pub exchange: String,
    /// How long each batch waits for its confirms.
    pub timeout: Duration,
}

impl Publish for Confirmed {
    fn exchange(&self) -> &str {
        &self.exchange
    }

    async fn publish(
        &self,
        routing_key: &str,
        messages: Vec<(Vec<u8>, BasicProperties)>,
    ) -> Result<(), PublishError> {
        amqp::publish_all_confirmed(
            &self.channel,
            &self.exchange,
            routing_key,
            messages,
            self.timeout,
        )
        .await
    }

    fn is_open(&self) -> bool {
        self.channel.status().connected()
    }
}

/// Why a relay pass stopped.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error("relay query failed: {0}")]
    Database(#[from] sqlx::Error),
    #[error("publishing {count} message(s) with routing key {routing_key} failed: {source}")]
    Publish {
        routing_key: String,
        count: usize,
        source: PublishError,
    },
}

/// A relay of `source`'s rows from `store` to `publisher`.
#[derive(Debug)]
pub struct Relay<Src, S = Pooled, P = Confirmed> {
    pub store: S,
    pub publisher: P,
    pub source: Src,
}

impl<Src, S, P> Relay<Src, S, P>
where
    S: Store,
    P: Publish,
    Src: Source<S>,
{
    /// Publishes batches on `cadence` until `stop` fires or publishing can
    /// no longer work; a full batch is followed by the next at once.
    pub async fn run(&self, cadence: Periodic, stop: &Shutdown) {
        let this = self;
        cadence
            .logs(Src::FAILING, Src::RECOVERED)
            .run(stop, move || async move {
                match this.publish_batch().await {
                    Ok(n) if n == BATCH => Ok(Next::Again),
                    Ok(_) => Ok(Next::Pause),
                    Err(error) if !this.publisher.is_open() => {
                        tracing::warn!(%error, "{} (the channel closed; the next broker session relays)", Src::FAILING);
                        Ok(Next::Stop)
                    }
                    Err(error) => Err(error),
                }
            })
            .await;
    }

    /// Publishes up to [`BATCH`] unpublished rows and marks them; returns
    /// how many rows it took. If any confirm fails, nothing is marked and
    /// the whole batch is published again by a later pass.
    pub async fn publish_batch(&self) -> Result<usize, RelayError> {
        let mut tx = self.store.begin().await?;
        let rows = self.source.lock(&mut tx, BATCH).await?;
        if rows.is_empty() {
            return Ok(0);
        }
        let exchange = self.publisher.exchange().to_owned();
        // One confirmed round trip per routing key.
        let mut by_key: BTreeMap<String, Vec<(Vec<u8>, BasicProperties)>> = BTreeMap::new();
        for row in &rows {
            let Some(out) = self.source.message(&mut tx, row).await? else {
                continue;
            };
            let mut properties = out.properties;
            if let Some(tp) = &out.trace_parent {
                // A producer span in the trace of the transaction that
                // wrote the row; the message carries it on.
                let span = otel::producer_span(&exchange, &out.routing_key, &out.id);
                otel::set_parent(&span, otel::from_traceparent(tp));
                let mut headers = lapin::types::FieldTable::default();
                span.in_scope(|| otel::inject_amqp(&mut headers));
                properties = properties.with_headers(headers);
            }
            by_key
                .entry(out.routing_key)
                .or_default()
                .push((out.body, properties));
        }
        for (routing_key, messages) in by_key {
            let count = messages.len();
            self.publisher
                .publish(&routing_key, messages)
                .await
                .map_err(|source| RelayError::Publish {
                    routing_key,
                    count,
                    source,
                })?;
        }
        self.source.mark(&mut tx, &rows).await?;
        S::commit(tx).await?;
        Src::count_published(rows.len() as u64);
        tracing::debug!(count = rows.len(), exchange, "rows relayed");
        Ok(rows.len())
    }
}

#[cfg(test)]
#[path = "relay_tests.rs"]
mod tests;
