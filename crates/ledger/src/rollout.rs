//! Catching up what an older release wrote during a rollout
//! (docs/operations.md, "Deploying a new version"), through the ledger's
//! `CatchUp` road. Two callers: the contract step (`oncehookctl migrate
//! --finish`) catches up every order changed since the window opened
//! ([`changed_since`]) and every owed payment without an intent
//! ([`owed_without_intent`]); every worker sweeps for the latter once at
//! start and then every few seconds while a rollout window is open
//! ([`run_sweep`]), so an older binary's owed payment gets its intent
//! while the roll is still going, and none can stay without one.

use std::time::Duration;

use oncehook_common::contended;
use oncehook_common::periodic::{Next, Periodic};
use oncehook_common::shutdown::Shutdown;
use oncehook_common::store::Pooled;
use oncehook_common::store::scope::Scope;
use oncehook_common::tenant::TenantId;
use sqlx::PgConnection;
use time::OffsetDateTime;

use crate::input::CatchUp;
use crate::roads;
use crate::store::reads;
use crate::store::refund_intents::minting;
use oncehook_pipeline::EffectError;

/// Orders caught up in one transaction.
const PAGE: i64 = 200;

/// How often a worker looks for owed payments without an intent.
const SWEEP_EVERY: Duration = Duration::from_secs(5);

/// What a catch-up did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CaughtUp {
    /// Orders recomputed.
    pub orders: u64,
    /// Refund intents that did not exist before.
    pub intents_minted: u64,
}

/// Catches up every order changed since `since` (the rollout window's
/// start), a page per transaction, in reference order.
pub async fn changed_since(db: &Pooled, since: OffsetDateTime) -> Result<CaughtUp, EffectError> {
    pages(db, Selection::ChangedSince(since)).await
}

/// Catches up every order with a captured payment owed back (flagged
/// `needs_refund` or `amount_mismatch`, its amount known) that has no
/// refund intent, a page per transaction.
pub async fn owed_without_intent(db: &Pooled) -> Result<CaughtUp, EffectError> {
    pages(db, Selection::OwedWithoutIntent).await
}

/// Which orders a catch-up pages through.
#[derive(Debug, Clone, Copy)]
enum Selection {
    ChangedSince(OffsetDateTime),
    OwedWithoutIntent,
}

impl Selection {
    /// The next page's references, after `after`.
    async fn page(self, conn: &mut PgConnection, after: &str) -> Result<Vec<String>, sqlx::Error> {
        match self {
            Selection::ChangedSince(since) => {
                reads::orders_changed_since(conn, since, after, PAGE).await
            }
            Selection::OwedWithoutIntent => {
                minting::orders_owing_without_intent(conn, after, PAGE).await
            }
        }
    }
}

/// Pages through the orders `selection` names, catching each page up in
/// its own transaction; a page shorter than [`PAGE`] is the last.
async fn pages(db: &Pooled, selection: Selection) -> Result<CaughtUp, EffectError> {
    let mut done = CaughtUp::default();
    let mut after = String::new();
    loop {
        let page = contended::transaction("catch_up.page", || page(db, selection, &after)).await?;
        let Some((refs, found, minted)) = page else {
            return Ok(done);
        };
        let last = refs.last().cloned().unwrap_or_default();
        done.orders += found as u64;
        done.intents_minted += u64::try_from(minted).unwrap_or(0);
        if (refs.len() as i64) < PAGE {
            return Ok(done);
        }
        after = last;
    }
}

/// One page after `after`, caught up in one transaction: its references,
/// the orders found and the intents minted; `None` when none is left.
async fn page(
    db: &Pooled,
    selection: Selection,
    after: &str,
) -> Result<Option<(Vec<String>, usize, i64)>, EffectError> {
    // What an older release wrote is the default tenant's (it knows no
    // other): the catch-up works in that tenant's scope, so a page's
    // references name its orders only and what it mints is its.
    let scope = Scope::tenant(TenantId::default_tenant());
    let mut tx = db.begin_in(&scope).await?;
    let refs = selection.page(&mut tx, after).await?;
    if refs.is_empty() {
        tx.commit().await?;
        return Ok(None);
    }
    let before = minting::count_of_orders(&mut tx, &refs).await?;
    let found = roads::take(&mut tx, CatchUp { order_refs: &refs }).await?;
    let minted = minting::count_of_orders(&mut tx, &refs)
        .await?
        .saturating_sub(before);
    tx.commit().await?;
    Ok(Some((refs, found, minted)))
}

/// Mints the refund intents of owed payments that have none (an older
/// release's binary recorded them during a roll), by catching their
/// orders up: once at start, then every few seconds while a rollout
/// window is open (`schema_rollouts`; outside one, only this release's
/// ledger records facts, and it mints every intent itself), so a quiet
/// deployment pays one small read per pass. Safe in every worker at once:
/// the orders' locks serialise them, and a second catch-up writes nothing
/// new.
pub async fn run_sweep(db: Pooled, stop: Shutdown) {
    let db = &db;
    let started = &std::sync::atomic::AtomicBool::new(false);
    Periodic::every("refund-intent sweep", SWEEP_EVERY)
        .jitter(SWEEP_EVERY / 5)
        .first_after_a_pause()
        .logs(
            "sweeping for owed payments without a refund intent failed; will retry",
            "owed payments are swept again",
        )
        .run(&stop, move || async move {
            let first = !started.load(std::sync::atomic::Ordering::Relaxed);
            if !first
                && oncehook_common::store::schema::open_window(db)
                    .await?
                    .is_none()
            {
                return Ok::<_, EffectError>(Next::Pause);
            }
            let done = owed_without_intent(db).await?;
            started.store(true, std::sync::atomic::Ordering::Relaxed);
            if done.orders > 0 {
                tracing::warn!(
                    orders = done.orders,
                    intents_minted = done.intents_minted,
                    "owed payments had no refund intent (recorded by an older release?): caught up"
                );
                metrics::counter!("oncehook_refund_intents_swept_total")
                    .increment(done.intents_minted);
            }
            Ok::<_, EffectError>(Next::Pause)
        })
        .await;
}
