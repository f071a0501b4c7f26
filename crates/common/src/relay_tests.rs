//! The relay over an in-memory store and publisher: batches grouped by
//! routing key and marked in the same transaction, nothing marked when a
//! publish fails, rows with nothing to say marked all the same, full
//! batches followed at once, and a closed channel ending the relay.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::*;

/// Rows `(id, routing key)`; `None` as the key: nothing to publish.
#[derive(Default)]
struct Rows {
    unpublished: Mutex<Vec<(u32, Option<&'static str>)>>,
    published: Mutex<Vec<u32>>,
}

struct Memory(Arc<Rows>);

/// A transaction: what it would mark, applied on commit.
struct MemoryTx {
    rows: Arc<Rows>,
    marked: Vec<u32>,
}

impl Store for Memory {
    type Tx = MemoryTx;

    async fn begin(&self) -> Result<MemoryTx, sqlx::Error> {
        Ok(MemoryTx {
            rows: self.0.clone(),
            marked: Vec::new(),
        })
    }

    async fn commit(tx: MemoryTx) -> Result<(), sqlx::Error> {
        let mut unpublished = tx.rows.unpublished.lock().expect("rows");
        unpublished.retain(|(id, _)| !tx.marked.contains(id));
        tx.rows.published.lock().expect("rows").extend(&tx.marked);
        Ok(())
    }
}

struct Test;

impl Source<Memory> for Test {
    type Row = (u32, Option<&'static str>);
    const FAILING: &'static str = "test relay pass failed; will retry";
    const RECOVERED: &'static str = "test relay works again";

    fn count_published(_n: u64) {}

    async fn lock(&self, tx: &mut MemoryTx, limit: usize) -> Result<Vec<Self::Row>, sqlx::Error> {
        let rows = tx.rows.unpublished.lock().expect("rows");
        Ok(rows.iter().take(limit).copied().collect())
    }

    async fn message(
        &self,
        _tx: &mut MemoryTx,
        row: &Self::Row,
    ) -> Result<Option<Outgoing>, sqlx::Error> {
        Ok(row.1.map(|key| Outgoing {
            routing_key: key.to_owned(),
            id: row.0.to_string(),
            body: row.0.to_string().into_bytes(),
            properties: BasicProperties::default(),
            trace_parent: None,
        }))
    }

    async fn mark(&self, tx: &mut MemoryTx, rows: &[Self::Row]) -> Result<(), sqlx::Error> {
        tx.marked.extend(rows.iter().map(|r| r.0));
        Ok(())
    }
}

/// Records each publish as (routing key, bodies); fails while `failing`.
#[derive(Default)]
struct Recorder {
    publishes: Mutex<Vec<(String, Vec<String>)>>,
    failing: AtomicBool,
    closed: AtomicBool,
}

impl Publish for Arc<Recorder> {
    fn exchange(&self) -> &str {
        "P.test"
    }

    async fn publish(
        &self,
        routing_key: &str,
        messages: Vec<(Vec<u8>, BasicProperties)>,
    ) -> Result<(), PublishError> {
        if self.failing.load(Ordering::SeqCst) {
            return Err(PublishError::Nacked);
        }
        let bodies = messages
            .into_iter()
            .map(|(body, _)| String::from_utf8(body).expect("text"))
            .collect();
        self.publishes
            .lock()
            .expect("publishes")
            .push((routing_key.to_owned(), bodies));
        Ok(())
    }

    fn is_open(&self) -> bool {
        !self.closed.load(Ordering::SeqCst)
    }
}

fn relay(
    rows: Vec<(u32, Option<&'static str>)>,
) -> (Relay<Test, Memory, Arc<Recorder>>, Arc<Rows>) {
    let store = Arc::new(Rows {
        unpublished: Mutex::new(rows),
        published: Mutex::default(),
    });
    let relay = Relay {
        store: Memory(store.clone()),
        publisher: Arc::new(Recorder::default()),
        source: Test,
    };
    (relay, store)
}

fn published(rows: &Rows) -> Vec<u32> {
    rows.published.lock().expect("rows").clone()
}

#[tokio::test]
async fn a_batch_is_published_by_routing_key_and_marked() {
    let (relay, rows) = relay(vec![
        (1, Some("order.paid")),
        (2, Some("order.refunded")),
        (3, Some("order.paid")),
        (4, None),
    ]);
    assert_eq!(relay.publish_batch().await.expect("pass"), 4);
    let publishes = relay.publisher.publishes.lock().expect("publishes").clone();
    assert_eq!(
        publishes,
        [
            (
                "order.paid".to_owned(),
                vec!["1".to_owned(), "3".to_owned()]
            ),
            ("order.refunded".to_owned(), vec!["2".to_owned()]),
        ],
        "one round trip per routing key; the row with nothing to say is not published"
    );
    assert_eq!(published(&rows), [1, 2, 3, 4], "every locked row is marked");
    assert_eq!(
        relay.publish_batch().await.expect("pass"),
        0,
        "nothing left"
    );
}

#[tokio::test]
async fn a_failed_publish_marks_nothing() {
    let (relay, rows) = relay(vec![(1, Some("email")), (2, Some("email"))]);
    relay.publisher.failing.store(true, Ordering::SeqCst);
    let err = relay.publish_batch().await.expect_err("nacked");
    assert!(
        matches!(err, RelayError::Publish { count: 2, ref routing_key, .. } if routing_key == "email"),
        "{err}"
    );
    assert!(published(&rows).is_empty());
    relay.publisher.failing.store(false, Ordering::SeqCst);
    assert_eq!(
        relay.publish_batch().await.expect("pass"),
        2,
        "published again"
    );
    assert_eq!(published(&rows), [1, 2]);
}

#[tokio::test(start_paused = true)]
async fn full_batches_go_again_at_once_until_the_outbox_is_empty() {
    let many: Vec<_> = (0..(2 * BATCH as u32 + 5))
        .map(|id| (id, Some("email")))
        .collect();
    let (relay, rows) = relay(many);
    let shutdown = Shutdown::new();
    let relay = Arc::new(relay);
    let running = {
        let (relay, shutdown) = (relay.clone(), shutdown.clone());
        tokio::spawn(async move {
            relay
                .run(
                    Periodic::every("test relay", Duration::from_secs(60)),
                    &shutdown,
                )
                .await;
        })
    };
    // All three batches go out before the first pause ends.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(published(&rows).len(), 2 * BATCH + 5);
    assert_eq!(
        relay.publisher.publishes.lock().expect("publishes").len(),
        3
    );
    shutdown.trigger();
    running.await.expect("relay");
}

#[tokio::test(start_paused = true)]
async fn a_closed_channel_ends_the_relay() {
    let (relay, rows) = relay(vec![(1, Some("email"))]);
    relay.publisher.failing.store(true, Ordering::SeqCst);
    relay.publisher.closed.store(true, Ordering::SeqCst);
    let shutdown = Shutdown::new();
    relay
        .run(
            Periodic::every("test relay", Duration::from_secs(1)),
            &shutdown,
        )
        .await;
    assert!(published(&rows).is_empty(), "left for the next session");
}
