//! One reconciliation pass: take the orders in scope, ask each source
//! about them (every source on its own task, within the run's budget and
//! its own pace), look up which of the facts found the ledger has already,
//! publish the new ones, and report what each gateway answered.
//!
//! The facts found are keyed as the ledger keys them (an attempt by
//! gateway, payment and status; a refund by its id — the gateways crate's
//! one [`NormalizedEvent::fact`]), so a fact found twice
//! in a run (a Stripe event and the intent it is about) is published once,
//! and one the ledger has is never published again.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use oncehook_common::config::{BrokerConfig, ReconcileConfig};
use oncehook_common::store::Pooled;
use oncehook_common::store::reconcile::{self as store, DueOrder, FactKey, PaidWindow, Selection};
use oncehook_common::{Config, Envelope};
use oncehook_gateways::reconcile::Ask;
use oncehook_gateways::{Fact, NormalizedEvent};
use oncehook_ledger::store::books::GatewayRef;
use oncehook_ledger::{EffectError, Known, Ledger};
use time::OffsetDateTime;
use tokio::task::JoinSet;

use crate::ask;
use crate::client::{ApiSource, CallError, Client};
use crate::limits::{self, Budget, Pace};
use crate::publish::{PublishError, Publisher};
use crate::report::{CallReport, FactReport, Found, Report, SourceReport};

/// Which orders a pass asks about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// `pending` orders aged between `[reconcile] after` and `horizon`,
    /// and orders paid within `paid_horizon` not asked about within
    /// `paid_interval` (a refund whose webhook was lost).
    Scheduled,
    /// `pending` orders created within this long ago.
    Since(Duration),
    /// One order, whatever its status and age.
    Order(String),
}

/// Why a pass could not run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("reading the orders to reconcile: {0}")]
    Database(#[from] sqlx::Error),
    #[error(transparent)]
    Publish(#[from] PublishError),
    #[error("no order {0:?}")]
    NoOrder(String),
    #[error("no source {0:?} with a [source.api] (sources that have one: {1})")]
    NoSource(String, String),
    #[error("building the HTTP client: {0}")]
    Client(CallError),
    #[error("registering the gateway references found for order {0:?}: {1}")]
    Ledger(String, String),
}

/// The reconciler: the sources it may ask and how.
#[derive(Clone)]
pub struct Reconciler {
    pool: Pooled,
    sources: Vec<ApiSource>,
    config: ReconcileConfig,
    broker: BrokerConfig,
    client: Client,
    /// Registers the references found (its email relay also polls).
    ledger: Ledger,
}

impl Reconciler {
    /// The sources of `config` that have a `[source.api]`.
    pub fn new(config: &Config, pool: Pooled) -> Result<Reconciler, RunError> {
        Ok(Reconciler {
            pool,
            sources: ApiSource::all(config),
            config: config.reconcile.clone(),
            broker: config.broker.clone(),
            client: Client::new(config.reconcile.timeout).map_err(RunError::Client)?,
            ledger: Ledger::default(),
        })
    }

    pub fn sources(&self) -> &[ApiSource] {
        &self.sources
    }

    pub fn config(&self) -> &ReconcileConfig {
        &self.config
    }

    pub fn pool(&self) -> &Pooled {
        &self.pool
    }

    /// One pass over `scope`, asking `only` (a source name) or every
    /// source; `dry_run` publishes and records nothing.
    pub async fn run(
        &self,
        scope: &Scope,
        only: Option<&str>,
        dry_run: bool,
    ) -> Result<Report, RunError> {
        let sources = self.chosen(only)?;
        let orders = store::due_orders(&self.pool, &self.selection(scope)).await?;
        if let Scope::Order(r) = scope
            && orders.is_empty()
        {
            return Err(RunError::NoOrder(r.clone()));
        }
        let since = match scope {
            Scope::Order(_) => None,
            Scope::Since(d) => Some(*d),
            Scope::Scheduled => Some(self.config.horizon),
        };
        let mut reports = self.ask_all(&sources, &orders, since).await;
        if !dry_run {
            self.register_refs(&reports).await?;
        }
        let published = self.settle(&mut reports, dry_run).await?;
        if !dry_run {
            // An order a source did not get to waits at the front of the line.
            let skipped: BTreeSet<&str> = reports
                .iter()
                .flat_map(|r| r.not_asked.iter().map(String::as_str))
                .collect();
            let ids: Vec<i64> = orders
                .iter()
                .filter(|o| !skipped.contains(o.order_ref.as_str()))
                .map(|o| o.id)
                .collect();
            store::mark_checked(&self.pool, &ids).await?;
        }
        // A source succeeded when it answered every call of the pass (and
        // was asked at least one: a pass with nothing to ask proves nothing).
        let now = OffsetDateTime::now_utc().unix_timestamp() as f64;
        for r in reports.iter().filter(|r| r.ok && !r.calls.is_empty()) {
            metrics::gauge!("oncehook_reconcile_last_success_timestamp_seconds", "source" => r.source.clone())
                .set(now);
        }
        Ok(Report {
            dry_run,
            orders: orders.iter().map(|o| o.order_ref.clone()).collect(),
            sources: reports,
            published,
        })
    }

    /// The sources a pass asks.
    fn chosen(&self, only: Option<&str>) -> Result<Vec<ApiSource>, RunError> {
        match only {
            None => Ok(self.sources.clone()),
            Some(name) => match self.sources.iter().find(|s| s.name == name) {
                Some(s) => Ok(vec![s.clone()]),
                None => Err(RunError::NoSource(name.to_owned(), names(&self.sources))),
            },
        }
    }

    fn selection(&self, scope: &Scope) -> Selection {
        let limit = i64::from(self.config.calls_per_run);
        match scope {
            Scope::Scheduled => Selection::Window {
                after: self.config.after,
                horizon: self.config.horizon,
                paid: Some(PaidWindow {
                    interval: self.config.paid_interval,
                    horizon: self.config.paid_horizon,
                }),
                limit,
            },
            Scope::Since(d) => Selection::Window {
                after: Duration::ZERO,
                horizon: *d,
                paid: None,
                limit,
            },
            Scope::Order(r) => Selection::One(r.clone()),
        }
    }

    /// Asks every source about its orders, each on its own task.
    async fn ask_all(
        &self,
        sources: &[ApiSource],
        orders: &[DueOrder],
        since: Option<Duration>,
    ) -> Vec<SourceReport> {
        let budget = Arc::new(Budget::new(self.config.calls_per_run));
        let mut tasks = JoinSet::new();
        for (i, source) in sources.iter().enumerate() {
            let mut work: Vec<(Option<String>, Vec<Ask>)> = orders
                .iter()
                .filter(|o| ask::asks_about(source.gateway, o))
                .map(|o| (Some(o.order_ref.clone()), ask::asks_for(source.gateway, o)))
                .filter(|(_, asks)| !asks.is_empty())
                .collect();
            // Calls about the whole window rather than one order
            // (Stripe's undelivered events) go first.
            if let Some(since) = since {
                let from = OffsetDateTime::now_utc() - since;
                let sweep = source.api.sweep(from.unix_timestamp());
                if !sweep.is_empty() {
                    work.insert(0, (None, sweep));
                }
            }
            let (client, budget, source) = (self.client.clone(), budget.clone(), source.clone());
            let per_second = self.config.calls_per_second;
            tasks.spawn(async move {
                (
                    i,
                    ask_source(&client, &source, work, &budget, per_second).await,
                )
            });
        }
        let mut done: Vec<(usize, SourceReport)> = Vec::new();
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok(r) => done.push(r),
                Err(e) => tracing::error!(error = %e, "a reconciliation task failed"),
            }
        }
        done.sort_by_key(|(i, _)| *i);
        done.into_iter().map(|(_, r)| r).collect()
    }

    /// Registers with their orders the gateway references the answers
    /// found (Razorpay's orders by receipt), through the ledger, before the
    /// facts found under them are published: the worker then places those
    /// facts on the order, and later passes and webhooks find it by them.
    /// If publishing fails afterwards, the reference stays (it is true) and
    /// the next pass asks by it.
    async fn register_refs(&self, reports: &[SourceReport]) -> Result<(), RunError> {
        for report in reports {
            for call in report.calls.iter().filter(|c| !c.refs.is_empty()) {
                let Some(order_ref) = call.order_ref.as_deref() else {
                    continue;
                };
                let refs: Vec<GatewayRef> = call
                    .refs
                    .iter()
                    .map(|r| GatewayRef {
                        gateway: report.gateway.clone(),
                        gateway_ref: r.clone(),
                    })
                    .collect();
                let mut tx = self.pool.begin().await?;
                let known = Known {
                    order_ref,
                    gateway_refs: &refs,
                };
                let done = match self.ledger.apply(&mut tx, known).await {
                    Ok(done) => done,
                    Err(EffectError::Database(e)) => return Err(RunError::Database(e)),
                    Err(EffectError::Permanent(e)) => {
                        return Err(RunError::Ledger(order_ref.to_owned(), e.to_string()));
                    }
                };
                tx.commit().await?;
                for r in done.refs {
                    let theirs = r.owner.as_deref().filter(|o| *o != order_ref);
                    if r.added {
                        tracing::info!(source = %report.source, %order_ref, gateway_ref = %r.gateway_ref.gateway_ref, applied = done.applied, "gateway reference found by the reconciler registered with its order");
                    } else if let Some(other) = theirs {
                        tracing::warn!(source = %report.source, %order_ref, gateway_ref = %r.gateway_ref.gateway_ref, %other, "the gateway's order found for this order is registered for another order; left with it");
                    }
                }
            }
        }
        Ok(())
    }

    /// Decides what each fact found is (recorded already, or missing) and
    /// publishes the missing ones; returns how many were published.
    async fn settle(&self, reports: &mut [SourceReport], dry_run: bool) -> Result<usize, RunError> {
        let mut seen: BTreeSet<FactKey> = BTreeSet::new();
        let mut found: Vec<(usize, usize, NormalizedEvent, FactKey)> = Vec::new();
        for (s, report) in reports.iter_mut().enumerate() {
            let relevant = self.relevant(report).await?;
            for (c, call) in report.calls.iter_mut().enumerate() {
                for event in std::mem::take(&mut call.events) {
                    let Some(key) = fact_key(&event) else {
                        continue;
                    };
                    if !relevant.contains(&event.event_id) && call.order_ref.is_none() {
                        continue;
                    }
                    if seen.insert(key.clone()) {
                        found.push((s, c, event, key));
                    }
                }
            }
        }
        let keys: Vec<FactKey> = found.iter().map(|(.., k)| k.clone()).collect();
        let recorded = store::recorded(&self.pool, &keys).await?;
        let missing = found.iter().zip(&recorded).filter(|(_, r)| !**r).count();
        let publisher = if dry_run || missing == 0 {
            None
        } else {
            Some(Publisher::connect(&self.broker).await?)
        };
        let mut published = 0;
        for ((s, c, event, _), recorded) in found.into_iter().zip(recorded) {
            let source = reports[s].source.clone();
            let found = if recorded {
                Found::AlreadyRecorded
            } else {
                Found::MissingWebhook
            };
            metrics::counter!("oncehook_reconcile_facts_total", "source" => source.clone(), "found" => found.as_str())
                .increment(1);
            let mut fact = FactReport::of(&event, found);
            if let (Some(publisher), Found::MissingWebhook) = (&publisher, found) {
                publisher
                    .publish(&Envelope::reconciled(&source, event))
                    .await?;
                fact.published = true;
                published += 1;
            }
            reports[s].calls[c].facts.push(fact);
        }
        if let Some(p) = publisher {
            p.close().await;
        }
        Ok(published)
    }

    /// The event ids of a source's undelivered-event answers that are
    /// about oncehook's orders (the rest are another business's).
    async fn relevant(&self, report: &SourceReport) -> Result<BTreeSet<String>, RunError> {
        let events: Vec<&NormalizedEvent> = report
            .calls
            .iter()
            .filter(|c| c.order_ref.is_none())
            .flat_map(|c| &c.events)
            .collect();
        let names: Vec<(Option<String>, Option<String>)> = events
            .iter()
            .map(|e| (e.order_ref.clone(), e.payment_id.clone()))
            .collect();
        let known = store::name_known_orders(&self.pool, &report.gateway, &names).await?;
        Ok(events
            .iter()
            .zip(known)
            .filter(|(_, k)| *k)
            .map(|(e, _)| e.event_id.clone())
            .collect())
    }
}

/// Asks one source everything on its list, following up answers, until
/// the list is done, the budget is spent or the credentials are refused.
async fn ask_source(
    client: &Client,
    source: &ApiSource,
    work: Vec<(Option<String>, Vec<Ask>)>,
    budget: &Budget,
    per_second: u32,
) -> SourceReport {
    let mut report = SourceReport::new(source);
    let mut pace = Pace::new(per_second);
    let mut work = work.into_iter();
    while let Some((order_ref, asks)) = work.next() {
        let mut queue: std::collections::VecDeque<Ask> = asks.into();
        let mut asked: Vec<Ask> = Vec::new();
        while let Some(ask) = queue.pop_front() {
            let result = limits::call(client, source, &ask, budget, &mut pace).await;
            let mut call = CallReport::new(order_ref.clone(), source.api.describe(&ask));
            match result {
                Ok(answer) => {
                    call.status = Some(answer.status);
                    let more = answer.follow_ups;
                    asked.push(ask);
                    let planned: Vec<Ask> = asked.iter().chain(queue.iter()).cloned().collect();
                    queue.extend(ask::not_yet_asked(more, &planned));
                    call.events = answer.facts;
                    call.refs = answer.refs;
                    report.calls.push(call);
                }
                Err(err @ (CallError::Credentials { .. } | CallError::Budget)) => {
                    if let CallError::Credentials { status } = err {
                        report.ok = false;
                        call.error = Some(err.to_string());
                        report.calls.push(call);
                        tracing::error!(
                            source = %source.name,
                            status,
                            "the gateway refused the reconciler's credentials: check [source.api] of source {}",
                            source.name
                        );
                    }
                    report.stopped = Some(err.to_string());
                    // This order and the rest wait for the next run.
                    report.not_asked.extend(order_ref);
                    report
                        .not_asked
                        .extend(work.filter_map(|(order_ref, _)| order_ref));
                    return report;
                }
                Err(err) => {
                    report.ok = false;
                    tracing::warn!(source = %source.name, order_ref = ?order_ref, call = %call.call, error = %err, "gateway API call given up for this run");
                    call.error = Some(err.to_string());
                    report.calls.push(call);
                }
            }
        }
    }
    report
}

/// The fact an event records, keyed as the ledger keys it (by the
/// gateways crate's [`NormalizedEvent::fact`], as the ledger records it);
/// `None` for an event that records none, or that the ledger would refuse
/// for lack of a field.
pub fn fact_key(event: &NormalizedEvent) -> Option<FactKey> {
    Some(match event.fact().ok()?? {
        Fact::Attempt {
            provider,
            payment_id,
            status,
        } => FactKey::Attempt {
            provider: provider.as_str().to_owned(),
            payment_id,
            status: status.to_owned(),
        },
        Fact::Refund {
            provider,
            refund_id,
            ..
        } => FactKey::Refund {
            provider: provider.as_str().to_owned(),
            refund_id,
        },
    })
}

fn names(sources: &[ApiSource]) -> String {
    if sources.is_empty() {
        return "none".into();
    }
    sources
        .iter()
        .map(|s| s.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}
