//! Publishing what a run found: each new fact as an envelope of origin
//! `reconciliation` to its tenant's bulk lane, with publisher confirms, on a
//! connection of the run's own (a run every few minutes does not keep one
//! open). The worker then applies it like any webhook's event. The
//! topology is declared first, as ingest does, so `oncehookctl reconcile`
//! publishes as well on a broker no worker or ingest has prepared yet.

use std::time::Duration;

use lapin::Connection;
use oncehook_common::config::BrokerConfig;
use oncehook_common::{Envelope, Topology, amqp};

/// How long a connection attempt to one node may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a fact could not be published.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error("connecting to RabbitMQ: {0}")]
    Connect(#[from] amqp::ConnectError),
    #[error("opening a confirm channel: {0}")]
    Channel(#[from] lapin::Error),
    #[error("declaring the exchanges and queues: {0}")]
    Topology(lapin::Error),
    #[error("publishing {message_id}: {error}")]
    Publish {
        message_id: String,
        error: amqp::PublishError,
    },
}

/// A run's publisher.
pub struct Publisher {
    conn: Connection,
    channel: lapin::Channel,
    topology: Topology,
    timeout: Duration,
}

impl Publisher {
    /// Connects to the broker (one attempt per node).
    pub async fn connect(broker: &BrokerConfig) -> Result<Publisher, PublishError> {
        let conn = amqp::connect_any(&broker.nodes, "oncehook-reconciler", CONNECT_TIMEOUT).await?;
        let topology = Topology::new(broker.prefix.clone());
        topology
            .declare(&conn, &broker.queue_settings())
            .await
            .map_err(PublishError::Topology)?;
        let channel = amqp::confirm_channel(&conn).await?;
        Ok(Publisher {
            conn,
            channel,
            topology,
            timeout: broker.publish_timeout,
        })
    }

    /// Publishes one envelope to its tenant's bulk lane — a pass's facts
    /// queue behind that tenant's own deliveries, never in front of another
    /// tenant's (docs/tenants.md, "Fairness") — and waits for the broker's
    /// confirm.
    pub async fn publish(&self, envelope: &Envelope) -> Result<(), PublishError> {
        let (exchange, routing_key) = self
            .topology
            .bulk_route(&envelope.tenant, &envelope.routing_key());
        amqp::publish_confirmed(
            &self.channel,
            &exchange,
            &routing_key,
            &envelope.to_bytes(),
            envelope.properties(),
            self.timeout,
        )
        .await
        .map_err(|error| PublishError::Publish {
            message_id: envelope.message_id(),
            error,
        })
    }

    /// Closes the connection (best effort).
    pub async fn close(self) {
        let _ = self.conn.close(200, "reconciliation run done".into()).await;
    }
}
