//! The worker in process: its pipeline and ledger against the test's own
//! Postgres database, fed through the in-memory queue seam
//! (`oncehook_common::consume::memory`) instead of a broker, so ledger and
//! grouping cases run without RabbitMQ, without binaries and without
//! sleeps. [`envelope`] wraps a signed sample as ingest would;
//! [`InProcess::deliver`] runs one message through the worker's handler
//! and the consume loop's verdict; [`commit_group`] commits chosen
//! deliveries as one group, so a test decides what shares a transaction.

use std::collections::HashMap;
use std::sync::Arc;

use oncehook_common::config::Pooler;
use oncehook_common::consume::dispatch;
use oncehook_common::consume::memory::{MemoryDeadLetters, MemoryDelivery, Settled};
use oncehook_common::shutdown::Shutdown;
use oncehook_common::store::Pooled;
use oncehook_common::{Config, Envelope};
use oncehook_gateways::Gateway;
use oncehook_gateways::sample::SignedDelivery;
use oncehook_pipeline::consumer::Worker;
use oncehook_pipeline::{self as pipeline, Effect, ProcessError, Processed};
use sqlx::PgPool;
use time::OffsetDateTime;

/// A signed delivery from `source` wrapped as ingest publishes it (with
/// ingest's parse of the body).
pub fn envelope(source: &str, gateway: Gateway, signed: &SignedDelivery) -> Envelope {
    Envelope::verified(
        source,
        gateway,
        signed.headers.clone(),
        &signed.body,
        OffsetDateTime::now_utc(),
        None,
    )
}

/// A worker in this process; see the module documentation.
pub struct InProcess<E: Effect> {
    pub worker: Arc<Worker<E>>,
    pub dead_letters: MemoryDeadLetters,
}

impl<E: Effect> InProcess<E> {
    /// A worker over `pool` with `effect` and these settings (environment
    /// variables, e.g. `ONCEHOOK_WORKER_BATCH_SIZE`).
    pub fn start(pool: &PgPool, effect: E, vars: &[(&str, &str)]) -> Self {
        let env: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let settings = Config::from_env_map(&env)
            .expect("worker settings")
            .into_worker();
        InProcess {
            worker: Worker::new(
                Pooled::new(pool.clone(), Pooler::None),
                effect,
                settings,
                Shutdown::new(),
            ),
            dead_letters: MemoryDeadLetters::default(),
        }
    }

    /// Runs one message through the handler and the consume loop; what the
    /// loop did with it.
    pub async fn deliver(&self, envelope: &Envelope) -> Vec<Settled> {
        let delivery =
            MemoryDelivery::new(envelope.to_bytes()).with_message_id(&envelope.message_id());
        dispatch(
            self.worker.clone(),
            delivery.clone(),
            Arc::new(self.dead_letters.clone()),
        )
        .await;
        delivery.settled()
    }

    /// Runs every message at once (each on its own task, as the consume
    /// loop does); what the loop did with each, in their order.
    pub async fn deliver_all(&self, envelopes: &[Envelope]) -> Vec<Vec<Settled>> {
        let tasks: Vec<_> = envelopes
            .iter()
            .map(|envelope| {
                let delivery = MemoryDelivery::new(envelope.to_bytes())
                    .with_message_id(&envelope.message_id());
                let (worker, sink) = (self.worker.clone(), Arc::new(self.dead_letters.clone()));
                tokio::spawn(async move {
                    dispatch(worker, delivery.clone(), sink).await;
                    delivery.settled()
                })
            })
            .collect();
        let mut settled = Vec::with_capacity(tasks.len());
        for task in tasks {
            settled.push(task.await.expect("a delivery task"));
        }
        settled
    }
}

/// Commits `envelopes` as one group through the pipeline's one
/// transaction path.
pub async fn commit_group<E: Effect>(
    pool: &PgPool,
    effect: &E,
    envelopes: &[Envelope],
) -> Result<Vec<Processed>, ProcessError> {
    commit_group_behind(pool, Pooler::None, effect, envelopes).await
}

/// [`commit_group`] as a worker configured with `pooler` in front of its
/// database commits it.
pub async fn commit_group_behind<E: Effect>(
    pool: &PgPool,
    pooler: Pooler,
    effect: &E,
    envelopes: &[Envelope],
) -> Result<Vec<Processed>, ProcessError> {
    let deliveries: Vec<_> = envelopes
        .iter()
        .map(|e| pipeline::decode(&e.to_bytes(), &e.message_id()).expect("a readable envelope"))
        .collect();
    let refs: Vec<&pipeline::Delivery> = deliveries.iter().collect();
    pipeline::commit(&Pooled::new(pool.clone(), pooler), effect, &refs).await
}
