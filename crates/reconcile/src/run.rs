//! One reconciliation pass: take the orders in scope, ask each source
//! about them (every source on its own task, within the run's budget and
//! its own pace), and settle each answer as it comes: the gateway
//! references it found registered, the facts it found looked up in the
//! ledger and the new ones published at once — so a source that is slow
//! or failing delays no other source's findings. Then mark as asked the
//! orders every call about which was answered, and report what each
//! gateway answered.
//!
//! A source whose call still fails after its retries (a 5xx, a timeout, a
//! lost connection, a 429 that outlasts its waits), or that refuses the
//! credentials, is given up for the rest of the pass: no more calls to it;
//! the order it was asking about and those it did not reach stay unmarked,
//! so the next pass asks them first.
//!
//! The facts found are keyed as the ledger keys them (an attempt by
//! gateway, payment and status; a refund by its id — the gateways crate's
//! one [`NormalizedEvent::fact`]), so a fact found twice
//! in a run (a Stripe event and the intent it is about) is published once,
//! and one the ledger has is never published again.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use oncehook_common::Config;
use oncehook_common::config::{BrokerConfig, ReconcileConfig};
use oncehook_common::contended::{self, Contention};
use oncehook_common::store::Pooled;
use oncehook_gateway_api::store::{self as orders, DueOrder, PaidWindow, Selection};
use oncehook_gateways::NormalizedEvent;
use oncehook_gateways::reconcile::Ask;
use oncehook_ledger::store::books::GatewayRef;
use oncehook_ledger::{EffectError, Known, Ledger};
use time::OffsetDateTime;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::ask;
use crate::limits::Budget;
use crate::report::{CallReport, Report, SourceReport};
use crate::settle::Settle;
pub use crate::settle::fact_key;
use crate::source::ask_source;
use crate::store;
use oncehook_common::store::scope::Scope as TenantScope;
use oncehook_common::tenant::TenantId;
use oncehook_gateway_api::PublishError;
use oncehook_gateway_api::{ApiSource, CallError, Client};

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

impl Contention for RunError {
    fn contention(&self) -> Option<String> {
        match self {
            RunError::Database(e) => e.contention(),
            _ => None,
        }
    }
}

/// The reconciler: the sources it may ask and how.
#[derive(Clone)]
pub struct Reconciler {
    /// In the default tenant's scope: the run's lock and bookkeeping. A
    /// pass over one tenant's sources works in that tenant's scope.
    pub(crate) pool: Pooled,
    /// As given: what each tenant's scope is taken from.
    base: Pooled,
    sources: Vec<ApiSource>,
    config: ReconcileConfig,
    pub(crate) broker: BrokerConfig,
    client: Client,
    /// Registers the references found (its email relay also polls).
    ledger: Ledger,
}

impl Reconciler {
    /// The sources of `config` that have a `[source.api]`. Each source is
    /// asked about its own tenant's orders only, in that tenant's scope
    /// (docs/tenants.md): two shops' `order_1042` are two orders, each
    /// asked of its own shop's account.
    pub fn new(config: &Config, pool: Pooled) -> Result<Reconciler, RunError> {
        Ok(Reconciler {
            pool: pool.scoped(TenantScope::tenant(TenantId::default_tenant())),
            base: pool,
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
    /// source; `dry_run` publishes and records nothing. Each tenant's
    /// sources are asked about its orders, in its scope, one tenant after
    /// another.
    pub async fn run(
        &self,
        scope: &Scope,
        only: Option<&str>,
        dry_run: bool,
    ) -> Result<Report, RunError> {
        let mut tenants: Vec<(TenantId, Vec<ApiSource>)> = Vec::new();
        for source in self.chosen(only)? {
            match tenants.iter_mut().find(|(t, _)| *t == source.tenant) {
                Some((_, group)) => group.push(source),
                None => tenants.push((source.tenant.clone(), vec![source])),
            }
        }
        let mut report = Report {
            dry_run,
            orders: Vec::new(),
            sources: Vec::new(),
            published: 0,
        };
        for (tenant, sources) in tenants {
            let mut within = self.clone();
            within.pool = self.base.scoped(TenantScope::tenant(tenant));
            let part = within.pass(scope, &sources, dry_run).await?;
            report.orders.extend(part.orders);
            report.sources.extend(part.sources);
            report.published += part.published;
        }
        if let Scope::Order(r) = scope
            && report.orders.is_empty()
        {
            return Err(RunError::NoOrder(r.clone()));
        }
        Ok(report)
    }

    /// One pass of one tenant's `sources` over its orders (the pool is in
    /// its scope).
    async fn pass(
        &self,
        scope: &Scope,
        sources: &[ApiSource],
        dry_run: bool,
    ) -> Result<Report, RunError> {
        let orders = orders::due_orders(&self.pool, &self.selection(scope)).await?;
        let since = match scope {
            Scope::Order(_) => None,
            Scope::Since(d) => Some(*d),
            Scope::Scheduled => Some(self.config.horizon),
        };
        let (reports, published) = self
            .ask_and_settle(sources, &orders, since, dry_run)
            .await?;
        if !dry_run {
            // An order a source did not get to, or did not answer every
            // call about, is not marked: it waits at the front of the line.
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

    /// Asks every source about its orders, each on its own task, and
    /// settles each call's answer as it arrives (`Settle`); returns each
    /// source's report, in the order of `sources`, and how many facts were
    /// published. A database or broker failure ends the pass at once (the
    /// tasks still asking are dropped with it).
    async fn ask_and_settle(
        &self,
        sources: &[ApiSource],
        orders: &[DueOrder],
        since: Option<Duration>,
        dry_run: bool,
    ) -> Result<(Vec<SourceReport>, usize), RunError> {
        let budget = Arc::new(Budget::new(self.config.calls_per_run));
        let (answers, mut answered) = mpsc::unbounded_channel::<(usize, CallReport)>();
        let mut tasks = JoinSet::new();
        let mut lists: Vec<Vec<String>> = Vec::with_capacity(sources.len());
        for (i, source) in sources.iter().enumerate() {
            let work = self.work(source, orders, since);
            lists.push(work.iter().filter_map(|(o, _)| o.clone()).collect());
            let (client, budget, source) = (self.client.clone(), budget.clone(), source.clone());
            let per_second = self.config.calls_per_second;
            let answers = answers.clone();
            tasks.spawn(async move {
                let send = |call: CallReport| {
                    // The receiver is gone only when the pass ended early.
                    let _ = answers.send((i, call));
                };
                let report = ask_source(&client, &source, work, &budget, per_second, send).await;
                (i, report)
            });
        }
        // Every task holds its own sender: the channel closes when the
        // last one ends.
        drop(answers);
        let mut settle = Settle {
            reconciler: self,
            dry_run,
            seen: BTreeSet::new(),
            publisher: None,
            published: 0,
        };
        let mut calls: Vec<Vec<CallReport>> = sources.iter().map(|_| Vec::new()).collect();
        while let Some((i, mut call)) = answered.recv().await {
            settle.call(&sources[i], &mut call).await?;
            calls[i].push(call);
        }
        let published = settle.published;
        if let Some(p) = settle.publisher {
            p.close().await;
        }
        let mut reports: Vec<Option<SourceReport>> = sources.iter().map(|_| None).collect();
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok((i, r)) => reports[i] = Some(r),
                Err(e) => tracing::error!(error = %e, "a reconciliation task failed"),
            }
        }
        let reports = reports
            .into_iter()
            .zip(sources)
            .zip(calls.into_iter().zip(lists))
            .map(|((report, source), (calls, list))| {
                // A task that failed answered for none of its orders.
                let mut report = report.unwrap_or_else(|| SourceReport {
                    ok: false,
                    stopped: Some("its task failed".into()),
                    not_asked: list,
                    ..SourceReport::new(source)
                });
                report.calls = calls;
                report
            })
            .collect();
        Ok((reports, published))
    }

    /// What a source is asked in a pass: per order, the calls about it;
    /// calls about the whole window rather than one order (Stripe's
    /// undelivered events) first.
    fn work(
        &self,
        source: &ApiSource,
        orders: &[DueOrder],
        since: Option<Duration>,
    ) -> Vec<(Option<String>, Vec<Ask>)> {
        let mut work: Vec<(Option<String>, Vec<Ask>)> = orders
            .iter()
            .filter(|o| ask::asks_about(source.gateway, o))
            .map(|o| (Some(o.order_ref.clone()), ask::asks_for(source.gateway, o)))
            .filter(|(_, asks)| !asks.is_empty())
            .collect();
        if let Some(since) = since {
            let from = OffsetDateTime::now_utc() - since;
            let sweep = source.api.sweep(from.unix_timestamp());
            if !sweep.is_empty() {
                work.insert(0, (None, sweep));
            }
        }
        work
    }

    /// Registers with its order the gateway references a call found
    /// (Razorpay's orders by receipt), through the ledger, before the
    /// facts found under them are published: the worker then places those
    /// facts on the order, and later passes and webhooks find it by them.
    /// If publishing fails afterwards, the reference stays (it is true) and
    /// the next pass asks by it.
    pub(crate) async fn register_refs(
        &self,
        source: &ApiSource,
        call: &CallReport,
    ) -> Result<(), RunError> {
        let Some(order_ref) = call.order_ref.as_deref() else {
            return Ok(());
        };
        if call.refs.is_empty() {
            return Ok(());
        }
        let refs: Vec<GatewayRef> = call
            .refs
            .iter()
            .map(|r| GatewayRef {
                gateway: source.gateway.as_str().to_owned(),
                gateway_ref: r.clone(),
            })
            .collect();
        let done = contended::transaction("reconcile.register_refs", || async {
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
            Ok(done)
        })
        .await?;
        for r in done.refs {
            let theirs = r.owner.as_deref().filter(|o| *o != order_ref);
            if r.added {
                tracing::info!(source = %source.name, %order_ref, gateway_ref = %r.gateway_ref.gateway_ref, applied = done.applied, "gateway reference found by the reconciler registered with its order");
            } else if let Some(other) = theirs {
                tracing::warn!(source = %source.name, %order_ref, gateway_ref = %r.gateway_ref.gateway_ref, %other, "the gateway's order found for this order is registered for another order; left with it");
            }
        }
        Ok(())
    }

    /// Of the events an undelivered-events answer listed, those about
    /// oncehook's orders (the rest are another business's).
    pub(crate) async fn about_our_orders(
        &self,
        source: &ApiSource,
        events: Vec<NormalizedEvent>,
    ) -> Result<Vec<NormalizedEvent>, RunError> {
        if events.is_empty() {
            return Ok(events);
        }
        let names: Vec<(Option<String>, Option<String>)> = events
            .iter()
            .map(|e| (e.order_ref.clone(), e.payment_id.clone()))
            .collect();
        let known = store::name_known_orders(&self.pool, source.gateway.as_str(), &names).await?;
        Ok(events
            .into_iter()
            .zip(known)
            .filter_map(|(e, k)| k.then_some(e))
            .collect())
    }
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
