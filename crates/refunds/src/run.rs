//! The worker's refunder task: every `[refunds] interval` (and once at
//! start), on its own connections, it decides the `owed` intents by their
//! source's policy, then claims and sends approved intents one at a time
//! until none is due, and refreshes the refund gauges. Runs only where some
//! source's mode is not `off`. A failed pass is logged; the next tries
//! again. A claimed intent's lease keeps other workers off it while it is
//! sent; the kill switch (`oncehookctl refunds pause`) stops claims at once.

use std::collections::HashMap;
use std::sync::Arc;

use oncehook_common::config::{BrokerConfig, Config, RefundMode, RefundsConfig};
use oncehook_common::otel;
use oncehook_common::periodic::{Next, Periodic};
use oncehook_common::shutdown::Shutdown;
use oncehook_common::store::Pooled;
use oncehook_gateway_api::store::{self as orders, Selection};
use oncehook_gateway_api::{ApiSource, Client};
use oncehook_gateways::Gateway;
use oncehook_gateways::reconcile::{OrderNames, order_names};
use oncehook_ledger::store::refund_intents::{self as store, BY_POLICY, Failure, Intent};

use tracing::Instrument as _;

use crate::RefundError;
use crate::policy::{self, Decision, Reach};
use crate::send::{self, Attempt, FactPublisher};
use oncehook_common::store::scope::Scope;
use oncehook_common::tenant::TenantId;

/// The most intents decided, or sent, in one pass (the next pass goes on).
const PER_PASS: i64 = 100;

/// The refunder: its database, the sources it can refund through, the
/// policy, and what it publishes and calls with.
pub struct Refunder {
    pool: Pooled,
    sources: Vec<ApiSource>,
    config: RefundsConfig,
    broker: BrokerConfig,
    client: Client,
}

impl Refunder {
    /// The refunder of `config`'s sources with an API, in the default
    /// tenant's scope: it sends that tenant's refunds alone, through its
    /// sources (docs/tenants.md: refunds for other tenants are to come).
    pub fn new(config: &Config, pool: Pooled) -> Result<Refunder, RefundError> {
        Ok(Refunder {
            pool: pool.scoped(Scope::tenant(TenantId::default_tenant())),
            // Another tenant's sources reconcile (each for its own orders)
            // but do not refund yet: its intents wait for an operator.
            sources: ApiSource::all(config)
                .into_iter()
                .filter(|s| s.tenant.is_default())
                .collect(),
            config: config.refunds.clone(),
            broker: config.broker.clone(),
            client: Client::new(config.reconcile.timeout)?,
        })
    }

    pub fn config(&self) -> &RefundsConfig {
        &self.config
    }

    /// The source `intent` is refunded through: the one recorded, else the
    /// only source of its gateway oncehook can ask.
    fn source_of(&self, intent: &Intent) -> Option<&ApiSource> {
        if let Some(name) = intent.source.as_deref() {
            return self.sources.iter().find(|s| s.name == name);
        }
        let mut of_gateway = self
            .sources
            .iter()
            .filter(|s| s.gateway.as_str() == intent.provider);
        match (of_gateway.next(), of_gateway.next()) {
            (Some(only), None) => Some(only),
            _ => None,
        }
    }

    fn reach(&self, intent: &Intent) -> (Reach, Option<String>) {
        match self.source_of(intent) {
            Some(s) if s.gateway.refunds().is_some() => (Reach::Refundable, Some(s.name.clone())),
            Some(s) => (Reach::NoRefundApi, Some(s.name.clone())),
            None if intent.source.is_some() => (Reach::NoApi, intent.source.clone()),
            None => (Reach::UnknownSource, None),
        }
    }

    /// Decides the `owed` intents: approves what the policy lets go, notes
    /// why the rest waits, a page at a time, each page in one transaction
    /// under the policy's lock, so two workers never both fit an intent
    /// under one day's ceiling. An intent whose reason to wait is unchanged
    /// costs no write: a backlog waiting for operators stays cheap.
    pub async fn decide(&self) -> Result<usize, RefundError> {
        let mut approved = 0;
        let mut after = None;
        loop {
            let mut tx = self.pool.begin().await?;
            store::lock_policy(&mut tx).await?;
            let owed = store::owed(&mut tx, after.clone(), PER_PASS).await?;
            let mut today = HashMap::new();
            for intent in &owed {
                approved += usize::from(self.decide_one(&mut tx, intent, &mut today).await?);
            }
            tx.commit().await?;
            match owed.last() {
                Some(last) if owed.len() as i64 == PER_PASS => {
                    after = Some((last.created_at, last.id.clone()));
                }
                _ => return Ok(approved),
            }
        }
    }

    /// Decides one `owed` intent; whether it was approved. `today` holds
    /// what the policy let go today per source and currency, read once per
    /// page.
    async fn decide_one(
        &self,
        tx: &mut sqlx::PgConnection,
        intent: &Intent,
        today: &mut HashMap<(String, String), i64>,
    ) -> Result<bool, RefundError> {
        let (reach, source) = self.reach(intent);
        let name = source.clone().unwrap_or_default();
        let day = (name.clone(), intent.currency.clone());
        let intent = Intent {
            source: source.clone(),
            ..intent.clone()
        };
        let policy = self.config.policy(&name);
        // A hold that does not depend on the day's total needs no reading of it.
        let decision = match policy::decide(&intent, policy, reach, 0) {
            Decision::Approve => {
                let sum = match today.get(&day) {
                    Some(sum) => *sum,
                    None => store::approved_by_policy_today(tx, &name, &intent.currency).await?,
                };
                today.insert(day.clone(), sum);
                policy::decide(&intent, policy, reach, sum)
            }
            hold => hold,
        };
        match decision {
            Decision::Approve => {
                let done = store::approve(tx, &intent.id, source.as_deref(), BY_POLICY).await?;
                if done {
                    let amount = intent.sent_minor.unwrap_or_else(|| intent.outstanding());
                    *today.entry(day).or_default() += amount;
                    tracing::info!(intent = %intent.id, order_ref = %intent.order_ref, reason = %intent.reason, amount_minor = amount, source = %name, "refund approved by the policy");
                }
                Ok(done)
            }
            Decision::Hold(why) => {
                if intent.held_because.as_deref() != Some(why.as_str()) {
                    tracing::info!(intent = %intent.id, order_ref = %intent.order_ref, because = %why, "refund waits for an operator");
                    store::hold(tx, &intent.id, source.as_deref(), &why).await?;
                }
                Ok(false)
            }
        }
    }

    /// Claims and sends due intents one at a time until none is due (or
    /// the pass's share is done, or shutdown); then asks about refunds the
    /// gateways accepted as pending.
    pub async fn send_due(&self, shutdown: &Shutdown) -> Result<usize, RefundError> {
        let mut facts = FactPublisher::new(&self.broker);
        let result = self.send_each(shutdown, &mut facts).await;
        facts.close().await;
        result
    }

    async fn send_each(
        &self,
        shutdown: &Shutdown,
        facts: &mut FactPublisher<'_>,
    ) -> Result<usize, RefundError> {
        let mut sent = 0;
        for _ in 0..PER_PASS {
            if shutdown.is_triggered() {
                break;
            }
            let claimed = {
                let mut conn = self.pool.single().await?;
                let mut claimed = store::claim(&mut conn, self.config.lease).await?;
                if claimed.is_none() {
                    claimed = store::claim_check(&mut conn, self.config.lease).await?;
                }
                conn.finish().await?;
                claimed
            };
            let Some(intent) = claimed else { break };
            // The refund joins the trace of the delivery that minted it.
            let span = tracing::info_span!(
                "refund",
                otel.name = "refund",
                otel.kind = "client",
                oncehook.intent = %intent.id,
                oncehook.order_ref = %intent.order_ref,
                oncehook.gateway = %intent.provider,
            );
            if let Some(tp) = &intent.trace_parent {
                otel::set_parent(&span, otel::from_traceparent(tp));
            }
            let attempt = self.send_one(&intent, facts).instrument(span).await?;
            metrics::counter!("oncehook_refund_attempts_total", "gateway" => intent.provider.clone(), "outcome" => attempt.as_str())
                .increment(1);
            if attempt == Attempt::Sent {
                sent += 1;
            }
        }
        Ok(sent)
    }

    async fn send_one(
        &self,
        intent: &Intent,
        facts: &mut FactPublisher<'_>,
    ) -> Result<Attempt, RefundError> {
        let source = self.source_of(intent);
        let api = source.and_then(|s| s.gateway.refunds());
        let (Some(source), Some(api)) = (source, api) else {
            let mut conn = self.pool.single().await?;
            store::mark_failed(
                &mut conn,
                &intent.id,
                "unreachable",
                "no configured source can refund this payment (check [[source]] and [source.api])",
                Failure::Unanswered,
            )
            .await?;
            conn.finish().await?;
            return Ok(Attempt::Refused);
        };
        if self.config.policy(&source.name).mode == RefundMode::Off {
            let mut conn = self.pool.single().await?;
            let why = format!(
                "refunds are off for source {}: turn them on ([refunds] mode), then approve it again",
                source.name
            );
            store::mark_failed(&mut conn, &intent.id, "off", &why, Failure::Unanswered).await?;
            conn.finish().await?;
            return Ok(Attempt::Refused);
        }
        let order = self.order_names(source.gateway, &intent.order_ref).await?;
        send::send(
            &self.pool,
            &self.client,
            facts,
            source,
            api,
            intent,
            order,
            self.config.lease,
        )
        .await
    }

    /// What the intent's order is known as at `gateway`.
    async fn order_names(
        &self,
        gateway: Gateway,
        order_ref: &str,
    ) -> Result<OrderNames, RefundError> {
        let found = orders::due_orders(&self.pool, &Selection::One(order_ref.to_owned())).await?;
        Ok(match found.first() {
            Some(o) => order_names(gateway, &o.order_ref, &o.refs, &o.payments),
            None => order_names(gateway, order_ref, &[], &[]),
        })
    }

    /// Sets the refund gauges from the table.
    pub async fn gauges(&self) -> Result<(), RefundError> {
        let mut conn = self.pool.single().await?;
        let tally = store::tally(&mut conn).await?;
        let oldest = store::oldest_open_secs(&mut conn).await?;
        let paused = store::paused(&mut conn).await?;
        conn.finish().await?;
        for state in oncehook_common::refund::STATES {
            for reason in oncehook_common::refund::REASONS {
                let t = tally
                    .iter()
                    .find(|t| t.state == *state && t.reason == *reason);
                metrics::gauge!("oncehook_refund_intents", "state" => *state, "reason" => *reason)
                    .set(t.map_or(0.0, |t| t.count as f64));
            }
        }
        let open = ["owed", "approved", "sending", "sent", "failed"];
        let owed: i64 = tally
            .iter()
            .filter(|t| open.contains(&t.state.as_str()))
            .map(|t| t.amount_minor.saturating_sub(t.refunded_minor).max(0))
            .sum();
        let refunded: i64 = tally
            .iter()
            .filter(|t| t.state == "settled")
            .map(|t| t.refunded_minor)
            .sum();
        metrics::gauge!("oncehook_refund_owed_minor").set(owed as f64);
        metrics::gauge!("oncehook_refund_settled_minor").set(refunded as f64);
        metrics::gauge!("oncehook_refund_oldest_open_seconds").set(oldest);
        metrics::gauge!("oncehook_refunds_paused").set(if paused { 1.0 } else { 0.0 });
        Ok(())
    }

    /// One pass: decide, send, gauges.
    pub async fn pass(&self, shutdown: &Shutdown) -> Result<(), RefundError> {
        self.decide().await?;
        self.send_due(shutdown).await?;
        self.gauges().await
    }
}

/// Runs passes until shutdown (returns at once when every source's mode
/// is `off`). Shared: the worker starts it again after a panic, and its
/// counters start at zero without resetting (`increment(0)`).
pub async fn run_scheduled(refunder: Arc<Refunder>, shutdown: Shutdown) {
    if !refunder.config().any_on() {
        tracing::info!("refunds are off for every source: the refunder does not run");
        return;
    }
    for outcome in ["sent", "refused", "retry"] {
        for s in &refunder.sources {
            metrics::counter!("oncehook_refund_attempts_total", "gateway" => s.gateway.as_str(), "outcome" => outcome)
                .increment(0);
        }
    }
    tracing::info!(interval = ?refunder.config().interval, "refunder started");
    for outcome in ["completed", "failed"] {
        metrics::counter!("oncehook_refund_passes_total", "outcome" => outcome).increment(0);
    }
    Periodic::every("refunder", refunder.config().interval)
        .run(&shutdown, || async {
            let result = tokio::select! {
                r = refunder.pass(&shutdown) => r,
                () = shutdown.wait() => return Ok(Next::Stop),
            };
            let outcome = if result.is_ok() {
                "completed"
            } else {
                "failed"
            };
            metrics::counter!("oncehook_refund_passes_total", "outcome" => outcome).increment(1);
            result.map(|()| Next::Pause)
        })
        .await;
}
