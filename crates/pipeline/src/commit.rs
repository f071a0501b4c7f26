//! The one transaction path: a group of deliveries (a lone delivery is a
//! group of one) in one transaction — claim all (insert-first: a copy
//! under the same event id, or of the same signed body under another, is a
//! duplicate and only counted, copies inside the group too) with the
//! effect's advisory locks for the fresh ones, apply the effect to the
//! fresh ones, record every outcome with the emails it queued, commit. The
//! statements do not grow with the group: one claim, the effect's own
//! (set-based), one outcome update. This is the
//! only place in the worker where a delivery's transaction commits.
//!
//! Each tenant's deliveries of the group run in that tenant's scope:
//! PostgreSQL keeps their statements to that tenant's rows
//! (docs/tenants.md). A group of several tenants' deliveries is still one
//! transaction — one `BEGIN`, one `COMMIT`, one WAL flush — whose scope is
//! switched from one tenant's part to the next (`scope::switch`): traffic
//! spread over many shops commits as cheaply per group as one shop's.
//!
//! Any error rolls everything back, the claims too (so a replay after the
//! cause is fixed is processed, not absorbed); `group` then redoes each
//! delivery of a failed group alone, through this same function.

use std::collections::HashSet;
use std::time::Instant;

use oncehook_common::dead_letter::DeadLetterKind;
use oncehook_common::otel;
use oncehook_common::store::Pooled;
use oncehook_common::store::advisory::LockName;
use oncehook_common::store::dedup as dedup_store;
use oncehook_common::store::scope::{self, Scope};
use oncehook_common::tenant::TenantId;
use sqlx::PgConnection;
use tracing::Instrument as _;

use super::{Delivery, Effect, Effects, ProcessError, Processed, Rejection};

/// Commits `deliveries` in one transaction; the results are in their
/// order. An error means nothing was committed.
pub async fn commit<E: Effect>(
    pool: &Pooled,
    effect: &E,
    deliveries: &[&Delivery],
) -> Result<Vec<Processed>, ProcessError> {
    let started = Instant::now();
    // The group's transaction is one span of its own, linked to the trace
    // of every delivery in it (each delivery keeps its own trace).
    let span = tracing::info_span!(
        "commit",
        otel.name = "commit group",
        db.system.name = "postgresql",
        oncehook.deliveries = deliveries.len(),
    );
    for d in deliveries {
        if let Some(tp) = &d.trace_parent {
            otel::link(&span, tp);
        }
    }
    let results = transaction(pool, effect, deliveries)
        .instrument(span)
        .await
        .map_err(|err| name_the_event(err, deliveries))?;
    metrics::histogram!("oncehook_worker_transaction_duration_seconds")
        .record(started.elapsed().as_secs_f64());
    metrics::histogram!("oncehook_worker_batch_size").record(deliveries.len() as f64);
    Ok(results)
}

async fn transaction<E: Effect>(
    pool: &Pooled,
    effect: &E,
    deliveries: &[&Delivery],
) -> Result<Vec<Processed>, ProcessError> {
    let parts = by_tenant(deliveries);
    let first = parts
        .first()
        .map(|(tenant, _)| (*tenant).clone())
        .unwrap_or_else(TenantId::default_tenant);
    let mut tx = pool.begin_generic_in(&Scope::tenant(first)).await?;
    let mut results: Vec<Option<Processed>> = vec![None; deliveries.len()];
    for (n, (tenant, indexes)) in parts.iter().enumerate() {
        if n > 0 {
            scope::switch(&mut tx, tenant.as_str()).await?;
        }
        let part: Vec<&Delivery> = indexes.iter().map(|&i| deliveries[i]).collect();
        for (i, processed) in indexes
            .iter()
            .zip(apply_part(&mut tx, effect, &part).await?)
        {
            results[*i] = Some(processed);
        }
    }
    tx.commit().await?;
    Ok(results
        .into_iter()
        .map(|r| r.unwrap_or(Processed::Duplicate { same_body_as: None }))
        .collect())
}

/// The deliveries' indexes by tenant, in the order each tenant's first
/// delivery came.
fn by_tenant<'a>(deliveries: &[&'a Delivery]) -> Vec<(&'a TenantId, Vec<usize>)> {
    let mut parts: Vec<(&TenantId, Vec<usize>)> = Vec::new();
    for (i, d) in deliveries.iter().enumerate() {
        let tenant = &d.envelope.tenant;
        match parts.iter_mut().find(|(t, _)| *t == tenant) {
            Some((_, indexes)) => indexes.push(i),
            None => parts.push((tenant, vec![i])),
        }
    }
    parts
}

/// One tenant's part of the group, in its scope: claim, apply the effect
/// to the fresh deliveries, record every outcome; the results in the
/// part's order.
async fn apply_part<E: Effect>(
    tx: &mut PgConnection,
    effect: &E,
    deliveries: &[&Delivery],
) -> Result<Vec<Processed>, ProcessError> {
    let locks: Vec<Vec<LockName>> = deliveries.iter().map(|d| effect.locks(d)).collect();
    let duplicates = claim(tx, deliveries, &locks).await?;
    let fresh: Vec<&Delivery> = deliveries
        .iter()
        .zip(&duplicates)
        .filter(|(_, duplicate)| duplicate.is_none())
        .map(|(d, _)| *d)
        .collect();
    let effects = if fresh.is_empty() {
        Effects::default()
    } else {
        effect.apply(tx, &fresh).await?
    };
    if effects.applied.len() != fresh.len() {
        return Err(Rejection::new(
            DeadLetterKind::Database,
            format!(
                "the effect answered {} outcomes for {} deliveries",
                effects.applied.len(),
                fresh.len()
            ),
        )
        .into());
    }
    effects.record(tx, fresh.iter().map(|d| &d.key)).await?;
    let mut applied = effects.applied.into_iter();
    Ok(duplicates
        .into_iter()
        .map(|duplicate| {
            duplicate
                .or_else(|| applied.next().map(Processed::Done))
                .unwrap_or(Processed::Duplicate { same_body_as: None })
        })
        .collect())
}

/// Claims every delivery and takes the effect's advisory locks of the
/// fresh ones (`locks`, one list per delivery), in the same statement:
/// `Some` for a duplicate, `None` for a fresh claim, in the deliveries'
/// order. One statement cannot claim one signed
/// body twice, so copies inside the group are claimed in a round after
/// their first (where they meet it as a duplicate): one statement for a
/// group without copies, one more per extra copy of a body.
async fn claim(
    tx: &mut PgConnection,
    deliveries: &[&Delivery],
    locks: &[Vec<LockName>],
) -> Result<Vec<Option<Processed>>, sqlx::Error> {
    let mut results: Vec<Option<Option<Processed>>> = vec![None; deliveries.len()];
    let mut left: Vec<usize> = (0..deliveries.len()).collect();
    while !left.is_empty() {
        let mut bodies = HashSet::new();
        let (round, later): (Vec<usize>, Vec<usize>) = left
            .iter()
            .partition(|&&i| bodies.insert(deliveries[i].key.signed_body()));
        let claims: Vec<_> = round
            .iter()
            .map(|&i| deliveries[i].claim(&locks[i]))
            .collect();
        for (i, claimed) in round
            .iter()
            .zip(dedup_store::claim_many(tx, &claims).await?)
        {
            results[*i] = Some(Processed::duplicate(claimed));
        }
        left = later;
    }
    Ok(results.into_iter().map(Option::flatten).collect())
}

/// A lone delivery's permanent database error names its event.
fn name_the_event(err: ProcessError, deliveries: &[&Delivery]) -> ProcessError {
    match (err, deliveries) {
        (ProcessError::Permanent(mut rejection), [lone]) => {
            let event = &lone.event;
            if !rejection.message.contains(&event.event_id) {
                rejection.message = format!(
                    "{} event {} ({}): {}",
                    event.provider, event.event_id, event.event_type, rejection.message
                );
            }
            ProcessError::Permanent(rejection)
        }
        (err, _) => err,
    }
}
